"""The commit role sglang builds, from what the real git ls-remote lists for a local repository
with a branch, a lightweight tag, an annotated tag and a tag and a branch of one name; the
truth is git rev-parse REF^{commit} (this choice was Jinja in roles/sglang/tasks/install.yml)."""
import pytest

from ansible_collections.pro6000.inference.plugins.filter.sglang_git_commit import sglang_git_commit
from support import git, git_history


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return git_history(tmp_path_factory.mktemp("sglang-git"), 3, {
        0: [["tag", "-a", "-m", "release", "v0.5.14"],  # annotated: its object is not a commit
            ["tag", "light"]],
        1: [["branch", "release"], ["tag", "-a", "-m", "same name as a branch", "both"], ["branch", "both", "HEAD~1"]]})


def ls_remote(repo, ref):
    return git(repo, "ls-remote", "--", str(repo), ref, ref + "^{}").splitlines()


@pytest.mark.parametrize("ref", ["v0.5.14", "light", "release", "main", "HEAD", "refs/tags/v0.5.14", "both"])
def test_a_ref_resolves_to_the_commit_git_names(repo, ref):
    assert sglang_git_commit(ls_remote(repo, ref), ref) == git(repo, "rev-parse", ref + "^{commit}")


def test_an_annotated_tag_gives_its_commit_not_the_tag_object(repo):
    lines = ls_remote(repo, "v0.5.14")
    assert git(repo, "rev-parse", "v0.5.14") in [line.split("\t")[0] for line in lines]
    assert sglang_git_commit(lines, "v0.5.14") != git(repo, "rev-parse", "v0.5.14")


def test_a_ref_the_repository_lacks_gives_an_empty_answer(repo):
    assert sglang_git_commit(ls_remote(repo, "v9.9.9"), "v9.9.9") == ""


def test_a_pinned_commit_or_a_commit_ref_is_taken_without_a_listing(repo):
    head = git(repo, "rev-parse", "HEAD")
    assert sglang_git_commit([], head) == head
    assert sglang_git_commit(ls_remote(repo, "main"), "main", commit="a" * 40) == "a" * 40
    assert sglang_git_commit([], "main") == ""

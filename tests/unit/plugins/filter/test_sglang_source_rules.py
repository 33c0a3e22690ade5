"""Role sglang builds only what is pinned (issue #37, item 5): a ref that is not a commit is refused
unless sglang_git_commit pins it or sglang_git_ref_floating follows it on purpose, a pin the ref
moved away from is refused, and an index install takes one exact release. What the ref resolves
to comes from the real git ls-remote of a local repository; the truth is git rev-parse."""
import subprocess

import pytest

from ansible_collections.pro6000.inference.plugins.filter.sglang_source_rules import sglang_source_rules
from support import GIT_ENV, git

PR = "refs/pull/29907/head"


def commit(repo, text):
    (repo / "f").write_text(text)
    git(repo, "add", "f")
    git(repo, "commit", "-q", "-m", text)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(name="repo")
def fixture_repo(tmp_path):
    """A repository with a tag, a branch and a pull request ref, as the SGLang repository exposes them."""
    git(tmp_path, "init", "-q", "-b", "main")
    commit(tmp_path, "release")
    git(tmp_path, "tag", "-a", "-m", "release", "v0.5.23")
    git(tmp_path, "update-ref", PR, commit(tmp_path, "ddtree"))
    return tmp_path


def ls_remote(repo, ref):
    """What the role registers from the same command (tasks/state.yml)."""
    result = subprocess.run(["git", "ls-remote", "--", str(repo), ref, ref + "^{}"], capture_output=True, text=True,
                            env=GIT_ENV, check=False)
    return {"rc": result.returncode, "stdout_lines": result.stdout.splitlines()}


def broken(source="git", ref=PR, commit_pin="", floating=False, version="0.5.23", listing=None, repo="/srv/sglang.git"):
    return [(rule["name"], rule["why"]) for rule in
            sglang_source_rules(source, ref, commit_pin, floating, version, listing, str(repo)) if not rule["rule"]]


@pytest.mark.parametrize("ref", [PR, "v0.5.23", "main"])
def test_a_moving_ref_alone_is_refused_naming_the_variable_and_the_ways_out(ref):
    found = broken(ref=ref)
    assert [name for name, _why in found] == ["sglang_git_ref"]
    why = found[0][1]
    assert "sglang_git_commit" in why and "sglang_git_ref_floating" in why
    assert "rebuilds" in why


def test_a_ref_pinned_to_the_commit_it_resolves_to_passes(repo):
    head = git(repo, "rev-parse", PR)
    assert broken(ref=PR, commit_pin=head, listing=ls_remote(repo, PR), repo=repo) == []
    tag = git(repo, "rev-parse", "v0.5.23^{commit}")  # an annotated tag resolves to its commit, not the tag object
    assert broken(ref="v0.5.23", commit_pin=tag, listing=ls_remote(repo, "v0.5.23"), repo=repo) == []


def test_a_pin_passes_unasked_when_the_repository_was_not_asked_or_could_not_answer():
    # Its build exists (nothing to ask), or git is not installed yet (tasks/install.yml asks again).
    assert broken(commit_pin="a" * 40) == []
    assert broken(commit_pin="a" * 40, listing={"rc": 2, "stdout_lines": []}) == []


def test_a_ref_that_moved_away_from_its_pin_is_refused_naming_both_commits(repo):
    pinned = git(repo, "rev-parse", PR)
    git(repo, "checkout", "-q", "--detach", "main")
    moved = commit(repo, "force-pushed")
    git(repo, "update-ref", PR, moved)
    found = broken(ref=PR, commit_pin=pinned, listing=ls_remote(repo, PR), repo=repo)
    assert [name for name, _why in found] == ["sglang_git_commit"]
    assert moved in found[0][1] and PR in found[0][1] and str(repo) in found[0][1]


def test_a_commit_ref_and_a_different_pin_are_refused():
    assert [name for name, _why in broken(ref="b" * 40, commit_pin="a" * 40)] == ["sglang_git_commit"]


def test_a_ref_the_repository_does_not_list_is_refused(repo):
    found = broken(ref="no-such-ref", floating=True, listing=ls_remote(repo, "no-such-ref"), repo=repo)
    assert found == [("sglang_git_ref", "does not exist in %s" % repo)]


def test_following_a_ref_on_purpose_passes(repo):
    assert broken(ref=PR, floating=True, listing=ls_remote(repo, PR), repo=repo) == []
    assert broken(ref="main", floating=True) == []


def test_a_commit_as_ref_needs_no_pin():
    assert broken(ref="c" * 40) == []


@pytest.mark.parametrize("version", [">=0.5.23", "~=0.5.23", "0.5.*", "==0.5.*", "latest", "", "0.5.23,<0.6", "!=0.5.22"])
def test_an_index_install_that_is_not_one_exact_release_is_refused(version):
    found = broken(source="index", version=version)
    assert [name for name, _why in found] == ["sglang_version"]
    assert "exact" in found[0][1]


@pytest.mark.parametrize("version", ["==0.5.23", "0.5.23", "0.5.23rc1", "0.5.23.post1"])
def test_an_index_install_pinned_to_one_release_passes(version):
    # The ref rules are for git builds: the index default ref stays as it is.
    assert broken(source="index", version=version) == []


def test_a_git_build_ignores_the_index_version():
    assert broken(ref="c" * 40, version="latest") == []

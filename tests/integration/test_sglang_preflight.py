"""Role sglang builds only what is pinned (issue #37, item 5): a ref that is not a commit is refused
before anything changes unless sglang_git_commit pins it (the commit it must resolve to) or
sglang_git_ref_floating follows it on purpose, and an index install takes one exact release. The
role's state check (tasks/state.yml: git ls-remote for a followed ref, then module host_state,
which fails on a broken rule before it reads anything and only reads otherwise, then for a pinned
ref whose build is not in use git ls-remote and the pin's rules, tasks/resolve.yml) runs by real
ansible-playbook on localhost in check mode against a real local git repository with a tag and a
pull request ref; one playbook run for every case, each case's run of the role after the last."""
import pytest
from support import git, git_history, run_cases

FIRST_CHECK = "Check the variables, then compare the build in use with what the role recorded and wants"
# A pinned ref is checked against the repository only once the comparison found its build missing.
PIN_CHECK = "Stop when the pinned ref does not exist in the repository or moved from its pin"
PR = "refs/pull/29907/head"

# (case, role variables, None when accepted, else what the failure message must contain); {pr} and
# {tag} stand for the commits the pull request ref and the tag name.
CASES = [
    ("unpinned pull request ref", {"sglang_git_ref": PR},
     'sglang_git_ref = "%s": is not a commit and nothing pins it: set sglang_git_commit' % PR),
    ("unpinned tag, the role's default ref", {},
     'sglang_git_ref = "v0.5.23": is not a commit and nothing pins it'),
    ("ref pinned to its commit", {"sglang_git_ref": PR, "sglang_git_commit": "{pr}"}, None),
    ("pin the ref moved away from", {"sglang_git_ref": PR, "sglang_git_commit": "{tag}"},
     'sglang_git_commit = "{tag}": is not what sglang_git_ref = %s resolves to in {repo} ({pr})' % PR),
    ("ref followed on purpose", {"sglang_git_ref": PR, "sglang_git_ref_floating": True}, None),
    ("commit as ref", {"sglang_git_ref": "{tag}"}, None),
    # git check-ref-format's rule (test plugin git_ref_name), checked before the repository is asked.
    ("ref with a hidden component", {"sglang_git_ref": "refs/heads/.hidden", "sglang_git_commit": "{pr}"},
     'sglang_git_ref = "refs/heads/.hidden": must be a tag, branch, full ref'),
    ("index range", {"sglang_source": "index", "sglang_version": ">=0.5.23"},
     'sglang_version = ">=0.5.23": must be one exact release'),
    ("index wildcard", {"sglang_source": "index", "sglang_version": "0.5.*"}, 'sglang_version = "0.5.*"'),
    ("index pinned with ==", {"sglang_source": "index", "sglang_version": "==0.5.23"}, None),
    ("index pinned bare", {"sglang_source": "index", "sglang_version": "0.5.23"}, None),
]


def _repository(root):
    """A tag v0.5.23 (annotated, as SGLang's releases) and a pull request ref one commit later."""
    repo = root / "sglang.git"
    repo.mkdir()
    git_history(repo, 2, {0: [["tag", "-a", "-m", "release", "v0.5.23"]], 1: [["update-ref", PR, "HEAD"]]})
    return repo, {"pr": git(repo, "rev-parse", PR), "tag": git(repo, "rev-parse", "v0.5.23^{commit}"), "repo": str(repo)}


def _fill(value, commits):
    return value.format(**commits) if isinstance(value, str) else value


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-preflight")
    repo, commits = _repository(root)
    defaults = {"sglang_git_repo": str(repo), "sglang_base_dir": str(root / "opt-sglang"), "sglang_home": str(root / "var-sglang"),
                "sglang_git_ref": "v0.5.23", "sglang_git_commit": "", "sglang_git_ref_floating": False,
                "sglang_source": "git", "sglang_version": "0.5.23"}
    cases = [(name, "sglang", {key: _fill(value, commits) for key, value in variables.items()})
             for name, variables, _expected in CASES]
    return run_cases(root, cases, defaults, tasks_from="state.yml"), commits


@pytest.mark.parametrize("name, expected", [(name, expected) for name, _vars, expected in CASES])
def test_the_state_check_accepts_or_names_the_variable_and_why(run, name, expected):
    outcomes, commits = run
    if expected is None:
        assert outcomes[name] is None
    else:
        assert outcomes[name] is not None, "accepted"
        task = PIN_CHECK if name == "pin the ref moved away from" else FIRST_CHECK
        assert outcomes[name]["task"] == task and _fill(expected, commits) in outcomes[name]["msg"], outcomes[name]

"""Role sglang builds only what is pinned (issue #37, item 5): a ref that is not a commit is refused
before anything changes unless sglang_git_commit pins it (the commit it must resolve to) or
sglang_git_ref_floating follows it on purpose, and an index install takes one exact release. The
role's state check (tasks/state.yml: git ls-remote, then module host_state, which fails on a
broken rule before it reads anything and only reads otherwise) runs by real ansible-playbook on
localhost in check mode against a real local git repository with a tag and a pull request ref;
one playbook run for every case."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FIRST_CHECK = "Check the variables, then compare the build in use with what the role recorded and wants"
PR = "refs/pull/29907/head"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}

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
    ("index range", {"sglang_source": "index", "sglang_version": ">=0.5.23"},
     'sglang_version = ">=0.5.23": must be one exact release'),
    ("index wildcard", {"sglang_source": "index", "sglang_version": "0.5.*"}, 'sglang_version = "0.5.*"'),
    ("index pinned with ==", {"sglang_source": "index", "sglang_version": "==0.5.23"}, None),
    ("index pinned bare", {"sglang_source": "index", "sglang_version": "0.5.23"}, None),
]

PLAY = """
- name: Run role sglang's state check for each case, in check mode
  hosts: localhost
  connection: local
  gather_facts: true
  gather_subset: [min]
  vars:
    cases: {cases}
    outcomes: {{}}
  tasks:
    - name: Run one case
      ansible.builtin.include_tasks: {case_file}
      loop: "{{{{ cases }}}}"
      loop_control:
        loop_var: case
    - name: Write the outcomes
      ansible.builtin.copy:
        dest: {out}
        content: "{{{{ outcomes | to_json }}}}"
        mode: "0644"
      check_mode: false
"""

CASE = """
- name: Run the role's state check with this case's variables
  block:
    - name: Include the role's state check
      ansible.builtin.include_role:
        name: pro6000.inference.sglang
        tasks_from: state.yml
      vars:
        sglang_git_repo: {repo}
        sglang_base_dir: {base}
        sglang_home: {home}
        sglang_git_ref: "{{{{ case.vars.sglang_git_ref | default('v0.5.23') }}}}"
        sglang_git_commit: "{{{{ case.vars.sglang_git_commit | default('') }}}}"
        sglang_git_ref_floating: "{{{{ case.vars.sglang_git_ref_floating | default(false) }}}}"
        sglang_source: "{{{{ case.vars.sglang_source | default('git') }}}}"
        sglang_version: "{{{{ case.vars.sglang_version | default('0.5.23') }}}}"
    - name: Note that it passed
      ansible.builtin.set_fact:
        outcomes: "{{{{ outcomes | combine({{case.name: None}}) }}}}"
  rescue:
    - name: Note which task failed and why
      ansible.builtin.set_fact:
        outcomes: "{{{{ outcomes | combine({{case.name: {{'task': ansible_failed_task.name, 'msg': ansible_failed_result.msg}}}}) }}}}"
"""


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def _repository(root):
    """A tag v0.5.23 (annotated, as SGLang's releases) and a pull request ref one commit later."""
    repo = root / "sglang.git"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for text in ("release", "ddtree"):
        (repo / "f").write_text(text)
        git(repo, "add", "f")
        git(repo, "commit", "-q", "-m", text)
        if text == "release":
            git(repo, "tag", "-a", "-m", "release", "v0.5.23")
    git(repo, "update-ref", PR, "HEAD")
    return repo, {"pr": git(repo, "rev-parse", PR), "tag": git(repo, "rev-parse", "v0.5.23^{commit}"), "repo": str(repo)}


def _fill(value, commits):
    return value.format(**commits) if isinstance(value, str) else value


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-preflight")
    repo, commits = _repository(root)
    (root / "case.yml").write_text(CASE.format(repo=repo, base=root / "opt-sglang", home=root / "var-sglang"))
    cases = [{"name": name, "vars": {key: _fill(value, commits) for key, value in variables.items()}}
             for name, variables, _expected in CASES]
    (root / "play.yml").write_text(PLAY.format(cases=json.dumps(cases), case_file=root / "case.yml",
                                               out=root / "outcomes.json"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_INJECT_FACT_VARS="False",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    done = subprocess.run([shutil.which("ansible-playbook", path=env["PATH"]), "--check", str(root / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads((root / "outcomes.json").read_text()), commits


@pytest.mark.parametrize("name, expected", [(name, expected) for name, _vars, expected in CASES])
def test_the_state_check_accepts_or_names_the_variable_and_why(run, name, expected):
    outcomes, commits = run
    if expected is None:
        assert outcomes[name] is None
    else:
        assert outcomes[name] is not None, "accepted"
        assert outcomes[name]["task"] == FIRST_CHECK and _fill(expected, commits) in outcomes[name]["msg"], outcomes[name]

"""Role model_weights refuses bad models before anything changes, naming the variable and why:
its own first check (tasks/state.yml, module host_state: the rules fail before it reads anything)
run by real ansible-playbook on localhost,
one playbook run for every case (a few seconds). The hub and git rules themselves are unit
tests of the test plugins hub_repo_id and git_ref_name (tests/unit/plugins/test)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "f" * 40


def target(**extra):
    return dict({"name": "Qwen3.6-27B", "kind": "target", "repo_id": "Qwen/Qwen3.6-27B", "revision": COMMIT}, **extra)


def drafter(**extra):
    return dict({"name": "Qwen3.6-27B-DFlash", "kind": "drafter", "repo_id": "z-lab/Qwen3.6-27B-DFlash",
                 "revision": COMMIT}, **extra)


# (case, role variables, None when accepted, else what the failure message must contain)
CASES = [
    ("target and drafter", {"model_weights_models": [target(), drafter()]}, None),
    ("no models", {"model_weights_models": []}, "model_weights_models = []: must list at least one model"),
    ("two targets", {"model_weights_models": [target(), target(name="b")]}, "at most one of kind target"),
    ("two drafters", {"model_weights_models": [drafter(), drafter(name="b")]}, "at most one of kind target"),
    ("one name twice", {"model_weights_models": [target(), drafter(name="Qwen3.6-27B")]}, "with distinct names"),
    ("bad name", {"model_weights_models": [target(name="../x")]}, "model_weights_models[../x].name"),
    ("repo id climbing", {"model_weights_models": [target(repo_id="Qwen/../etc")]},
     "model_weights_models[Qwen3.6-27B].repo_id = \"Qwen/../etc\": must be a hub repository id"),
    ("repo id with --", {"model_weights_models": [target(repo_id="Qwen--x/y")]}, "].repo_id = \"Qwen--x/y\""),
    ("repo id .git", {"model_weights_models": [target(repo_id="Qwen/x.git")]}, "].repo_id = \"Qwen/x.git\""),
    ("path model without repo id", {"model_weights_models": [target(source="path", repo_id="", path="/srv/x")]},
     None),
    ("floating revision refused", {"model_weights_models": [target(revision="main")]},
     "].revision = \"main\": must be a 40-hex commit"),
    ("floating revision allowed", {"model_weights_models": [target(revision="main")],
                                   "model_weights_allow_floating_revision": True}, None),
    ("ref with ..", {"model_weights_models": [target(revision="a..b")],
                     "model_weights_allow_floating_revision": True}, "].revision = \"a..b\""),
    ("ref ending .lock", {"model_weights_models": [target(revision="v1.lock")],
                          "model_weights_allow_floating_revision": True}, "].revision = \"v1.lock\""),
    ("lock of another commit", {"model_weights_models": [target(lock={"commit": OTHER, "files": {}})]},
     "].lock = \"%s\": must be the lock file of the pinned revision (%s)" % (OTHER, COMMIT)),
    ("lock required", {"model_weights_models": [target()], "model_weights_require_lock": True},
     "].lock = \"(none)\": must be the lock file"),
    ("lock of the commit", {"model_weights_models": [target(lock={"commit": COMMIT, "files": {}})],
                            "model_weights_require_lock": True}, None),
]

PLAY = """
- name: Run role model_weights' first check for each case
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
"""

CASE = """
- name: Run the first check with this case's variables
  block:
    - name: Include the first check
      ansible.builtin.include_role:
        name: pro6000.inference.model_weights
        tasks_from: state
      vars:
        model_weights_models: "{{ case.vars.model_weights_models }}"
        model_weights_allow_floating_revision: "{{ case.vars.model_weights_allow_floating_revision | default(false) }}"
        model_weights_require_lock: "{{ case.vars.model_weights_require_lock | default(false) }}"
    - name: Note that it passed
      ansible.builtin.set_fact:
        outcomes: "{{ outcomes | combine({case.name: None}) }}"
  rescue:
    - name: Note why it failed (a loop's failure holds each failed item's message)
      ansible.builtin.set_fact:
        outcomes: "{{ outcomes | combine({case.name: __why or ansible_failed_result.msg}) }}"
      vars:
        __why: "{{ ansible_failed_result.results | default([]) | selectattr('failed', 'true') | map(attribute='msg') | join('; ') }}"
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("model-weights-preflight")
    (root / "case.yml").write_text(CASE)
    cases = [{"name": name, "vars": variables} for name, variables, _expected in CASES]
    (root / "play.yml").write_text(PLAY.format(cases=json.dumps(cases), case_file=root / "case.yml",
                                               out=root / "outcomes.json"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_INJECT_FACT_VARS="False",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False")
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), str(root / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads((root / "outcomes.json").read_text())


@pytest.mark.parametrize("name, expected", [(name, expected) for name, _vars, expected in CASES])
def test_preflight_accepts_or_names_the_variable_and_why(outcomes, name, expected):
    if expected is None:
        assert outcomes[name] is None
    else:
        assert outcomes[name] and expected in outcomes[name]

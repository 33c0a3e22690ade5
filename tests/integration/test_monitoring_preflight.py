"""Role monitoring refuses to expose Prometheus and Alertmanager beyond loopback without a password
or with peers systemd's IPAddressAllow= cannot hold, before anything changes, naming the variable
and why (issue #36, finding 6): its own first check (tasks/state.yml, module host_state: the rules
fail before it reads anything) run by real ansible-playbook on localhost, one run for every case."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

# (case, role variables, None when accepted, else what the failure message must contain)
CASES = [
    ("loopback without a password", {}, None),
    ("wildcard without a password", {"monitoring_listen_address": "0.0.0.0"},
     "monitoring_web_password"),
    ("an address without a password", {"monitoring_listen_address": "10.0.0.2"},
     "beyond loopback: give them a password"),
    ("wildcard with a password", {"monitoring_listen_address": "0.0.0.0", "monitoring_web_password": "pw"}, None),
    ("a password bcrypt cannot take", {"monitoring_web_password": "x" * 73}, "takes at most 72 bytes"),
    ("a webhook by name beyond loopback", {"monitoring_listen_address": "0.0.0.0", "monitoring_web_password": "pw",
                                           "monitoring_alertmanager_webhook_url": "https://chat.example/hook"},
     "monitoring_scrape_address, monitoring_alertmanager_webhook_url = [\"chat.example\"]"),
    ("a webhook by name on loopback", {"monitoring_alertmanager_webhook_url": "https://chat.example/hook"}, None),
]

PLAY = """
- name: Run role monitoring's first check for each case
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
        name: pro6000.inference.monitoring
        tasks_from: state
      vars:
        monitoring_inference_group: none
        monitoring_listen_address: "{{ case.vars.monitoring_listen_address | default('127.0.0.1') }}"
        monitoring_web_password: "{{ case.vars.monitoring_web_password | default('') }}"
        monitoring_alertmanager_webhook_url: "{{ case.vars.monitoring_alertmanager_webhook_url | default('') }}"
    - name: Note that it passed
      ansible.builtin.set_fact:
        outcomes: "{{ outcomes | combine({case.name: None}) }}"
  rescue:
    - name: Note why it failed
      ansible.builtin.set_fact:
        outcomes: "{{ outcomes | combine({case.name: ansible_failed_result.msg}) }}"
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("monitoring-preflight")
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
        assert outcomes[name] and expected in outcomes[name], outcomes[name]

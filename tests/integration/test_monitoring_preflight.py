"""Roles monitoring and metrics_exporters refuse listen addresses, ports, durations and ARGS words
that would rewrite their services' command lines (issue 36, finding 4: a retention of
"30d --web.enable-admin-api --web.enable-lifecycle" turned on Prometheus's admin API; a quote
closed the quoted ARGS of a defaults file), and monitoring refuses to expose Prometheus and
Alertmanager beyond loopback without a password or with peers systemd's IPAddressAllow= cannot
hold (finding 6), before anything changes and naming the variable: their
first check (tasks/state.yml, module host_state, whose rules fail before it reads anything), run
by real ansible-playbook on localhost in check mode, one playbook run for every case."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

# (case, role, role variables, None when accepted, else what the failure message must contain)
CASES = [
    ("monitoring accepted", "monitoring", {}, None),
    ("retention with flags", "monitoring", {"monitoring_retention": "30d --web.enable-admin-api --web.enable-lifecycle"},
     'monitoring_retention = "30d --web.enable-admin-api --web.enable-lifecycle": must be a Prometheus duration'),
    ("scrape interval", "monitoring", {"monitoring_scrape_interval": "15s\n  - job_name: x"},
     "monitoring_scrape_interval = \"15s\\n  - job_name: x\": must be a Prometheus duration"),
    ("listen address closing ARGS", "monitoring", {"monitoring_listen_address": '127.0.0.1" --web.enable-admin-api "'},
     "monitoring_listen_address = \"127.0.0.1\\\" --web.enable-admin-api \\\"\": every word must be free of"),
    ("Prometheus port -1", "monitoring", {"monitoring_prometheus_port": -1},
     "monitoring_prometheus_port = -1: must be a TCP port, 1 to 65535"),
    ("Alertmanager port 99999", "monitoring", {"monitoring_alertmanager_port": 99999},
     "monitoring_alertmanager_port = 99999: must be a TCP port"),
    ("one port for both", "monitoring", {"monitoring_alertmanager_port": 9090},
     "monitoring_prometheus_port, monitoring_alertmanager_port = [9090, 9090]: give each its own port"),
    ("wildcard without a password", "monitoring", {"monitoring_listen_address": "0.0.0.0"}, "monitoring_web_password"),
    ("an address without a password", "monitoring", {"monitoring_listen_address": "10.0.0.2"},
     "beyond loopback: give them a password"),
    ("wildcard with a password", "monitoring", {"monitoring_listen_address": "0.0.0.0", "monitoring_web_password": "pw"},
     None),
    ("a password bcrypt cannot take", "monitoring", {"monitoring_web_password": "x" * 73}, "takes at most 72 bytes"),
    ("a webhook by name beyond loopback", "monitoring",
     {"monitoring_listen_address": "0.0.0.0", "monitoring_web_password": "pw",
      "monitoring_alertmanager_webhook_url": "https://chat.example/hook"},
     "monitoring_scrape_address, monitoring_alertmanager_webhook_url = [\"chat.example\"]"),
    ("a webhook by name on loopback", "monitoring", {"monitoring_alertmanager_webhook_url": "https://chat.example/hook"},
     None),
    # Issue 37, item 1: alerts that go nowhere only when a site says so.
    ("neither a webhook nor receiver none", "monitoring", {"monitoring_alerts_receiver": "webhook"},
     "monitoring_alerts_receiver, monitoring_alertmanager_webhook_url = [\"webhook\", \"\"]: give the webhook"),
    ("receiver none beside a webhook", "monitoring",
     {"monitoring_alerts_receiver": "none", "monitoring_alertmanager_webhook_url": "http://10.0.0.9/hook"},
     "monitoring_alerts_receiver: none sends no alert to the webhook given"),
    ("exporters accepted", "metrics_exporters", {}, None),
    ("node exporter port 99999", "metrics_exporters", {"metrics_exporters_node_exporter_port": 99999},
     "metrics_exporters_node_exporter_port = 99999: must be a TCP port"),
    ("DCGM exporter port -1", "metrics_exporters", {"metrics_exporters_dcgm_exporter_port": -1},
     "metrics_exporters_dcgm_exporter_port = -1: must be a TCP port"),
    ("extra argument closing ARGS", "metrics_exporters",
     {"metrics_exporters_node_exporter_extra_args": ['--web.config.file=" --collector.disable-defaults "']},
     "metrics_exporters_node_exporter_extra_args = [\"--web.config.file=\\\" --collector.disable-defaults \\\"\"]: "
     "every word must be free of whitespace, quotes"),
    ("textfile directory with a space", "metrics_exporters", {"metrics_exporters_textfile_dir": "/var/lib/x --web.x"},
     'metrics_exporters_textfile_dir = "/var/lib/x --web.x": every word must be free of'),
]

PLAY = """
- name: Run each role's first check for each case, in check mode
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

# Each variable of the cases, else its role default.
CASE = """
- name: Run the first check with this case's variables
  block:
    - name: Include the first check
      ansible.builtin.include_role:
        name: pro6000.inference.{{{{ case.role }}}}
        tasks_from: state
      vars:
{variables}
    - name: Note that it passed
      ansible.builtin.set_fact:
        outcomes: "{{{{ outcomes | combine({{case.name: None}}) }}}}"
  rescue:
    - name: Note why it failed
      ansible.builtin.set_fact:
        outcomes: "{{{{ outcomes | combine({{case.name: ansible_failed_result.msg}}) }}}}"
"""
DEFAULTS = {
    "monitoring_retention": "30d", "monitoring_scrape_interval": "15s", "monitoring_listen_address": "127.0.0.1",
    "monitoring_prometheus_port": 9090, "monitoring_alertmanager_port": 9093,
    "monitoring_web_password": "", "monitoring_alertmanager_webhook_url": "",
    "metrics_exporters_node_exporter_port": 9100, "metrics_exporters_dcgm_exporter_port": 9400,
    "metrics_exporters_node_exporter_extra_args": [], "metrics_exporters_textfile_dir": "/var/lib/prometheus/node-exporter",
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("monitoring-preflight")
    variables = "\n".join("        %s: \"{{ case.vars.%s | default(%s) }}\"" % (name, name, json.dumps(default).replace('"', "'"))
                          for name, default in DEFAULTS.items())
    # A case without a receiver of its own sends to its webhook when it gives one, else keeps the alerts
    # in Alertmanager (none): each case is then refused for its own reason only.
    variables += ("\n        monitoring_alerts_receiver: \"{{ case.vars.monitoring_alerts_receiver | default('webhook'"
                  " if case.vars.monitoring_alertmanager_webhook_url | default('') else 'none') }}\"")
    (root / "case.yml").write_text(CASE.format(variables=variables))
    cases = [{"name": name, "role": role, "vars": variables} for name, role, variables, _expected in CASES]
    (root / "play.yml").write_text(PLAY.format(cases=json.dumps(cases), case_file=root / "case.yml",
                                               out=root / "outcomes.json"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_INJECT_FACT_VARS="False",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    done = subprocess.run([shutil.which("ansible-playbook", path=env["PATH"]), "--check", str(root / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads((root / "outcomes.json").read_text())


@pytest.mark.parametrize("name, expected", [(name, expected) for name, _role, _vars, expected in CASES])
def test_the_first_check_accepts_or_names_the_variable_and_why(outcomes, name, expected):
    if expected is None:
        assert outcomes[name] is None
    else:
        assert outcomes[name] and expected in outcomes[name], outcomes[name]

"""The rules and configuration role monitoring renders, checked and unit-tested with the real promtool.

The rules are rendered by the role itself (tasks_from: rules.yml, which validates each file with
`promtool check rules` before writing it), then `promtool test rules` runs alerts.test.yml
against them: every alert has a case where it fires and one where it stays quiet.
"""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
# tests/scripts/host-setup.sh unpacks the distribution's prometheus package here when the host
# has no promtool of its own.
UNPACKED = REPO / ".cache" / "prometheus" / "usr" / "bin"


def promtool():
    found = shutil.which("promtool") or (str(UNPACKED / "promtool") if (UNPACKED / "promtool").exists() else None)
    assert found, "promtool is missing: run tests/scripts/host-setup.sh (it unpacks Debian's prometheus package)"
    return found


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The rules directory as the role writes it, with its default variables."""
    out = tmp_path_factory.mktemp("monitoring")
    playbook = out / "render.yml"
    hosts = [{"host": "gpu1", "address": "10.0.0.11", "exporters": {"node": {"port": 9100}, "dcgm": {"port": 9400}},
              "service": {"url": "http://127.0.0.1:8000",
                          "gateway": {"metrics_url": "http://127.0.0.1:29000/metrics"},
                          "replicas": [{"name": "0", "metrics_url": "http://127.0.0.1:30000/metrics"},
                                       {"name": "1", "metrics_url": "http://127.0.0.1:30001/metrics"}]}}]
    tasks = [
        {"name": "Write the rules", "ansible.builtin.include_role": {
            "name": "pro6000.inference.monitoring", "tasks_from": "rules.yml", "public": True}},
        # The role's template and validation, with the role's defaults and a host's records.
        {"name": "Write the configuration", "ansible.builtin.template": {
            "src": str(REPO / "roles/monitoring/templates/prometheus.yml.j2"), "dest": str(out / "prometheus.yml"),
            "mode": "0644", "validate": "promtool check config %s"},
         "vars": {"__monitoring_scrape_configs": "{{ %s | pro6000.inference.prometheus_scrape_configs }}" % hosts}},
        # No Prometheus runs here to reload.
        {"name": "End before the handlers", "ansible.builtin.meta": "end_play"},
    ]
    playbook.write_text(yaml.safe_dump([{
        "name": "Render the monitoring rules", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               PATH=os.pathsep.join([str(pathlib.Path(promtool()).parent), str(pathlib.Path(sys.executable).parent),
                                     os.environ.get("PATH", "")]))
    run = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", "monitoring_config_dir=%s" % out, "-e", "ansible_python_interpreter=%s" % sys.executable,
                          str(playbook)], env=env, capture_output=True, text=True, check=False, cwd=out)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out


def alert_names(rules_dir):
    document = yaml.safe_load((rules_dir / "rules" / "pro6000-alerts.yml").read_text())
    return [rule["alert"] for group in document["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rendered_rules(rendered):
    files = sorted(str(p) for p in (rendered / "rules").glob("*.yml"))
    assert len(files) == 2
    run = subprocess.run([promtool(), "check", "rules"] + files, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_accepts_the_rendered_configuration(rendered):
    config = yaml.safe_load((rendered / "prometheus.yml").read_text())
    assert [job["job_name"] for job in config["scrape_configs"]] == ["node", "dcgm", "sglang", "smg"]
    run = subprocess.run([promtool(), "check", "config", str(rendered / "prometheus.yml")], capture_output=True,
                         text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_has_a_firing_and_a_quiet_case(rendered):
    cases = yaml.safe_load((HERE / "alerts.test.yml").read_text())["tests"]
    firing, quiet = set(), set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = set(alert_names(rendered))
    assert names - firing == set(), "alerts without a firing case"
    # An alert without `for:` fires at once: its quiet case is another series in the same test.
    assert names - quiet - {"SmokeGateFailed"} == set(), "alerts without a quiet case"


def test_promtool_unit_tests_pass(rendered):
    shutil.copy(HERE / "alerts.test.yml", rendered / "alerts.test.yml")
    names = alert_names(rendered)
    run = subprocess.run([promtool(), "test", "rules", "alerts.test.yml"], capture_output=True, text=True, check=False,
                         cwd=rendered)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert "SUCCESS" in run.stdout and len(names) == 17

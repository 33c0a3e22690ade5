"""Reruns of the scenario's converge playbook (playbooks/monitoring.yml) through ansible-playbook
and its JSON callback, after the checks of test_monitoring.py: with nothing changed each role
reads the host once (the exporters' smoke textfile once more) and skips its install and
configure phases; a file edited by hand and a stopped exporter are seen, put back and the
exporter started again by the next run, which then finds nothing to do."""
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "shared" / "verify"))
from prometheus_api import all_targets_up  # noqa: E402

SCENARIO = pathlib.Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
ROLES = ("pro6000.inference.metrics_exporters", "pro6000.inference.monitoring")
# Each role's include of its install and configure phases (tasks/main.yml), and its read of the host.
CONVERGE = {
    "pro6000.inference.metrics_exporters": "Install, configure and start the exporters, then record what they serve",
    "pro6000.inference.monitoring": "Install, configure and start Prometheus and Alertmanager, then check Prometheus",
}
STATE = {
    "pro6000.inference.metrics_exporters":
        "Check the variables, then compare the exporters with what the role recorded and wants",
    "pro6000.inference.monitoring": "Check the variables, then compare Prometheus and Alertmanager with what is wanted",
}
# Task actions that run on the controller alone.
CONTROLLER_ACTIONS = {"ansible.builtin.validate_argument_spec", "ansible.builtin.include_tasks",
                      "ansible.builtin.include_role", "ansible.builtin.debug", "ansible.builtin.assert",
                      "ansible.builtin.set_fact", "ansible.builtin.meta"}
PROMETHEUS_YML = "/etc/prometheus/prometheus.yml"
NODE_DEFAULTS = "/etc/default/prometheus-node-exporter"
EXPORTER = "nvidia-dcgm-exporter"


def converge():
    """Runs the converge playbook as Molecule does; returns the JSON callback's document."""
    run = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(SCENARIO / "converge.yml")],
        cwd=os.environ["MOLECULE_PROJECT_DIRECTORY"],
        env=dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return json.loads(run.stdout)


def results(document):
    """(role, task name, result) of every task of the two roles, in order."""
    found = []
    for play in document["plays"]:
        for task in play["tasks"]:
            role, _sep, name = task["task"]["name"].partition(" : ")
            if role in ROLES:
                found += [(role, name, result) for result in task["hosts"].values()]
    return found


def result_of(document, role, name):
    matches = [result for found_role, found_name, result in results(document)
               if (found_role, found_name) == (role, name)]
    assert len(matches) == 1, "%s : %s ran %d times" % (role, name, len(matches))
    return matches[0]


def changed(document):
    return sum(stats["changed"] for stats in document["stats"].values())


def assert_fast_path(document):
    for role in ROLES:
        assert result_of(document, role, STATE[role])["drift"] == []
        assert result_of(document, role, CONVERGE[role]).get("skipped"), role + " ran its install and configure"
    assert changed(document) == 0
    own = [(name, result) for _role, name, result in results(document) if not name.startswith("Validating arguments")]
    remote = [result["action"] for _name, result in own
              if not result.get("skipped") and result["action"] not in CONTROLLER_ACTIONS]
    # Issue #26's budget for the two roles: about 12 tasks and 2-3 reads of the host.
    assert len(own) <= 8, [name for name, _result in own]
    assert remote == ["pro6000.inference.host_state"] * 3, remote


def test_a_rerun_with_nothing_changed_takes_the_fast_path():
    assert_fast_path(converge())


def test_a_file_edited_by_hand_and_a_stopped_exporter_are_put_back(host):
    wanted = {path: host.file(path).sha256sum for path in (PROMETHEUS_YML, NODE_DEFAULTS)}
    host.check_output("echo '# edited by hand' >> %s", PROMETHEUS_YML)
    host.check_output("echo '# edited by hand' >> %s", NODE_DEFAULTS)
    host.check_output("systemctl stop %s", EXPORTER)

    document = converge()
    exporters, monitoring = ROLES
    assert result_of(document, exporters, STATE[exporters])["drift"] == [
        NODE_DEFAULTS + ": content differs from the wanted one",
        "unit %s.service: inactive, wanted active" % EXPORTER]
    assert result_of(document, monitoring, STATE[monitoring])["drift"] == [
        PROMETHEUS_YML + ": content differs from the wanted one"]
    for role in ROLES:
        assert not result_of(document, role, CONVERGE[role]).get("skipped"), role + " took the fast path"
    assert changed(document) > 0
    assert {path: host.file(path).sha256sum for path in wanted} == wanted
    assert host.service(EXPORTER).is_running
    # Prometheus, reloaded with its configuration put back, scrapes the restarted exporters again.
    assert [(job, health) for job, _host, _replica, health in all_targets_up(host, 30)] == [
        ("dcgm", "up"), ("node", "up"), ("sglang", "up"), ("sglang", "up"), ("smg", "up")]

    assert_fast_path(converge())

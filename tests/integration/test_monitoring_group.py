"""playbooks/monitoring.yml (the last plays of site.yml) stops when group pro6000_monitoring is
empty, before anything changes, instead of installing the exporters for a Prometheus that nobody
runs (issue 37, item 1); a run whose limit leaves the monitoring host out says so. Real
ansible-playbook, on localhost in check mode; the run stops at its first check or, for the limit,
is only read up to the note."""
import os
import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
HOST = "{ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}'}"


def run(tmp_path, monitoring_hosts, *args):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("pro6000:\n  hosts:\n    gpu-01: %s\npro6000_monitoring:\n  hosts: %s\n" % (HOST, monitoring_hosts))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_FORCE_COLOR="0",
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    done = subprocess.run([shutil.which("ansible-playbook", path=env["PATH"]), "-i", str(inventory), "--check",
                           str(REPO / "playbooks" / "monitoring.yml")] + list(args),
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    return done.returncode, " ".join(done.stdout.split())


def test_an_empty_monitoring_group_stops_the_run_and_says_what_to_do(tmp_path):
    returncode, output = run(tmp_path, "{}")
    assert returncode == 2
    assert "Group pro6000_monitoring of the inventory has no host" in output
    assert "add the monitoring host to it in hosts.yml" in output and "--skip-tags monitoring" in output
    # Nothing ran after the check: not even the exporters' role.
    assert "pro6000.inference.metrics_exporters" not in output


def test_a_limit_without_the_monitoring_host_is_named(tmp_path):
    _returncode, output = run(tmp_path, "{mon-01: %s}" % HOST, "-l", "pro6000")
    assert "The monitoring host(s) mon-01 are outside this run's limit" in output

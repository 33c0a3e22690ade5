"""The no-op fast path of every role (issue #26), on the converged lab host, through the same
command as `make lab`: a rerun with nothing changed skips every role's install and configure
phases (their include is skipped, changed=0); a host that drifted by hand (a file edited, a
package removed, a unit changed, a GPU replica down) gets each drift named and repaired.

The repair is checked against a control: the same drift, with every role's comparison forced to
report nothing (its registered result overridden by extra vars, which outrank registered ones),
stays unrepaired and the smoke gate fails on the replica that is down. PRO6000_FORCE_FAST_PATH=1
forces the comparison in the repairing run too, which then fails: the test cannot pass on a fast
path that ignores drift."""
import json
import os
import pathlib
import subprocess

REPO = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
HOST = "pro6000-lab"
# Every role whose install and configure phases the comparison guards (tasks/state.yml).
GUARDED_ROLES = ["nvidia_repository", "nvidia_driver", "cuda_toolkit", "sglang", "model_weights", "sglang_service",
                 "metrics_exporters", "monitoring"]
FORCED = {"__%s_state" % role: {"drift": []} for role in GUARDED_ROLES}

# Each drift, the shell that makes it on the host, the shell that is true while it lasts, and
# what the role's comparison says of it.
DRIFTS = {
    "a file edited by hand": (
        "echo '# edited by hand' >>/etc/profile.d/cuda.sh",
        "grep -q 'edited by hand' /etc/profile.d/cuda.sh",
        "/etc/profile.d/cuda.sh: content differs from the wanted one"),
    "another file edited by hand": (
        "echo 'options nouveau modeset=1' >/etc/modprobe.d/blacklist-nouveau.conf",
        "grep -q modeset=1 /etc/modprobe.d/blacklist-nouveau.conf",
        "/etc/modprobe.d/blacklist-nouveau.conf: content differs from the wanted one"),
    "a package removed": (
        "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q cuda-toolkit-13-1 >/dev/null",
        "! dpkg-query -W -f='${db:Status-Abbrev}' cuda-toolkit-13-1 2>/dev/null | grep -q '^ii'",
        "package cuda-toolkit-13-1: not installed"),
    "a unit changed": (
        "sed -i 's/^TimeoutStopSec=.*/TimeoutStopSec=1/' /etc/systemd/system/sglang-qwen-1.service"
        " && systemctl daemon-reload",
        "grep -q '^TimeoutStopSec=1$' /etc/systemd/system/sglang-qwen-1.service",
        "/etc/systemd/system/sglang-qwen-1.service: content differs from the wanted one"),
    "a GPU replica down": (
        "systemctl stop sglang-qwen-2",
        "! systemctl is-active --quiet sglang-qwen-2",
        "unit sglang-qwen-2.service: inactive, wanted active"),
}


def on_host(command):
    return subprocess.run(["docker", "exec", HOST, "sh", "-c", command], capture_output=True, text=True, check=False)


def lasting():
    return sorted(name for name, (_make, holds, _said) in DRIFTS.items() if on_host(holds).returncode == 0)


def site(*extra):
    """The site as `make lab` runs it, with the json callback: (return code, its report)."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(["ansible-playbook", "-i", "inventories/lab", "site.yml", "-l", "pro6000", *extra],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    return run.returncode, json.loads(run.stdout[run.stdout.index("{"):])


# Roles whose converge.yml the site's play includes itself, around taking the host out of service
# (docs/CONTRACTS.md): where, and the line that marks that include (of the tasks around it).
COMPOSED = {"nvidia_driver": ("playbooks/site.yml", "file: tasks/driver_change.yml")}


def converge_include(role):
    """Where tasks/converge.yml of the role is included (its tasks/main.yml, or the play that
    composes it): the file and line of that task's name."""
    path, marker = COMPOSED.get(role, ("roles/%s/tasks/main.yml" % role, "include_tasks: converge.yml"))
    lines = (REPO / path).read_text().splitlines()
    include = next(index for index, line in enumerate(lines) if marker in line)
    name = max(index for index in range(include) if lines[index].lstrip().startswith("- name:"))
    return "%s:%d" % (path, name + 1)


def includes(report):
    """Each role's include of its install and configure phases: role -> skipped."""
    where = {converge_include(role): role for role in GUARDED_ROLES}
    found = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            role = next((role for path, role in where.items() if task["task"]["path"].endswith(path)), None)
            if role and HOST in task["hosts"]:
                found[role] = bool(task["hosts"][HOST].get("skipped"))
    return found


def messages(report):
    return json.dumps(report)


def failures(report):
    """Each failed task's name and message, for an assertion's message."""
    return ["%s: %s" % (task["task"]["name"], task["hosts"][HOST].get("msg")) for play in report["plays"]
            for task in play["tasks"] if task["hosts"].get(HOST, {}).get("failed")]


def test_drift_is_named_and_repaired_and_not_when_the_fast_path_is_forced(tmp_path):
    for make, _holds, _said in DRIFTS.values():
        assert on_host(make).returncode == 0, make
    assert lasting() == sorted(DRIFTS)
    forced = tmp_path / "forced.json"
    forced.write_text(json.dumps(FORCED))

    # The control: nothing compared, nothing repaired, and the gate stops on the replica that is down.
    rc, report = site("-e", "@%s" % forced)
    assert rc != 0 and report["stats"][HOST]["changed"] == 0
    assert "sglang-qwen-2" in messages(report)
    assert lasting() == sorted(DRIFTS)

    rc, report = site(*(["-e", "@%s" % forced] if os.environ.get("PRO6000_FORCE_FAST_PATH") == "1" else []))
    assert rc == 0, failures(report)
    assert lasting() == []
    assert report["stats"][HOST]["changed"] > 0
    said = messages(report)
    assert [name for name, (_make, _holds, line) in DRIFTS.items() if line not in said] == []
    # Only the roles whose part drifted took their install and configure phases.
    assert [role for role, skipped in includes(report).items() if not skipped] == [
        "nvidia_driver", "cuda_toolkit", "sglang_service"]


def test_a_rerun_with_nothing_changed_skips_every_install_and_configure_phase():
    """After the repair above (pytest keeps the order of a file), and after converge."""
    rc, report = site()
    assert rc == 0, failures(report)
    assert report["stats"][HOST]["changed"] == 0
    assert includes(report) == dict.fromkeys(GUARDED_ROLES, True)

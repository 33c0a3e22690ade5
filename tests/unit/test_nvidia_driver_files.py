"""Role nvidia_driver declares its files once (vars/main.yml, __nvidia_driver_files): the
comparison (tasks/state.yml) reads the exact version pin as the last run recorded it, the write
(tasks/install.yml) as this run's plan gives it. Rendered through the role's real template by
real ansible-playbook, the pin must be what the role wrote before the list existed, when
tasks/state.yml rendered it with template_vars={'__nvidia_driver_pinning_package': the recorded
pinning package}."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "nvidia_driver"
PIN_PATH = "/etc/apt/preferences.d/00-nvidia-driver-version"
# The driver pinned (over the role's defaults, which vars_files reads first).
PIN = {"nvidia_driver_branch": "590", "nvidia_driver_version": "590.48.01"}

# What the template gave for branch 590, version 590.48.01 and the pinning package named, rendered
# with template_vars before this change (SHA-1 a295c668... for nvidia-driver-pinning-590).
OLD_RENDERING = """#
# Ansible managed
#
# {package} tracks the newest 590 release; this
# repository has no nvidia-driver-pinning-590.48.01, so this record holds the
# driver at 590.48.01. It sorts before NVIDIA's nvidia-driver-pin: apt takes the
# first record that matches a version, and 1001 outranks the branch pin's 1000.
Package: *nvidia* libcuda* cuda-drivers*
Pin: version 590.48.01-*
Pin-Priority: 1001
"""

# The variables tasks/install.yml's block gives the pin's write (this run's plan).
WRITE_VARS = next(task["vars"] for task in yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
                  if "__nvidia_driver_pinning" in task.get("vars", {}))

# The entry and its rendering in the comparison's scope (role vars only) and in the write's.
PLAY = """
- name: Render the declared files as the comparison and the write see them
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [{defaults}, {role_vars}]
  vars:
    templates: {templates}
    rendered: >-
      {{{{ lookup('ansible.builtin.template', templates ~ '/' ~ __nvidia_driver_exact_pin_file.template)
         if __nvidia_driver_exact_pin_file.template is defined else none }}}}
  tasks:
    - name: Read the record of the last run
      ansible.builtin.setup:
        gather_subset: ["!all", "!min", "local"]
        fact_path: {fact_path}
    - name: Note what the comparison sees
      ansible.builtin.set_fact:
        compared: {{files: "{{{{ __nvidia_driver_files }}}}", rendered: "{{{{ rendered }}}}"}}
    - name: Note what the write sees
      ansible.builtin.set_fact:
        written: {{entry: "{{{{ __nvidia_driver_exact_pin_file }}}}", rendered: "{{{{ rendered }}}}"}}
      vars: {write_vars}
    - name: Write both
      ansible.builtin.copy:
        dest: {out}
        content: "{{{{ {{'compared': compared, 'written': written}} | to_json }}}}"
        mode: "0644"
      check_mode: false
"""


def render(tmp_path, record, plan):
    """What the comparison and the write see, with this record on the host and this run's plan
    (tasks/resolve.yml's __nvidia_driver_plan)."""
    facts = tmp_path / "facts.d"
    facts.mkdir()
    if record is not None:
        (facts / "nvidia_driver.fact").write_text(json.dumps(record))
    out = tmp_path / "out.json"
    (tmp_path / "play.yml").write_text(PLAY.format(
        defaults=json.dumps(str(ROLE / "defaults" / "main.yml")), role_vars=json.dumps(str(ROLE / "vars" / "main.yml")),
        templates=json.dumps(str(ROLE / "templates")), fact_path=json.dumps(str(facts)), write_vars=json.dumps(WRITE_VARS),
        out=json.dumps(str(out))))
    python = pathlib.Path(sys.executable)
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               PATH=os.pathsep.join([str(python.parent), os.environ.get("PATH", "")]))
    done = subprocess.run([str(python.parent / "ansible-playbook"), "--check", "-i", "localhost,",
                           "-e", json.dumps(dict(PIN, __nvidia_driver_plan=plan, ansible_python_interpreter=str(python))),
                           str(tmp_path / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


def test_the_compared_pin_is_the_recorded_one_rendered_as_before(tmp_path):
    seen = render(tmp_path, {"pinning_package": "nvidia-driver-pinning-590", "exact_pin": True},
                  {"pinning_package": "nvidia-driver-pinning-590", "exact_pin": True})
    pin = seen["compared"]["files"][-1]
    assert pin == {"path": PIN_PATH, "state": "file", "template": "nvidia-driver-version.pref.j2",
                   "owner": "root", "group": "root", "mode": "0644"}
    assert seen["compared"]["rendered"] == OLD_RENDERING.format(package="nvidia-driver-pinning-590")


def test_the_written_pin_follows_this_runs_plan_not_the_record(tmp_path):
    seen = render(tmp_path, {"pinning_package": "nvidia-driver-pinning-590.48.01", "exact_pin": False},
                  {"pinning_package": "nvidia-driver-pinning-595", "exact_pin": True})
    assert seen["compared"]["files"][-1] == {"path": PIN_PATH, "state": "absent"}
    assert seen["written"]["entry"]["state"] == "file"
    assert seen["written"]["rendered"] == OLD_RENDERING.format(package="nvidia-driver-pinning-595")


@pytest.mark.parametrize("record", [None, {"pinning_package": "nvidia-driver-pinning-590.48.01", "exact_pin": False}],
                         ids=["no record", "exact pinning package"])
def test_no_exact_pin_is_wanted_without_one_recorded_or_planned(tmp_path, record):
    seen = render(tmp_path, record, {"pinning_package": "nvidia-driver-pinning-590.48.01", "exact_pin": False})
    assert seen["compared"]["files"][-1] == seen["written"]["entry"] == {"path": PIN_PATH, "state": "absent"}
    assert seen["compared"]["rendered"] is None


def test_the_configuration_files_are_declared_as_written_before():
    declared = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__nvidia_driver_config_files"]
    assert [(f["path"], f["template"], f["owner"], f["group"], f["mode"], f.get("notify")) for f in declared] == [
        ("/etc/modprobe.d/blacklist-nouveau.conf", "blacklist-nouveau.conf.j2", "root", "root", "0644",
         ["Rebuild the initramfs"]),
        ("/etc/apt/apt.conf.d/51nvidia-driver-unattended-upgrades", "unattended-upgrades.conf.j2", "root", "root", "0644",
         None)]

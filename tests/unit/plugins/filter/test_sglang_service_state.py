"""sglang_replica_files and sglang_service_units, what role sglang_service's host_state task
compares, checked against module host_state reading files written as the replica tasks write
them, and against Ansible's own hash filter; lookup template_each, run by ansible-playbook, against
Ansible's template lookup rendering one item at a time, as the role did before."""
import grp
import json
import os
import pathlib
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import get_hash

from ansible_collections.pro6000.inference.plugins.action.host_state import ActionModule as HostStateAction
from ansible_collections.pro6000.inference.plugins.filter.sglang_replica_files import (
    FilterModule as FilesFilters,
    sglang_replica_files,
)
from ansible_collections.pro6000.inference.plugins.filter.sglang_service_units import (
    FilterModule as UnitsFilters,
    sglang_service_units,
)
from support import REPO_ROOT, run_module_file

REPLICAS = [{"name": "sglang-qwen-0", "unit": "sglang-qwen-0.service"},
            {"name": "sglang-qwen-1", "unit": "sglang-qwen-1.service"}]
RENDERINGS = [["CUDA_VISIBLE_DEVICES=GPU-a\n", "api-key: k0\n", "[Service]\nExecStart=/bin/sglang --port 30001\n"],
              ["CUDA_VISIBLE_DEVICES=GPU-b\n", "api-key: k1\n", "[Service]\nExecStart=/bin/sglang --port 30002\n"]]
GROUP = grp.getgrgid(os.getgid()).gr_name


def paths(folder):
    return {"unit": "%s/%%s.service" % folder, "env": "%s/%%s.env" % folder,
            "secrets": "%s/%%s.secrets.yaml" % folder, "group": GROUP}


def as_the_action_plugin_passes(files):
    """What host_state's action plugin gives the module: a secret's content as its checksum only
    (no task state is read for a content)."""
    action = HostStateAction.__new__(HostStateAction)
    return [action._wanted(spec, {}) for spec in files]


def write_as_the_replica_tasks_do(folder):
    for replica, (env, secrets, unit) in zip(REPLICAS, RENDERINGS):
        for suffix, text, mode in (("env", env, 0o600), ("secrets.yaml", secrets, 0o640), ("service", unit, 0o644)):
            path = folder / ("%s.%s" % (replica["name"], suffix))
            path.write_text(text)
            path.chmod(mode)


def test_replicas_written_as_wanted_show_no_drift_to_host_state(tmp_path):
    write_as_the_replica_tasks_do(tmp_path)
    files = sglang_replica_files(REPLICAS, RENDERINGS, paths(tmp_path))
    result = run_module_file("host_state", {"files": as_the_action_plugin_passes(files)}, tmp_path)
    assert result["drift"] == [], result


def test_a_changed_unit_a_changed_secret_and_a_loose_mode_are_each_drift(tmp_path):
    write_as_the_replica_tasks_do(tmp_path)
    (tmp_path / "sglang-qwen-1.service").write_text("[Service]\nExecStart=/bin/sglang --port 30009\n")
    (tmp_path / "sglang-qwen-0.secrets.yaml").write_text("api-key: old\n")
    (tmp_path / "sglang-qwen-0.env").chmod(0o644)
    files = sglang_replica_files(REPLICAS, RENDERINGS, paths(tmp_path))
    drift = run_module_file("host_state", {"files": as_the_action_plugin_passes(files)}, tmp_path)["drift"]
    assert len(drift) == 3, drift
    for name in ("sglang-qwen-1.service", "sglang-qwen-0.secrets.yaml", "sglang-qwen-0.env"):
        assert any(str(tmp_path / name) in sentence for sentence in drift), (name, drift)


def test_entries_in_order_with_the_unit_hashed_as_ansible_hashes():
    files = sglang_replica_files(REPLICAS[:1], RENDERINGS[:1], paths("/etc/sglang"))
    assert files == [
        {"path": "/etc/sglang/sglang-qwen-0.env", "content": RENDERINGS[0][0], "owner": "root", "group": "root",
         "mode": "0600"},
        {"path": "/etc/sglang/sglang-qwen-0.secrets.yaml", "content": RENDERINGS[0][1], "owner": "root", "group": GROUP,
         "mode": "0640"},
        {"path": "/etc/sglang/sglang-qwen-0.service", "checksum": get_hash(RENDERINGS[0][2], "sha1"), "owner": "root",
         "group": "root", "mode": "0644"},
    ]


def test_renderings_that_do_not_match_the_replicas_are_refused():
    with pytest.raises(AnsibleFilterError, match="2 replica"):
        sglang_replica_files(REPLICAS, RENDERINGS[:1], paths("/etc/sglang"))
    with pytest.raises(AnsibleFilterError, match="environment, secrets and unit"):
        sglang_replica_files(REPLICAS[:1], [RENDERINGS[0][:2]], paths("/etc/sglang"))


def test_units_of_the_replicas_then_the_gateway_enabled_as_asked():
    layout = {"replicas": REPLICAS, "gateway": {"unit": "sglang-qwen-gateway.service"}}
    assert sglang_service_units(layout, "smg", "false") == [
        {"name": "sglang-qwen-0.service", "active": True, "enabled": False},
        {"name": "sglang-qwen-1.service", "active": True, "enabled": False},
        {"name": "smg.service", "active": True, "enabled": False}]
    assert sglang_service_units({"replicas": REPLICAS[:1], "gateway": None}, "smg", True) == [
        {"name": "sglang-qwen-0.service", "active": True, "enabled": True}]


PLAY = """
- name: Render with template_each and with the template lookup, one item at a time
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    site: "{{ 'lab' }}"
    replicas: [{name: r0, gpus: [a, b]}, {name: r1, gpus: []}]
    one_by_one:
      - "{{ query('ansible.builtin.template', 'a.j2', 'b.j2', template_vars={'replica': replicas[0]}) }}"
      - "{{ query('ansible.builtin.template', 'a.j2', 'b.j2', template_vars={'replica': replicas[1]}) }}"
  tasks:
    - name: Write both
      ansible.builtin.copy:
        dest: "{{ playbook_dir }}/out.json"
        mode: "0644"
        content: >-
          {{ {'each': query('pro6000.inference.template_each', 'a.j2', 'b.j2', items=replicas, item_name='replica'),
              'one_by_one': one_by_one} | to_json }}
"""


def test_template_each_renders_as_the_template_lookup_does_one_item_at_a_time(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "a.j2").write_text(
        "{{ replica.name }} on {{ site }}\n{% if replica.gpus %}\ngpus={{ replica.gpus | join(',') }}\n{% endif %}\n")
    (tmp_path / "templates" / "b.j2").write_text("[{{ replica.name }}]\n")
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False")
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), str(tmp_path / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["each"] == [["r0 on lab\ngpus=a,b\n", "[r0]\n"], ["r1 on lab\n", "[r1]\n"]]
    assert out["each"] == out["one_by_one"]


def test_the_filters_are_registered():
    assert FilesFilters().filters()["sglang_replica_files"] is sglang_replica_files
    assert UnitsFilters().filters()["sglang_service_units"] is sglang_service_units

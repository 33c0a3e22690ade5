"""Role sglang_service declares a replica's files once, by kind (vars/main.yml,
__sglang_service_replica_spec), and the gateway's once (__sglang_service_gateway_files): filter
sglang_replica_files builds every replica's entries from that spec; run by ansible-playbook, the
change step's template loop writes them and module host_state, whose action plugin renders the same
templates for each replica, finds no drift; and the role's comparison, write, last-good copy,
rollback and retire all read the one declaration, spelling no replica file out."""
import grp
import json
import os
import pathlib
import pwd
import re
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.sglang_replica_files import (
    FilterModule as FilesFilters,
    sglang_replica_files,
)
from ansible_collections.pro6000.inference.plugins.filter.sglang_service_units import (
    FilterModule as UnitsFilters,
    sglang_service_units,
)
from support import REPO_ROOT

ROLE = REPO_ROOT / "roles" / "sglang_service"
REPLICAS = [{"name": "sglang-qwen-0", "unit": "sglang-qwen-0.service", "port": 30001},
            {"name": "sglang-qwen-1", "unit": "sglang-qwen-1.service", "port": 30002}]
SPEC = {
    "env": {"path": "/etc/sglang/%s.env", "template": "sglang.env.j2", "owner": "root", "group": "root",
            "mode": "0600", "kept_mode": "0600", "secret": True},
    "unit": {"path": "/etc/systemd/system/%s.service", "template": "sglang.service.j2", "owner": "root", "group": "root",
             "mode": "0644", "kept_mode": "0644", "secret": False},
}


def test_one_entry_per_replica_and_kind_in_the_order_of_the_spec():
    files = sglang_replica_files(REPLICAS, SPEC)
    assert [entry["path"] for entry in files] == [
        "/etc/sglang/sglang-qwen-0.env", "/etc/systemd/system/sglang-qwen-0.service",
        "/etc/sglang/sglang-qwen-1.env", "/etc/systemd/system/sglang-qwen-1.service"]
    assert files[0] == {"path": "/etc/sglang/sglang-qwen-0.env", "template": "sglang.env.j2", "owner": "root",
                        "group": "root", "mode": "0600", "secret": True}


def test_each_replica_is_given_to_its_templates_under_the_item_name():
    files = sglang_replica_files(REPLICAS, SPEC, item_name="__sglang_service_replica")
    assert [entry["template_vars"] for entry in files] == [{"__sglang_service_replica": replica}
                                                           for replica in REPLICAS for _kind in SPEC]


def test_kept_copies_with_their_kind_and_mode_and_names_alone_suffice():
    files = sglang_replica_files(["sglang-qwen"], SPEC, last_good_dir="/etc/sglang/last-good")
    assert [(entry["kind"], entry["path"], entry["kept"], entry["kept_mode"]) for entry in files] == [
        ("env", "/etc/sglang/sglang-qwen.env", "/etc/sglang/last-good/sglang-qwen.env", "0600"),
        ("unit", "/etc/systemd/system/sglang-qwen.service", "/etc/sglang/last-good/sglang-qwen.service", "0644")]
    assert "template_vars" not in files[0]


@pytest.mark.parametrize("spec, message", [
    ({}, "spec must map each kind"),
    ({"env": dict(SPEC["env"], path="/etc/sglang/x.env")}, r"missing %s in path"),
    ({"env": {key: value for key, value in SPEC["env"].items() if key != "mode"}}, "spec.env needs .*missing mode"),
])
def test_a_spec_without_what_the_steps_read_is_refused(spec, message):
    with pytest.raises(AnsibleFilterError, match=message):
        sglang_replica_files(REPLICAS, spec)


def test_a_kept_mode_is_needed_only_where_copies_are_kept():
    spec = {"env": {key: value for key, value in SPEC["env"].items() if key != "kept_mode"}}
    assert len(sglang_replica_files(REPLICAS, spec)) == 2
    with pytest.raises(AnsibleFilterError, match="missing kept_mode"):
        sglang_replica_files(REPLICAS, spec, last_good_dir="/etc/sglang/last-good")


def test_units_of_the_replicas_then_the_gateway_enabled_as_asked():
    layout = {"replicas": REPLICAS, "gateway": {"unit": "sglang-qwen-gateway.service"}}
    assert sglang_service_units(layout, "smg", "false") == [
        {"name": "sglang-qwen-0.service", "active": True, "enabled": False},
        {"name": "sglang-qwen-1.service", "active": True, "enabled": False},
        {"name": "smg.service", "active": True, "enabled": False}]
    assert sglang_service_units({"replicas": REPLICAS[:1], "gateway": None}, "smg", True) == [
        {"name": "sglang-qwen-0.service", "active": True, "enabled": True}]


# The role's own write task (tasks/replica.yml), included once per replica under the role's
# loop_var, then every replica compared by host_state from the same spec (as tasks/main.yml does).
def role_write_task():
    tasks = yaml.safe_load((ROLE / "tasks" / "replica.yml").read_text())
    return [task for task in tasks if "ansible.builtin.template" in task]


PLAY_TASKS = """
- name: Change each replica
  ansible.builtin.include_tasks: replica.yml
  loop: "{{ replicas }}"
  loop_control:
    loop_var: __sglang_service_replica

- name: Compare every replica with the spec
  pro6000.inference.host_state:
    files: "{{ replicas | pro6000.inference.sglang_replica_files(spec, item_name='__sglang_service_replica') }}"
  register: as_written

- name: Edit one replica's secret behind the role's back
  ansible.builtin.copy:
    content: "port: 1\\n"
    dest: "{{ out }}/r1.secrets.yaml"
    mode: "0640"
    group: "{{ spec.secrets.group }}"
  diff: false
  no_log: true

- name: Compare again
  pro6000.inference.host_state:
    files: "{{ replicas | pro6000.inference.sglang_replica_files(spec, item_name='__sglang_service_replica') }}"
  register: edited

- name: Keep what each comparison answered
  ansible.builtin.copy:
    content: "{{ {'as_written': as_written, 'edited': edited} | to_json }}"
    dest: "{{ out }}/results.json"
    mode: "0644"
"""


def test_replicas_written_by_the_role_from_the_spec_show_no_drift_and_an_edit_is_drift(tmp_path):
    role = tmp_path / "roles" / "service"
    (role / "templates").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "tasks" / "main.yml").write_text(PLAY_TASKS)
    (role / "tasks" / "replica.yml").write_text(json.dumps(role_write_task()))
    (role / "vars").mkdir()
    (role / "vars" / "main.yml").write_text(json.dumps({"__sglang_service_replica_own_files": (
        "{{ [__sglang_service_replica] | pro6000.inference.sglang_replica_files(spec, last_good_dir=out ~ '/last-good') }}")}))
    (role / "templates" / "unit.j2").write_text("[Service]\nExecStart=/bin/sglang --port {{ __sglang_service_replica.port }}\n"
                                                "{% if site %}\nEnvironment=SITE={{ site }}\n{% endif %}\n")
    (role / "templates" / "secrets.j2").write_text("port: {{ __sglang_service_replica.port }}\n")
    out = tmp_path / "out"
    out.mkdir()
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    spec = {"secrets": {"path": "%s/%%s.secrets.yaml" % out, "template": "secrets.j2", "owner": user, "group": group,
                        "mode": "0640", "kept_mode": "0600", "secret": True},
            "unit": {"path": "%s/%%s.service" % out, "template": "unit.j2", "owner": user, "group": group,
                     "mode": "0644", "kept_mode": "0644", "secret": False}}
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": {"out": str(out), "site": "lab", "spec": spec, "ansible_python_interpreter": sys.executable,
                      "replicas": [{"name": "r0", "port": 30001}, {"name": "r1", "port": 30002}]},
             "roles": ["service"]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    bindir = pathlib.Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", PATH=os.pathsep.join([str(bindir), os.environ.get("PATH", "")]))
    done = subprocess.run([str(bindir / "ansible-playbook"), "--diff", "-vvv", "-i", "localhost,", str(tmp_path / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert (out / "r1.service").read_text() == "[Service]\nExecStart=/bin/sglang --port 30002\nEnvironment=SITE=lab\n"
    results = json.loads((out / "results.json").read_text())
    assert results["as_written"]["drift"] == []
    assert results["edited"]["drift"] == ["%s: content differs from the wanted one" % (out / "r1.secrets.yaml")]
    # A secret file is neither logged nor shown as a diff, even with --diff -vvv; the unit is shown.
    assert "+ExecStart=/bin/sglang --port 30002" in done.stdout
    assert "port: 3000" not in done.stdout + done.stderr
    # Nor does its checksum come back from the comparison.
    assert all("checksum" not in entry for entry in results["as_written"]["files"] if entry["path"].endswith(".yaml"))


def tasks_of(path):
    """Every task of a task file, blocks, rescues and always included, as (file name, task)."""
    found = []

    def walk(tasks):
        for task in tasks or []:
            found.append((path.name, task))
            for key in ("block", "rescue", "always"):
                walk(task.get(key))

    walk(yaml.safe_load(path.read_text()))
    return found


def role_tasks():
    return [entry for path in sorted((ROLE / "tasks").glob("*.yml")) for entry in tasks_of(path)]


def reads(task, name):
    """Whether the task's module arguments, loop or vars read variable ``name``."""
    return re.search(r"\b%s\b" % re.escape(name), json.dumps(task)) is not None


def test_the_spec_declares_each_kind_of_replica_file_once():
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    spec = role_vars["__sglang_service_replica_spec"]
    assert sorted(spec) == ["env", "secrets", "unit"]
    for kind, declared in spec.items():
        assert "%s" in declared["path"] and (ROLE / "templates" / declared["template"]).is_file(), kind
        assert {"owner", "group", "mode", "kept_mode", "secret"} <= set(declared), kind
    assert spec["env"]["secret"] and spec["secrets"]["secret"] and not spec["unit"]["secret"]
    # The comparison's entries and those of the replica in hand are both built from it.
    for name in ("__sglang_service_replica_files", "__sglang_service_replica_own_files"):
        assert "sglang_replica_files(__sglang_service_replica_spec" in role_vars[name], name


def test_no_task_spells_a_replica_file_out():
    """What the spec declares (templates, file names as %s patterns) appears in no task: each step that
    writes, compares, keeps, restores or removes a replica's files reads the spec instead."""
    spec = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__sglang_service_replica_spec"]
    words = [declared["template"] for declared in spec.values()]
    words += [declared["path"].rsplit("/", 1)[1] for declared in spec.values()]
    for path in sorted((ROLE / "tasks").glob("*.yml")):
        text = path.read_text()
        for word in words:
            assert word not in text, (path.name, word)


@pytest.mark.parametrize("where, module, variable", [
    ("main.yml", "pro6000.inference.host_state", "__sglang_service_replica_files"),
    ("replica.yml", "ansible.builtin.template", "__sglang_service_replica_own_files"),
    ("replica.yml", "ansible.builtin.copy", "__sglang_service_replica_own_files"),
    ("rollback.yml", "ansible.builtin.stat", "__sglang_service_replica_own_files"),
    ("rollback.yml", "ansible.builtin.file", "__sglang_service_replica_own_files"),
    ("converge.yml", "ansible.builtin.file", "__sglang_service_replica_spec"),
])
def test_each_step_reads_the_one_declaration(where, module, variable):
    """The comparison, the write, the last good copy, the rollback's look and removal, and the
    retire read the replica spec; the rollback restores what its look found."""
    tasks = [task for name, task in role_tasks() if name == where and module in task and reads(task, variable)]
    assert tasks, "no %s task in %s reads %s" % (module, where, variable)


def test_the_rollback_restores_the_copies_its_look_found():
    restore = [task for name, task in role_tasks() if name == "rollback.yml" and "ansible.builtin.copy" in task]
    assert len(restore) == 1 and reads(restore[0], "__sglang_service_last_good_files_kept")
    assert restore[0]["ansible.builtin.copy"]["src"] == "{{ item.kept }}"
    assert restore[0]["ansible.builtin.copy"]["dest"] == "{{ item.path }}"


def test_the_gateway_is_compared_and_written_from_one_list():
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    templates = [entry["template"] for entry in role_vars["__sglang_service_gateway_files"]
                 if isinstance(entry, dict) and "template" in entry]
    assert templates == ["smg-gateway.service.j2"]
    writers = [task for name, task in role_tasks() if name == "gateway.yml"
               and ("ansible.builtin.template" in task or "ansible.builtin.copy" in task)]
    assert len(writers) == 2 and all(reads(task, "__sglang_service_gateway_files") for task in writers)
    compare = [task for name, task in role_tasks() if "pro6000.inference.host_state" in task]
    assert reads(compare[0], "__sglang_service_gateway_files")
    for path in sorted((ROLE / "tasks").glob("*.yml")):
        assert "smg-gateway.service.j2" not in path.read_text() and "smg_launch.py" not in path.read_text(), path.name


def test_the_filters_are_registered():
    assert FilesFilters().filters()["sglang_replica_files"] is sglang_replica_files
    assert UnitsFilters().filters()["sglang_service_units"] is sglang_service_units

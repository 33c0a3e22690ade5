"""Issue #39 item 2: role sglang_service in a few task files named by subject, and no role below it
calling it. Taking a host out of service around a driver change is the playbook's composition
(playbooks/site.yml), as kubespray composes drain and uncordon; role nvidia_driver run alone
refuses the change while GPU processes run (molecule/nvidia_driver shows it)."""
import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
SERVICE = "pro6000.inference.sglang_service"


def role_includes(root, name):
    """(path, action) of every task in roles/ outside roles/<name> that includes or imports role
    <name>, wherever in blocks, rescues and always it sits."""
    found = []

    def walk(path, tasks):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            for key in ("block", "rescue", "always"):
                walk(path, task.get(key))
            for action in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                if isinstance(task.get(action), dict) and task[action].get("name") in (name, name.split(".")[-1]):
                    found.append((str(path.relative_to(root)), action))

    for path in sorted((root / "roles").glob("*/tasks/**/*.yml")):
        if path.parts[len(root.parts) + 1] != name.split(".")[-1]:
            walk(path, yaml.safe_load(path.read_text()))
    return found


def test_sglang_service_has_at_most_eleven_task_files():
    files = sorted(path.name for path in (REPO / "roles" / "sglang_service" / "tasks").rglob("*.yml"))
    assert len(files) <= 11, files


def test_no_role_includes_sglang_service():
    assert role_includes(REPO, SERVICE) == []


def test_the_site_takes_the_host_out_of_service_around_the_driver():
    play = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())[0]
    plan, change = play["pre_tasks"]
    assert plan["ansible.builtin.import_role"] == {"name": "pro6000.inference.nvidia_driver", "tasks_from": "plan"}
    assert change["ansible.builtin.include_tasks"]["file"] == "tasks/driver_change.yml"
    assert change["when"] == "nvidia_driver_decision.converge"
    driver = yaml.safe_load((REPO / "playbooks" / "tasks" / "driver_change.yml").read_text())[0]
    steps = [(task["ansible.builtin.include_role"]["name"], task["ansible.builtin.include_role"]["tasks_from"])
             for task in driver["block"] + driver["always"] if "ansible.builtin.include_role" in task]
    assert steps == [(SERVICE, "stop"), ("pro6000.inference.nvidia_driver", "converge"), (SERVICE, "start")]
    assert [role["role"] for role in play["roles"]][0] != "pro6000.inference.nvidia_driver"


def test_an_include_in_a_rescue_is_found(tmp_path):
    """The walk cannot pass by finding nothing: an include of the role nested in a block's rescue,
    in another role, is reported; the role's own files are not."""
    (tmp_path / "roles" / "other" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "sglang_service" / "tasks").mkdir(parents=True)
    include = "      ansible.builtin.include_role: {name: %s, tasks_from: stop}\n" % SERVICE
    (tmp_path / "roles" / "other" / "tasks" / "main.yml").write_text(
        "- name: b\n  block:\n    - name: x\n      ansible.builtin.debug: {}\n  rescue:\n    - name: s\n" + include)
    (tmp_path / "roles" / "sglang_service" / "tasks" / "main.yml").write_text("- name: s\n" + include[4:])
    assert role_includes(tmp_path, SERVICE) == [("roles/other/tasks/main.yml", "ansible.builtin.include_role")]

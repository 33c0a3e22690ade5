"""Helpers shared by the chatops tests (a module of its own: conftest is not importable by name)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pro6000_chatops import ChatOps
from pro6000_chatops.inventory import ansible_tool, read_inventory

TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parents[1]
LOCAL_PLAYBOOKS = TESTS / "playbooks"

ALL_ACTIONS = ["deploy", "bench", "status", "tune", "cancel"]
# A host that is the machine running the tests: role smoke keeps its result in memory instead of
# writing the machine's /var/lib/pro6000/smoke (its default smoke_result_path).
LOCAL_HOST_VARS = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                   "smoke_result_path": ""}

LAB_INVENTORY = REPO_ROOT / "inventories" / "lab"
LAB_ENVIRONMENT = {"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
                   "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / "collections")}


def lab_containers() -> dict[str, str]:
    """The lab's hosts (group pro6000 of inventories/lab), each with the container its docker
    connection reaches. Skips the test unless PRO6000_LAB=1; fails it when the lab is not up."""
    if os.environ.get("PRO6000_LAB") != "1":
        pytest.skip("the lab is not declared up: run `make lab`, then set PRO6000_LAB=1")
    hosts = sorted(read_inventory(LAB_INVENTORY, "pro6000", LAB_ENVIRONMENT).hosts)
    assert hosts, "inventories/lab has no host in group pro6000"
    containers = {}
    for host in hosts:
        completed = subprocess.run([ansible_tool("ansible-inventory"), "-i", str(LAB_INVENTORY), "--host", host],
                                   capture_output=True, text=True, check=True, timeout=120,
                                   env={**os.environ, **LAB_ENVIRONMENT})
        # The docker connection reaches ansible_host, else the inventory name.
        container = json.loads(completed.stdout).get("ansible_host", host)
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", container],
                               capture_output=True, text=True, check=False, timeout=60)
        assert state.stdout.strip() == "true", f"lab container {container} is not running: run `make lab`"
        containers[host] = container
    return containers


def processes_with(variable: str) -> list[int]:
    """Processes whose environment holds this exact variable assignment."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if variable.encode() in handle.read().split(b"\0"):
                    found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def write_config(folder: Path, inventory: Path, playbooks_dir: Path = LOCAL_PLAYBOOKS,
                 grants=None, groups=None, environment=None, secrets=None) -> Path:
    document = {
        "inventory": str(inventory),
        "playbooks_dir": str(playbooks_dir),
        "audit_log": "audit.jsonl",
        "lock_dir": "locks",
        "runs_dir": "runs",
        "groups": groups if groups is not None else {"ops": ["alice", "bob"], "viewers": ["carol"]},
        "grants": grants if grants is not None else [
            {"groups": ["ops"], "actions": ALL_ACTIONS, "hosts": ["pro6000-*"]},
            {"users": ["carol"], "actions": ["status"], "hosts": ["pro6000-0[12]"]},
            {"users": ["dave"], "actions": ["bench"], "hosts": ["pro6000-02"]},
        ],
        "environment": environment or {},
        "secrets": secrets or [],
    }
    path = folder / "chatops.yml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def audit_records(ops: ChatOps) -> list[dict]:
    if not ops.config.audit_log.exists():
        return []
    return [json.loads(line) for line in ops.config.audit_log.read_text(encoding="utf-8").splitlines()]


class RunnerSpy:
    """Stands where ansible-runner would be called and records any call: refusal tests assert
    that it is never reached."""

    def __init__(self):
        self.calls = []

    def __call__(self, run, on_event, cancel):
        self.calls.append(run)
        return "successful", 0

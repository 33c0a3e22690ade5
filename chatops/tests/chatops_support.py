"""Helpers shared by the chatops tests (a module of its own: conftest is not importable by name)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from pro6000_chatops import ChatOps

TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parents[1]
LOCAL_PLAYBOOKS = TESTS / "playbooks"

ALL_ACTIONS = ["deploy", "bench", "status", "tune", "cancel"]
LOCAL_HOST_VARS = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


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

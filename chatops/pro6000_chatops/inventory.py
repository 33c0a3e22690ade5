"""The hosts chat may name: members of the inventory group, read with ``ansible-inventory``.

It runs as a separate process (as the playbooks will), so the bot sees exactly the inventory
that ansible-playbook sees, inventory plugins included.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .environment import minimal_environment


class InventoryError(RuntimeError):
    """The inventory could not be read."""


def ansible_tool(name: str) -> str:
    """The path of an Ansible command, preferring the one installed beside this Python."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise InventoryError(f"{name} is not installed")
    return found


@dataclass(frozen=True)
class InventoryHosts:
    """Hosts of the group chat may target, and every group name (a host must not shadow one)."""

    hosts: frozenset[str]
    group_names: frozenset[str]


def _members(listing: Mapping[str, dict], group: str, seen: set[str]) -> set[str]:
    if group in seen:
        return set()
    seen.add(group)
    entry = listing.get(group, {})
    hosts = set(entry.get("hosts", []))
    for child in entry.get("children", []):
        hosts |= _members(listing, child, seen)
    return hosts


def read_inventory(inventory: Path, group: str, environment: Mapping[str, str]) -> InventoryHosts:
    """List the hosts of ``group`` (children included) in an inventory source.

    An inventory script runs with the allow-listed environment and the operator's fixed
    variables only, as the playbooks do: never with the bot's own credentials.
    """
    command = [ansible_tool("ansible-inventory"), "-i", str(inventory), "--list", "--export"]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False,
                                   env=minimal_environment(os.environ, environment))
    except subprocess.TimeoutExpired as error:
        raise InventoryError("ansible-inventory took longer than 120 s") from error
    if completed.returncode != 0:
        last_line = (completed.stderr.strip().splitlines() or ["no message"])[-1]
        raise InventoryError(f"ansible-inventory failed: {last_line}")
    try:
        listing = json.loads(completed.stdout)
    except ValueError:
        first_line = (completed.stdout.strip().splitlines() or ["nothing"])[0][:120]
        raise InventoryError(f"ansible-inventory printed something other than JSON: {first_line!r}") from None
    if not isinstance(listing, dict):
        raise InventoryError("ansible-inventory printed JSON that is not a mapping of groups")
    group_names = frozenset(name for name in listing if name != "_meta")
    return InventoryHosts(frozenset(_members(listing, group, set())), group_names)


class InventoryCache:
    """Reads the inventory at most once per ``max_age`` seconds."""

    def __init__(self, inventory: Path, group: str, environment: Mapping[str, str], max_age: int):
        self._args = (inventory, group, environment)
        self._max_age = max_age
        self._lock = threading.Lock()
        self._hosts: InventoryHosts | None = None
        self._read_at = 0.0

    def get(self) -> InventoryHosts:
        with self._lock:
            if self._hosts is None or time.monotonic() - self._read_at > self._max_age:
                self._hosts = read_inventory(*self._args)
                self._read_at = time.monotonic()
            return self._hosts

"""The operator's configuration file: paths, environment, secrets and who may do what where.

Everything here comes from the operator, never from chat. Unknown keys, unknown actions and
wrong types stop the bot at start with a message naming the key.
"""
from __future__ import annotations

import fnmatch
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

from .commands import ACTIONS, canonical_action

_ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS = {
    "inventory", "inventory_group", "inventory_cache_seconds", "playbooks_dir", "audit_log",
    "lock_dir", "runs_dir", "job_timeout", "environment", "secrets", "groups", "grants",
    # The chat bot's sections, validated by bot.py (serve) and ignored here.
    "matrix", "bot",
}
_GRANT_KEYS = {"users", "groups", "actions", "hosts"}


class ConfigError(ValueError):
    """The configuration file is wrong; the message names the key."""


@dataclass(frozen=True)
class Grant:
    """Users and members of groups may run these actions on hosts matching these patterns."""

    users: frozenset[str]
    groups: frozenset[str]
    actions: frozenset[str]
    host_patterns: tuple[str, ...]

    def covers(self, user: str, user_groups: frozenset[str], action: str) -> bool:
        return action in self.actions and (user in self.users or bool(self.groups & user_groups))

    def matches_host(self, host: str) -> bool:
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.host_patterns)


@dataclass(frozen=True)
class Policy:
    """Authorisation: a request is allowed only when a grant names its user, action and host."""

    groups: Mapping[str, frozenset[str]]
    grants: tuple[Grant, ...]

    def groups_of(self, user: str) -> frozenset[str]:
        return frozenset(group for group, members in self.groups.items() if user in members)

    def grants_of(self, user: str) -> list[Grant]:
        """The grants that name the user or one of the user's groups, whatever their actions."""
        user_groups = self.groups_of(user)
        return [grant for grant in self.grants if user in grant.users or grant.groups & user_groups]

    def _grants_for(self, user: str, action: str) -> list[Grant]:
        user_groups = self.groups_of(user)
        return [grant for grant in self.grants if grant.covers(user, user_groups, action)]

    def may_run(self, user: str, action: str) -> bool:
        """Whether the user may run the action on at least some host."""
        return bool(self._grants_for(user, action))

    def allows(self, user: str, action: str, host: str) -> bool:
        return any(grant.matches_host(host) for grant in self._grants_for(user, action))


@dataclass(frozen=True)
class Config:
    """The validated configuration; relative paths are resolved against the file's folder."""

    inventory: Path
    playbooks_dir: Path
    audit_log: Path
    lock_dir: Path
    runs_dir: Path
    policy: Policy
    inventory_group: str = "pro6000"
    inventory_cache_seconds: int = 60
    job_timeout: int = 4 * 3600
    environment: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    secrets: tuple[str, ...] = ()


def _default_runs_dir() -> Path:
    """A memory-backed folder when there is one, so run directories never reach a disk."""
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    return Path(tempfile.gettempdir())


def _string_list(value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{key} must be a list of non-empty strings")
    return value


def _positive_int(value: object, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{key} must be a positive whole number")
    return value


def _parse_grant(index: int, raw: object, groups: Mapping[str, frozenset[str]]) -> Grant:
    where = f"grants[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping with users/groups, actions and hosts")
    unknown = set(raw) - _GRANT_KEYS
    if unknown:
        raise ConfigError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    users = _string_list(raw.get("users", []), f"{where}.users")
    grant_groups = _string_list(raw.get("groups", []), f"{where}.groups")
    if not users and not grant_groups:
        raise ConfigError(f"{where} names no users and no groups")
    for group in grant_groups:
        if group not in groups:
            raise ConfigError(f"{where}.groups names {group!r}, which is not under groups")
    actions = set()
    for action in _string_list(raw.get("actions"), f"{where}.actions"):
        canonical = canonical_action(action)
        if canonical is None:
            raise ConfigError(f"{where}.actions names unknown action {action!r}; "
                              f"known: {', '.join(sorted(ACTIONS))}")
        actions.add(canonical)
    hosts = _string_list(raw.get("hosts"), f"{where}.hosts")
    return Grant(frozenset(users), frozenset(grant_groups), frozenset(actions), tuple(hosts))


def _parse_environment(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ConfigError("environment must be a mapping of variable names to strings")
    for name, value in raw.items():
        if not isinstance(name, str) or not _ENVIRONMENT_NAME.fullmatch(name):
            raise ConfigError(f"environment has an invalid variable name {name!r}")
        if not isinstance(value, str):
            raise ConfigError(f"environment.{name} must be a string")
    return dict(raw)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a configuration file (YAML)."""
    path = Path(path).resolve()
    with open(path, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping")
    unknown = set(raw) - _KEYS
    if unknown:
        raise ConfigError(f"unknown keys: {', '.join(sorted(unknown))}")
    base = path.parent

    def required_path(key: str) -> Path:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key} is required and must be a path")
        return (base / value).resolve()

    raw_groups = raw.get("groups", {})
    if not isinstance(raw_groups, dict):
        raise ConfigError("groups must be a mapping of group names to lists of users")
    groups = {str(name): frozenset(_string_list(members, f"groups.{name}"))
              for name, members in raw_groups.items()}
    raw_grants = raw.get("grants")
    if not isinstance(raw_grants, list) or not raw_grants:
        raise ConfigError("grants must be a non-empty list")
    policy = Policy(MappingProxyType(groups),
                    tuple(_parse_grant(index, grant, groups) for index, grant in enumerate(raw_grants)))

    secrets = _string_list(raw.get("secrets", []), "secrets")
    for name in secrets:
        if not _ENVIRONMENT_NAME.fullmatch(name):
            raise ConfigError(f"secrets has an invalid variable name {name!r}")
    inventory_group = raw.get("inventory_group", "pro6000")
    if not isinstance(inventory_group, str) or not inventory_group:
        raise ConfigError("inventory_group must be a group name")
    runs_dir = (base / raw["runs_dir"]).resolve() if raw.get("runs_dir") else _default_runs_dir()
    return Config(
        inventory=required_path("inventory"),
        playbooks_dir=required_path("playbooks_dir"),
        audit_log=required_path("audit_log"),
        lock_dir=required_path("lock_dir"),
        runs_dir=runs_dir,
        policy=policy,
        inventory_group=inventory_group,
        inventory_cache_seconds=_positive_int(raw.get("inventory_cache_seconds", 60),
                                              "inventory_cache_seconds"),
        job_timeout=_positive_int(raw.get("job_timeout", 4 * 3600), "job_timeout"),
        environment=MappingProxyType(_parse_environment(raw.get("environment", {}))),
        secrets=tuple(secrets),
    )

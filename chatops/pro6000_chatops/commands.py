"""The chat command grammar: an allow-list of actions, each with typed, range-checked parameters.

Chat text is untrusted. It is checked character by character before it is split, so nothing that
a shell, Jinja or ansible-playbook would interpret (``;``, ``$``, backticks, ``{``, ``@``, ``/``,
quotes, newlines, non-ASCII look-alikes) can reach a later stage. The only values that leave this
module are an action from ``ACTIONS``, a host-name-shaped word (checked against the inventory
later), an algorithm from ``ALGORITHMS`` and integers within their ranges.
"""
from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .speculative import ALGORITHMS, DDTREE_BUDGET_RANGE, DRAFT_LENGTH_RANGE
from .summary import PROBE_MODULE

MAX_COMMAND_LENGTH = 200
ALLOWED_CHARACTERS = frozenset(string.ascii_letters + string.digits + " ._=-")
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# No leading zero, and no more digits than the largest number a parameter takes.
_WHOLE_NUMBER = re.compile(r"0|[1-9][0-9]{0,%d}" % (len(str(max(DRAFT_LENGTH_RANGE[1], DDTREE_BUDGET_RANGE[1]))) - 1))
_ECHO_LIMIT = 32


class Refused(Exception):
    """A request that must not run; ``str()`` is the one-line reason shown to the user."""


@dataclass(frozen=True)
class NumberParameter:
    """A ``key=N`` parameter: a whole number within [low, high], passed as one extra var."""

    key: str
    low: int
    high: int
    extra_var: str


@dataclass(frozen=True)
class Action:
    """One allowed action: which playbook it runs and which parameters it takes."""

    name: str
    playbook: str | None
    host_required: bool
    # help names no host at all.
    takes_host: bool = True
    takes_algorithm: bool = False
    numbers: tuple[NumberParameter, ...] = ()
    # The extra var that names the target host, for playbooks that take it (besides --limit).
    host_var: str | None = None
    fixed_vars: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    # The module whose result ends the action's work on a host: the run frees that host then,
    # not when the slowest host is done (None: the hosts stay locked until the run ends).
    host_done_after: str | None = None
    # Whether its run changes hosts (installs, restarts, reconfigures): the chat bot keeps a run
    # worker that read-only runs never take for these.
    changes_hosts: bool = False

    @property
    def usage(self) -> str:
        words = [self.name]
        if self.takes_host:
            words.append("HOST" if self.host_required else "[HOST]")
        if self.takes_algorithm:
            words.append("[" + "|".join(ALGORITHMS) + "]")
        words.extend(f"[{number.key}={number.low}..{number.high}]" for number in self.numbers)
        return " ".join(words)


# The extra vars are the sglang_service role's own variables (roles/sglang_service/defaults).
ALGORITHM_EXTRA_VAR = "sglang_service_speculative_algorithm"
# The ranges are the role's (speculative.py, a copy of the collection's module_utils/_sglang/speculative.py).
DRAFT = NumberParameter("draft", *DRAFT_LENGTH_RANGE, "sglang_service_draft_length")
BUDGET = NumberParameter("budget", *DDTREE_BUDGET_RANGE, "sglang_service_ddtree_budget")

ACTIONS: Mapping[str, Action] = MappingProxyType({
    "deploy": Action("deploy", "deploy.yml", host_required=True, takes_algorithm=True,
                     numbers=(DRAFT, BUDGET), changes_hosts=True),
    "bench": Action("bench", "smoke.yml", host_required=True),
    # Read-only: each host is free again once its probe has answered (or failed).
    "status": Action("status", "smoke.yml", host_required=False,
                     fixed_vars=MappingProxyType({"smoke_probe_only": True}),
                     host_done_after=PROBE_MODULE),
    # tune.yml measures one host, named by tune_host, and leaves it on the best configuration.
    "tune": Action("tune", "tune.yml", host_required=True, host_var="tune_host", changes_hosts=True),
    # Stops a run in progress; runs no playbook of its own.
    "cancel": Action("cancel", None, host_required=True),
})
ALIASES: Mapping[str, str] = MappingProxyType({"smoke": "bench"})
# Open to everyone and never granted: it answers with the grammar and the asker's own grants.
HELP = Action("help", None, host_required=False, takes_host=False)
_USE_ONE_OF = "use one of " + ", ".join(sorted(ACTIONS)) + " (help lists what you may run)"


def canonical_action(word: str) -> str | None:
    """Return the action a word names (aliases resolved), or None when it names none."""
    word = word.lower()
    word = ALIASES.get(word, word)
    return word if word in ACTIONS else None


def grammar() -> list[str]:
    """One usage line per command, help last, with the aliases: what ``help`` shows."""
    aliases = {name: [alias for alias, target in ALIASES.items() if target == name] for name in ACTIONS}
    return [action.usage + "".join(f" (or {alias})" for alias in aliases.get(action.name, ()))
            for action in (*ACTIONS.values(), HELP)]


@dataclass(frozen=True)
class Command:
    """A parsed, validated command. Nothing in it came from chat unchecked."""

    action: Action
    host: str | None
    algorithm: str | None = None
    numbers: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def extravars(self) -> dict[str, object]:
        """The extra vars for the playbook: fixed ones of the action plus validated parameters."""
        extravars: dict[str, object] = dict(self.action.fixed_vars)
        if self.action.host_var is not None:
            extravars[self.action.host_var] = self.host
        if self.algorithm is not None:
            extravars[ALGORITHM_EXTRA_VAR] = self.algorithm
        for number in self.action.numbers:
            if number.key in self.numbers:
                extravars[number.extra_var] = self.numbers[number.key]
        return extravars

    def describe(self) -> str:
        """The command in its normal form, for messages and the audit log."""
        words = [self.action.name]
        if self.host:
            words.append(self.host)
        if self.algorithm:
            words.append(self.algorithm)
        words.extend(f"{key}={value}" for key, value in self.numbers.items())
        return " ".join(words)


def _echo(word: str) -> str:
    """A word from chat, quoted and shortened, safe to put in a reply (it passed the charset)."""
    return repr(word if len(word) <= _ECHO_LIMIT else word[:_ECHO_LIMIT] + "...")


def _check_characters(text: str) -> None:
    if len(text) > MAX_COMMAND_LENGTH:
        raise Refused(f"the command is {len(text)} characters long; the limit is {MAX_COMMAND_LENGTH}")
    for position, character in enumerate(text, start=1):
        if character not in ALLOWED_CHARACTERS:
            raise Refused(
                f"character U+{ord(character):04X} at position {position} is not allowed: "
                "use letters, digits, '.', '_', '-', '=' and single-line spaces"
            )


def _parse_number(number: NumberParameter, value: str) -> int:
    if not _WHOLE_NUMBER.fullmatch(value) or not number.low <= int(value) <= number.high:
        raise Refused(f"{number.key}={value} is out of range: {number.key} is a whole number "
                      f"from {number.low} to {number.high}")
    return int(value)


def parse(text: str) -> Command:
    """Parse one chat command or raise Refused with a one-line reason."""
    if not isinstance(text, str):
        raise Refused("the command must be text")
    _check_characters(text)
    words = text.split()
    if not words:
        raise Refused("empty command: " + _USE_ONE_OF)
    name = canonical_action(words[0])
    if name is None and words[0].lower() != HELP.name:
        raise Refused(f"unknown action {_echo(words[0])}: " + _USE_ONE_OF)
    action = ACTIONS[name] if name else HELP
    arguments = words[1:]

    host = None
    if (action.takes_host and arguments and "=" not in arguments[0]
            and arguments[0].lower() not in ALGORITHMS):
        host = arguments.pop(0)
        if not _HOST_NAME.fullmatch(host):
            raise Refused(f"{_echo(host)} is not a host name; usage: {action.usage}")
    if action.host_required and host is None:
        raise Refused(f"{action.name} needs a host; usage: {action.usage}")

    algorithm = None
    numbers: dict[str, int] = {}
    by_key = {number.key: number for number in action.numbers}
    for word in arguments:
        key, equals, value = word.partition("=")
        key = key.lower()
        if equals and key in by_key:
            if key in numbers:
                raise Refused(f"{key} is given twice")
            numbers[key] = _parse_number(by_key[key], value)
        elif not equals and action.takes_algorithm and key in ALGORITHMS:
            if algorithm is not None:
                raise Refused("the algorithm is given twice")
            algorithm = key
        else:
            raise Refused(f"unexpected {_echo(word)}; usage: {action.usage}")

    if algorithm == "none" and numbers:
        raise Refused("draft and budget need speculative decoding: choose ddtree or dflash")
    if BUDGET.key in numbers and algorithm != "ddtree":
        raise Refused("budget applies to ddtree only: name ddtree in the command")
    return Command(action=action, host=host, algorithm=algorithm,
                   numbers=MappingProxyType(numbers))

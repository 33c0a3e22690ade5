# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a value written into a systemd unit, a defaults file's ARGS or a command line may be:
the one definition behind the roles' variable rules (filter input_rules) and the renderers'
own refusals (filters sglang_speculative_plan, sglang_replica_plan, sglang_gateway_argv)."""

from __future__ import annotations

import re

# systemd reads a unit line by line: a newline (or any control character) in a word or value
# would start a setting of its own.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# One word of ARGS="..." in a Debian defaults file, which the package's unit splits on whitespace
# ($ARGS): a quote or backslash would end or escape the quoted value.
ARGS_WORD_RE = re.compile(r'^[^\s"\\\x00-\x1f\x7f]+$')
# A systemd unit's name without .service, also a directory name under /etc, /var/lib, /var/cache.
UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")
# Prometheus's duration (prometheus/common model.ParseDuration): units largest first, each once.
DURATION_RE = re.compile(r"^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$")


def words(value):
    """The strings a value is made of: itself, a list's items, a mapping's keys and values."""
    if isinstance(value, dict):
        return [str(word) for pair in value.items() for word in pair]
    if isinstance(value, (list, tuple)):
        return [str(word) for word in value]
    return [str(value)]


def single_line(value):
    """No word of the value holds a newline or another control character."""
    return not any(CONTROL_RE.search(word) for word in words(value))


def args_words(value):
    """Every word of the value can stand in a defaults file's quoted ARGS as one word."""
    return all(ARGS_WORD_RE.match(word) for word in words(value))


def port(value):
    """A TCP port, 1 to 65535, given as an integer or its digits (never a boolean)."""
    if isinstance(value, bool) or not re.match(r"^[0-9]{1,5}$", str(value)):
        return False
    return 1 <= int(value) <= 65535


def unit_name(value):
    return isinstance(value, str) and bool(UNIT_NAME_RE.match(value))


def duration(value):
    return isinstance(value, str) and value != "" and bool(DURATION_RE.match(value))


def gpu(value):
    """A GPU by PCI position (an integer from 0, or its digits) or by UUID: never a boolean, a
    negative position or anything else."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$", value))


def gpus(value):
    return isinstance(value, list) and all(gpu(item) for item in value)


def positive(value):
    """An integer of at least 1 (never a boolean)."""
    return not isinstance(value, bool) and bool(re.match(r"^[0-9]+$", str(value))) and int(value) >= 1


# What each kind of input must be, as the rules' "why" says it.
KINDS = {
    "single_line": (single_line, "must not hold a newline or any other control character: systemd would read it "
                                 "as a line of its own in the unit"),
    "args_words": (args_words, "every word must be free of whitespace, quotes, backslashes and control characters: "
                               "it is one word of the quoted ARGS of a defaults file"),
    "port": (port, "must be a TCP port, 1 to 65535"),
    "unit_name": (unit_name, "must be a plain systemd unit name without .service (letters, digits, _ . -; no /)"),
    "duration": (duration, "must be a Prometheus duration such as 30d, 15s or 1h30m"),
    "gpus": (gpus, "every entry must be a GPU's PCI position (0, 1, ...) or its UUID, never a boolean or negative"),
    "positive": (positive, "must be an integer of at least 1"),
}

# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reads what an SGLang build accepts from the ``--help`` text of ``sglang.launch_server``.

Only the invocation lines of argparse's option list count (two spaces of indent, then a
dash); the usage block and help sentences that mention other flags do not. Standard library
only: the module that uses this runs on the managed host.
"""

from __future__ import annotations

import re

DDTREE_ALGORITHM = "DDTREE"
DDTREE_FORK_FLAG = "--speculative-dflash-enable-ddtree"
ALGORITHM_OPTION = "--speculative-algorithm"

# argparse indents entries by two spaces inside a section; their help text starts further in.
_ENTRY = re.compile(r"^  (-\S.*)$")
# Where the invocation ends and the help text on the same line begins.
_GAP = re.compile(r"\s{2,}")
# Releases whose --speculative-algorithm has no choices list the algorithms in its help:
# "Speculative algorithm. Builtins: EAGLE, EAGLE3, ..., DFLASH. Or any name registered ...".
_BUILTINS = re.compile(r"Builtins?:\s*([A-Z0-9_,\s]+?)\.(?:\s|$)")
_CHOICES = re.compile(r"^\[?\{([^{}]*)\}")
_ALGORITHM_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")

VERSION_CODE = "import importlib.metadata as m; print(m.version('sglang'))"
_VERSION = re.compile(r"^\d+(\.\d+)*([.+-]?[0-9A-Za-z.+-]*)?$")


def _entries(text):
    """Yields (invocation, help lines) for every option entry of the help text."""
    entry = None
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        match = _ENTRY.match(line)
        if match:
            if entry:
                yield entry
            body = match.group(1)
            # A choice list cut over lines by a narrow formatter: join until its brace closes.
            while body.count("{") > body.count("}") and index < len(lines):
                body += lines[index].strip()
                index += 1
            parts = _GAP.split(body, maxsplit=1)
            entry = (parts[0], [parts[1]] if len(parts) > 1 else [])
        elif entry and line.startswith("    ") and line.strip():
            entry[1].append(line.strip())
        elif entry:
            yield entry
            entry = None
    if entry:
        yield entry


def _aliases(invocation):
    """[(option, choices or None)] for '-h, --help' or '--a A, --b {x,y}' invocations."""
    found = []
    for segment in re.split(r",\s+(?=-)", invocation):
        option, metavar = segment.strip().partition(" ")[::2]
        metavar = metavar.strip()
        # "{a,b}", or "[{a,b} ...]" / "{a,b} [{a,b} ...]" for options taking several values.
        braces = _CHOICES.search(metavar)
        choices = [value for value in braces.group(1).split(",") if value] if braces else None
        found.append((option, choices))
    # Python 3.13+ prints the metavar once, after the last alias: it belongs to all of them.
    shared = next((choices for option, choices in reversed(found) if choices is not None), None)
    return [(option, choices if choices is not None else shared) for option, choices in found]


def _algorithms(choices, help_lines):
    if choices:
        return sorted({value.upper() for value in choices})
    match = _BUILTINS.search(" ".join(help_lines))
    if not match:
        return []
    names = (name.strip() for name in match.group(1).split(","))
    return sorted({name for name in names if _ALGORITHM_NAME.match(name)})


def parse_help(text):
    """What the build accepts, from ``python -m sglang.launch_server --help`` output.

    Returns ``{"options": [...], "choices": {...}, "speculative_algorithms": [...],
    "ddtree": "algorithm" | "dflash_flag" | None}``.
    """
    options = set()
    choices = {}
    algorithm_entry = None
    for invocation, help_lines in _entries(text):
        for option, values in _aliases(invocation):
            if not option.startswith("--"):
                continue
            options.add(option)
            if values:
                # Sorted: some releases build a choice list from a set, whose order changes
                # with each process's hash seed; the fact file must not.
                choices[option] = sorted(values)
            if option == ALGORITHM_OPTION:
                algorithm_entry = (values, help_lines)
    if not options:
        raise ValueError("no long options found: this is not argparse --help output")
    algorithms = _algorithms(*algorithm_entry) if algorithm_entry else []
    if DDTREE_ALGORITHM in algorithms:
        ddtree = "algorithm"
    elif DDTREE_FORK_FLAG in options:
        ddtree = "dflash_flag"
    else:
        ddtree = None
    return {
        "options": sorted(options),
        "choices": dict(sorted(choices.items())),
        "speculative_algorithms": algorithms,
        "ddtree": ddtree,
    }


def parse_version(text):
    """The version printed by VERSION_CODE, checked to look like one."""
    version = text.strip().splitlines()[-1].strip() if text.strip() else ""
    if not _VERSION.match(version):
        raise ValueError("not a version: %r" % text.strip()[-200:])
    return version

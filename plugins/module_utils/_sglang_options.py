# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reads what an SGLang build accepts from SGLang's own argument parser object.

``describe_parser`` runs in the BUILD's interpreter (``python -c``, its source taken with
``inspect``), builds the parser exactly as ``sglang.launch_server`` does
(``ServerArgs.add_cli_args(argparse.ArgumentParser())``, ``python/sglang/srt/server_args.py``)
and prints what the parser object holds. ``accepted`` turns that into the ``sglang`` fact.
Standard library only: the module that uses this runs on the managed host.
"""

from __future__ import annotations

import inspect
import re

DDTREE_ALGORITHM = "DDTREE"
# SGLang pull request 29907 adds this option together with the DDTREE algorithm.
DDTREE_BUDGET_OPTION = "--speculative-ddtree-budget"
DDTREE_FORK_FLAG = "--speculative-dflash-enable-ddtree"
ALGORITHM_OPTION = "--speculative-algorithm"
MODEL_PATH_OPTION = "--model-path"

# From 0.5.14 to 0.5.23 (checked) no release declares the algorithms as argparse choices; the
# option's help names them: "Speculative algorithm. Builtins: EAGLE, EAGLE3, ..., DFLASH. Or any name registered via
# `SpeculativeAlgorithm.register`." (python/sglang/srt/server_args.py up to 0.5.19,
# python/sglang/srt/arg_groups/fields/spec.py from 0.5.21).
_BUILTINS = re.compile(r"Builtins?:\s*([A-Z0-9_,\s]+?)\.(?:\s|$)")
_ALGORITHM_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def describe_parser():
    """Runs inside the build's interpreter: prints the parser's long options, their choices and
    the help of --speculative-algorithm as JSON. Self-contained: it is sent as source."""
    import argparse
    import importlib.metadata
    import json
    import sys

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options, choices, algorithm_help = set(), {}, None
    # Every action argparse accepts, hidden ones (help=SUPPRESS, e.g. old aliases) included.
    for action in parser._actions:  # pylint: disable=protected-access
        for option in action.option_strings:
            if not option.startswith("--"):
                continue
            options.add(option)
            if action.choices:
                choices[option] = sorted(str(choice) for choice in action.choices)
            if option == "--speculative-algorithm" and action.help is not argparse.SUPPRESS:
                algorithm_help = action.help
    json.dump({"version": importlib.metadata.version("sglang"), "options": sorted(options),
               "choices": choices, "algorithm_help": algorithm_help}, sys.stdout)


def describe_parser_code():
    """The program to run with the build's interpreter (``python -c``)."""
    return "%s\ndescribe_parser()\n" % inspect.getsource(describe_parser)


def _algorithms(report):
    """Values of --speculative-algorithm, upper case: the option's choices where a release
    declares them (0.5.9: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM), else the builtins its help
    names; DDTREE where the build has the budget option of pull request 29907 (its help may not
    list the algorithm it registers)."""
    choices = report["choices"].get(ALGORITHM_OPTION)
    if choices:
        names = set(choices)
    else:
        match = _BUILTINS.search(report.get("algorithm_help") or "")
        names = set(name.strip() for name in match.group(1).split(",")) if match else set()
    names = set(name.upper() for name in names if _ALGORITHM_NAME.match(name.upper()))
    if DDTREE_BUDGET_OPTION in report["options"]:
        names.add(DDTREE_ALGORITHM)
    return sorted(names)


def accepted(report):
    """The ``sglang`` fact's reading of a build: ``version``, ``options``, ``choices``,
    ``speculative_algorithms`` and ``ddtree`` (``algorithm``, ``dflash_flag`` or None), from
    what ``describe_parser`` printed."""
    if not isinstance(report, dict) or not report.get("version"):
        raise ValueError("the parser report has no version: %r" % (report,))
    # Every SGLang server parser has it; argparse alone gives only --help.
    if MODEL_PATH_OPTION not in (report.get("options") or []):
        raise ValueError("the parser has no %s: not SGLang's server parser (options: %s)"
                         % (MODEL_PATH_OPTION, ", ".join(report.get("options") or []) or "none"))
    algorithms = _algorithms(report)
    if DDTREE_ALGORITHM in algorithms:
        ddtree = "algorithm"
    elif DDTREE_FORK_FLAG in report["options"]:
        ddtree = "dflash_flag"
    else:
        ddtree = None
    return {
        "version": report["version"],
        "options": sorted(report["options"]),
        "choices": dict(sorted(report["choices"].items())),
        "speculative_algorithms": algorithms,
        "ddtree": ddtree,
    }

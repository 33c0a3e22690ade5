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
MAMBA_STRATEGY_OPTIONS = ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy")
LAZY_STRATEGY = "extra_buffer_lazy"
# The assert that refuses extra_buffer_lazy together with speculative decoding, in the build's
# mamba validator: "extra_buffer_lazy unsupported with spec." (0.5.14 to 0.5.16,
# ServerArgs._validate_mamba_extra_buffer) and "extra_buffer_lazy unsupported with
# {speculative_algorithm}" for DFLASH (0.5.17); SGLang pull request 34763 (merged 2026-08-13,
# first released in 0.5.18) removed it. What stays from 0.5.18 on reads "unsupported under PD
# disaggregation", which this does not match.
LAZY_REFUSAL = "extra_buffer_lazy unsupported with"

# From 0.5.14 to 0.5.23 (checked) no release declares the algorithms as argparse choices; the
# option's help names them: "Speculative algorithm. Builtins: EAGLE, EAGLE3, ..., DFLASH. Or any name registered via
# `SpeculativeAlgorithm.register`." (python/sglang/srt/server_args.py up to 0.5.19,
# python/sglang/srt/arg_groups/fields/spec.py from 0.5.21).
_BUILTINS = re.compile(r"Builtins?:\s*([A-Z0-9_,\s]+?)\.(?:\s|$)")
_ALGORITHM_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def describe_parser():
    """Runs inside the build's interpreter: prints the parser's long options, their choices,
    the help of --speculative-algorithm, the default of --speculative-ddtree-budget and the
    source of the mamba extra-buffer validator as JSON. Self-contained: it is sent as source."""
    import argparse
    import importlib.metadata
    import inspect
    import json
    import sys

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options, choices, defaults, algorithm_help = set(), {}, {}, None
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
            if option == "--speculative-ddtree-budget" and isinstance(action.default, (int, type(None))):
                defaults[option] = action.default
    # Where the build checks --mamba-radix-cache-strategy: a function of its own from 0.5.19
    # (python/sglang/srt/arg_groups/mamba_hook.py), a ServerArgs method before.
    try:
        from sglang.srt.arg_groups.mamba_hook import validate_mamba_extra_buffer as validator
    except ImportError:
        validator = getattr(ServerArgs, "_validate_mamba_extra_buffer", None)
    try:
        validator_source = inspect.getsource(validator) if validator is not None else None
    except (OSError, TypeError):
        validator_source = None
    json.dump({"version": importlib.metadata.version("sglang"), "options": sorted(options),
               "choices": choices, "defaults": defaults, "algorithm_help": algorithm_help,
               "mamba_validator": validator_source}, sys.stdout)


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


def _ddtree_budget(report):
    """The budget option's default and limits: the parser's int default (None: the build derives
    it, pull request 29907's DDTreeWorker takes ``speculative_ddtree_budget or block_size - 1``)
    and the bounds of its choices where the build declares them (else at least 1: a budget of 0
    is no tree, and the worker reads it as unset)."""
    if DDTREE_BUDGET_OPTION not in report["options"]:
        return None
    allowed = [int(c) for c in report["choices"].get(DDTREE_BUDGET_OPTION) or [] if str(c).isdigit()]
    default = (report.get("defaults") or {}).get(DDTREE_BUDGET_OPTION)
    return {"default": default if isinstance(default, int) and not isinstance(default, bool) else None,
            "minimum": min(allowed) if allowed else 1,
            "maximum": max(allowed) if allowed else None}


def _lazy_with_speculation(report):
    """True when the build takes extra_buffer_lazy together with DFLASH-family speculation,
    False when its mamba validator refuses it (see LAZY_REFUSAL), None when the build has no
    extra_buffer_lazy or its validator could not be read."""
    if not any(LAZY_STRATEGY in (report["choices"].get(option) or []) for option in MAMBA_STRATEGY_OPTIONS):
        return None
    source = report.get("mamba_validator")
    if not isinstance(source, str) or not source:
        return None
    return LAZY_REFUSAL not in source


def accepted(report):
    """The ``sglang`` fact's reading of a build: ``version``, ``options``, ``choices``,
    ``speculative_algorithms``, ``ddtree`` (``algorithm``, ``dflash_flag`` or None),
    ``ddtree_budget`` (default and limits, or None) and ``mamba_lazy_with_speculation``, from
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
        "ddtree_budget": _ddtree_budget(report),
        "mamba_lazy_with_speculation": _lazy_with_speculation(report),
    }

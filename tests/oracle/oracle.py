"""Asks the REAL argument parser of an SGLang release whether it accepts a command line.

Each call runs one interpreter of the release's oracle environment (see build_envs.py), which
builds ``ServerArgs.add_cli_args(parser)`` exactly as ``sglang.launch_server`` does and parses
every argv it is given. Only argparse runs: ``ServerArgs.from_cli_args`` would run post-init
checks that need an accelerator on some releases.
"""
import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass

from build_envs import RELEASES, ensure_release

HELP_FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "sglang_help"

# Runs inside the release's interpreter: builds the parser once, reports what it holds, its
# help at the process's COLUMNS, and parses every argv given on stdin. argparse reports a
# rejection through parser.error(); raising from it keeps one process for a whole batch.
_EXAMINE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs

class Rejected(Exception):
    pass

def error(message):
    raise Rejected(message)

parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
shown = [a for a in parser._actions if a.help is not argparse.SUPPRESS]
report = {
    "options": sorted(o for a in shown for o in a.option_strings if o.startswith("--")),
    "hidden": sorted(o for a in parser._actions if a.help is argparse.SUPPRESS
                     for o in a.option_strings if o.startswith("--")),
    "choices": {o: sorted(str(c) for c in a.choices) for a in shown if a.choices
                for o in a.option_strings if o.startswith("--")},
    "help": parser.format_help(),
    "verdicts": [],
}
parser.error = error
for argv in json.load(sys.stdin):
    try:
        namespace = parser.parse_args(argv)
    except Rejected as rejection:
        report["verdicts"].append({"accepted": False, "error": str(rejection), "values": None})
    else:
        report["verdicts"].append({"accepted": True, "error": None,
                                   "values": json.loads(json.dumps(vars(namespace), default=str))})
json.dump(report, sys.stdout)
"""


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    error: str | None  # argparse's message, e.g. "unrecognized arguments: --x 1"
    values: dict | None  # the parsed namespace when accepted


def _environ(columns):
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    # A fixed hash seed: some choice lists are sets, printed in hash order.
    env.update(PYTHONWARNINGS="ignore", COLUMNS=str(columns), PYTHONHASHSEED="0")
    return env


def _run(release, args, stdin=None, columns=80):
    python = ensure_release(release)[0]
    return subprocess.run([str(python), *args], input=stdin, capture_output=True, text=True,
                          env=_environ(columns), timeout=600, check=False)


def examine(release, argvs=(), columns=80):
    """One run of the release's parser: {"options", "hidden", "choices"} as the parser object
    holds them (hidden = suppressed from --help), "help" as format_help() prints it at
    ``columns``, and "verdicts": one Verdict per argv (strings, without the program name)."""
    proc = _run(release, ["-c", _EXAMINE], stdin=json.dumps([list(a) for a in argvs]), columns=columns)
    if proc.returncode:
        raise RuntimeError("sglang %s parser did not run: %s" % (release, proc.stderr[-3000:]))
    report = json.loads(proc.stdout)
    report["verdicts"] = [Verdict(**verdict) for verdict in report["verdicts"]]
    return report


def check(release, argvs):
    """One Verdict per argv, in order."""
    return examine(release, argvs)["verdicts"]


def launch_server_help(release, columns=80):
    """What ``python -m sglang.launch_server --help`` prints on stdout, at that width
    (80 is argparse's width when stdout is not a terminal, as under Ansible)."""
    proc = _run(release, ["-m", "sglang.launch_server", "--help"], columns=columns)
    if proc.returncode:
        raise RuntimeError("sglang %s --help failed: %s" % (release, proc.stderr[-3000:]))
    return proc.stdout


def interpreter(release):
    """Path of the release's oracle interpreter (built on first use)."""
    return str(ensure_release(release)[0])


def capture_help(releases=RELEASES):
    """Writes tests/fixtures/sglang_help/sglang-<release>.txt: exactly what the release prints."""
    for release in releases:
        path = HELP_FIXTURES / ("sglang-%s.txt" % release)
        path.write_text(launch_server_help(release))
        print("wrote %s" % path)


if __name__ == "__main__":
    if sys.argv[1:2] != ["capture-help"]:
        sys.exit("usage: oracle.py capture-help [RELEASE ...]")
    capture_help(tuple(sys.argv[2:]) or RELEASES)

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
import tempfile
from dataclasses import dataclass

from build_envs import RELEASES, ensure_release

TESTS = pathlib.Path(__file__).resolve().parents[1]
FACT_FIXTURES = TESTS / "fixtures" / "sglang_parser"

# Runs inside the release's interpreter: builds the parser once, reports what it holds and
# parses every argv given on stdin. argparse reports a
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
    "choices": {o: sorted(str(c) for c in a.choices) for a in parser._actions if a.choices
                for o in a.option_strings if o.startswith("--")},
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


def examine(release, argvs=()):
    """One run of the release's parser: {"options", "hidden", "choices"} as the parser object
    holds them (hidden = suppressed from --help; choices of both) and "verdicts": one Verdict per argv (strings,
    without the program name)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(PYTHONWARNINGS="ignore")
    proc = subprocess.run([interpreter(release), "-c", _EXAMINE], input=json.dumps([list(a) for a in argvs]),
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    if proc.returncode:
        raise RuntimeError("sglang %s parser did not run: %s" % (release, proc.stderr[-3000:]))
    report = json.loads(proc.stdout)
    report["verdicts"] = [Verdict(**verdict) for verdict in report["verdicts"]]
    return report


def run_code(release, code):
    """Runs ``code`` with the release's interpreter (SGLang importable, no GPU) and returns what
    it printed last, as JSON. The environment is this process's, less Python's and SGLang's own
    variables (a test sets those inside ``code``)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "SGLANG"))}
    env.update(PYTHONWARNINGS="ignore")
    proc = subprocess.run([interpreter(release), "-c", code], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    if proc.returncode:
        raise RuntimeError("sglang %s did not run the code: %s" % (release, proc.stderr[-3000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def interpreter(release):
    """Path of the release's oracle interpreter (built on first use)."""
    return str(ensure_release(release)[0])


def module_result(release):
    """What the module sglang_server_options reports for the release, run as Ansible runs it
    with the release's interpreter."""
    sys.path.insert(0, str(TESTS))
    from support import run_module_file  # pylint: disable=import-outside-toplevel

    with tempfile.TemporaryDirectory() as scratch:
        result = run_module_file("sglang_server_options", {"python": interpreter(release), "timeout": 600},
                                 scratch, timeout=700)
    if result.get("failed"):
        raise RuntimeError("sglang_server_options failed on sglang %s: %s" % (release, result.get("msg")))
    return {key: result[key] for key in ("version", "options", "choices", "speculative_algorithms", "ddtree",
                                         "ddtree_budget", "mamba_lazy_with_speculation")}


def fact_fixture(release):
    return json.loads((FACT_FIXTURES / ("sglang-%s.json" % release)).read_text())


def capture_facts(releases=RELEASES):
    """Writes tests/fixtures/sglang_parser/sglang-<release>.json: what the module reports."""
    for release in releases:
        path = FACT_FIXTURES / ("sglang-%s.json" % release)
        path.write_text(json.dumps(module_result(release), indent=1, sort_keys=True) + "\n")
        print("wrote %s" % path)


if __name__ == "__main__":
    if sys.argv[1:2] != ["capture-facts"]:
        sys.exit("usage: oracle.py capture-facts [RELEASE ...]")
    capture_facts(tuple(sys.argv[2:]) or RELEASES)

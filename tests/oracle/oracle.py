"""Asks the REAL argument parser of an SGLang release whether it accepts a command line.

``Releases`` keeps one interpreter of each release's oracle environment (see build_envs.py)
running for a whole test session (``WarmInterpreter``: the release's import, seconds of torch,
is paid once); each check runs in a fork of it, as ``python -c`` would run it after that import.
``examine`` builds ``ServerArgs.add_cli_args(parser)`` exactly as ``sglang.launch_server`` does
and parses every argv it is given. Only argparse runs: ``ServerArgs.from_cli_args`` would run
post-init checks that need an accelerator on some releases.
"""
import json
import os
import pathlib
import select
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


# Runs inside a long-lived interpreter: imports the modules named in its arguments once, then
# reads one request per line ({"code", "args", "input"}) and runs each in a fork of itself as
# `python -c CODE ARGS` with INPUT on stdin would run: whatever one check patches, imports or
# sets in os.environ dies with its fork. Output written below Python (a C library) goes to
# /dev/null and stderr, never onto the reply channel.
_SERVE = r"""
import io, json, os, sys, traceback
channel = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
for module in sys.argv[1:]:
    __import__(module)
for line in sys.stdin:
    request = json.loads(line)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        sys.stdin, sys.argv = io.StringIO(request["input"]), ["-c"] + request["args"]
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        status = 0
        try:
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                status = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                status = 1
        except BaseException:
            traceback.print_exc()
            status = 1
        with os.fdopen(write_end, "w") as reply:
            json.dump({"returncode": status, "stdout": sys.stdout.getvalue(), "stderr": sys.stderr.getvalue()}, reply)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reply:
        answer = reply.read()
    _, code = os.waitpid(pid, 0)
    if not answer:
        died = "the check's process died (wait status %d)" % code
        answer = json.dumps({"returncode": 1, "stdout": "", "stderr": died})
    channel.write(answer + "\n")
    channel.flush()
"""


class WarmInterpreter:
    """An interpreter that has imported ``preload`` once and runs many checks, each as
    ``subprocess.run([python, "-c", code, *args], input=input)`` would (a CompletedProcess with
    returncode, stdout and stderr), at the cost of a fork instead of a start and that import."""

    def __init__(self, python, preload=(), env=None, timeout=600):
        self.timeout = timeout
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([python, "-c", _SERVE, *preload], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, text=True, env=env)

    def _stopped(self, why):
        self.close()
        self._log.seek(0)
        return RuntimeError("%s; its stderr: %s" % (why, self._log.read()[-3000:].decode(errors="replace")))

    def run(self, code, args=(), input=""):  # pylint: disable=redefined-builtin  # subprocess.run's name
        args = [str(arg) for arg in args]
        try:
            self._proc.stdin.write(json.dumps({"code": code, "args": args, "input": input}) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise self._stopped("the interpreter had stopped") from None
        if not select.select([self._proc.stdout], [], [], self.timeout)[0]:
            raise self._stopped("no answer within %d s" % self.timeout)
        line = self._proc.stdout.readline()
        if not line:
            raise self._stopped("the interpreter stopped")
        reply = json.loads(line)
        return subprocess.CompletedProcess(["-c", code] + args, reply["returncode"], reply["stdout"], reply["stderr"])

    def close(self):
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class Releases:
    """One WarmInterpreter per SGLang release, started on first use (the environment built if
    needed) with SGLang's server arguments imported, and kept until close(). Its environment is
    this process's, less Python's and SGLang's own variables (a check sets those itself)."""

    def __init__(self):
        self._running = {}

    def interpreter(self, release):
        if release not in self._running:
            env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "SGLANG"))}
            env.update(PYTHONWARNINGS="ignore")
            self._running[release] = WarmInterpreter(interpreter(release), ["sglang.srt.server_args"], env)
        return self._running[release]

    def examine(self, release, argvs=()):
        """One run of the release's parser: {"options", "hidden", "choices"} as the parser object
        holds them (hidden = suppressed from --help; choices of both) and "verdicts": one Verdict per argv
        (strings, without the program name)."""
        proc = self.interpreter(release).run(_EXAMINE, input=json.dumps([list(a) for a in argvs]))
        if proc.returncode:
            raise RuntimeError("sglang %s parser did not run: %s" % (release, proc.stderr[-3000:]))
        report = json.loads(proc.stdout)
        report["verdicts"] = [Verdict(**verdict) for verdict in report["verdicts"]]
        return report

    def run_code(self, release, code, args=()):
        """Runs ``code`` (with ``args`` as sys.argv[1:]) in the release's interpreter (SGLang
        importable, no GPU) and returns what it printed last, as JSON."""
        proc = self.interpreter(release).run(code, args)
        if proc.returncode:
            raise RuntimeError("sglang %s did not run the code: %s" % (release, proc.stderr[-3000:]))
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def close(self):
        for running in self._running.values():
            running.close()
        self._running.clear()


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

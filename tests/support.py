"""Helpers that the unit and integration tests, the benchmarks and the doubles' own scripts share.

Importable as ``support`` once the repository's tests/ directory is on sys.path
(tests/unit/conftest.py, tests/integration/test_argv_real_parser.py, tests/benchmarks/_double.py
and chatops/tests/conftest.py put it there).
"""
import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# What a time bound measured by a server on loopback (first connection in, last one closed by the
# client) may exceed the module's bound by: the client checks its deadline every 0.05 s
# (IDLE_CHECK_S), then two processes (the module and the server's thread) must each be woken
# once more to close and to see the close. With two busy loops on a 2-core machine each wake-up
# waits behind them for a CFS slice (sched_latency is 12-24 ms there), a few slices at worst;
# 0.5 s is ten times the deadline check interval and several times that, far below any bound
# that would be broken by a deadline not enforced (a silent request waits 30 s).
SERVER_SIDE_SLACK_S = 0.5


def free_port():
    """A loopback TCP port that nothing listens on: free to bind, refused to connect to."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def load_module(name, path):
    """Import the script at ``path`` (a fixture's script, not part of a package) as ``name``,
    with its own directory importable, as when it runs as a script (its sibling modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    here = str(pathlib.Path(path).resolve().parent)
    sys.path.insert(0, here)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(here)
    return module


def run_module_file(name, args, workdir, pythonpath=(), environ=None, timeout=120):
    """Run the collection's module ``name`` as Ansible runs it, a process reading its arguments
    from a file written into ``workdir``, with the checkout importable; returns its JSON result.

    ``pythonpath`` adds folders after the collection, ``environ`` overrides variables."""
    args_file = pathlib.Path(workdir) / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, **(environ or {}),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "collections"), *map(str, pythonpath)]))
    done = subprocess.run([sys.executable, str(REPO_ROOT / "plugins" / "modules" / f"{name}.py"), str(args_file)],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return json.loads(done.stdout)


def run_main(main, args, capsys):
    """Run a module's main() in this process and return (failed, result) from the JSON it prints."""
    # Imported here: only the unit tests' helper needs pytest; the other helpers run without it.
    import pytest  # pylint: disable=import-outside-toplevel
    from ansible.module_utils.testing import patch_module_args  # pylint: disable=import-outside-toplevel

    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            main()
    return exit_info.value.code != 0, json.loads(capsys.readouterr().out)

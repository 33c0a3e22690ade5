"""The oracle's long-lived interpreter (tests/oracle/oracle.py, WarmInterpreter) answers each
check as a fresh `python -c CODE ARGS` with INPUT on stdin would: its output, its exit status,
and nothing left behind by an earlier check."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "oracle"))
import oracle  # noqa: E402


@pytest.fixture(name="warm", scope="module")
def fixture_warm():
    warm = oracle.WarmInterpreter(sys.executable, ["argparse"], timeout=60)
    yield warm
    warm.close()


def test_a_check_sees_its_arguments_and_input_and_its_output_comes_back(warm):
    done = warm.run("import sys; print(sys.argv[1:], sys.stdin.read()); print('err', file=sys.stderr)",
                    ["a", 1], input="given")
    assert (done.returncode, done.stdout, done.stderr) == (0, "['a', '1'] given\n", "err\n")


def test_what_one_check_changes_is_gone_for_the_next(warm):
    assert warm.run("import os, argparse; os.environ['ORACLE_MARK'] = '1'; argparse.MARK = 1").returncode == 0
    done = warm.run("import os, argparse; print(os.environ.get('ORACLE_MARK'), hasattr(argparse, 'MARK'))")
    assert done.stdout == "None False\n"


def test_exit_statuses_are_those_of_a_process(warm):
    assert warm.run("import sys; sys.exit(3)").returncode == 3
    refused = warm.run("import argparse; argparse.ArgumentParser(prog='p').parse_args(['--x'])")
    assert refused.returncode == 2 and "unrecognized arguments: --x" in refused.stderr
    failed = warm.run("raise ValueError('boom')")
    assert failed.returncode == 1 and "ValueError: boom" in failed.stderr
    died = warm.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert died.returncode == 1 and "died" in died.stderr


def test_output_below_python_does_not_break_the_channel(warm):
    done = warm.run("import os; os.write(1, b'raw bytes, no newline'); print('after')")
    assert (done.returncode, done.stdout) == (0, "after\n")


def test_an_interpreter_that_cannot_start_says_why():
    broken = oracle.WarmInterpreter(sys.executable, ["no_such_module_for_the_oracle"], timeout=60)
    with pytest.raises(RuntimeError, match="No module named 'no_such_module_for_the_oracle'"):
        broken.run("print(1)")

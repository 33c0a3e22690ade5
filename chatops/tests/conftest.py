"""Fixtures of the chatops tests: a local inventory in the project's format, a runner spy, the
SGLang test double, a Matrix homeserver."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from pro6000_chatops import ChatOps, load_config

from chatops_support import LOCAL_HOST_VARS, REPO_ROOT, RunnerSpy, write_config

# The repository's shared test helpers (tests/support.py), for the tests that need a free port.
sys.path.insert(0, str(REPO_ROOT / "tests"))
from support import free_port  # noqa: E402  pylint: disable=wrong-import-position
from matrix_support import Homeserver  # noqa: E402  pylint: disable=wrong-import-position

SGLANG_DOUBLE = REPO_ROOT / "tests" / "fixtures" / "sglang_double" / "python"


def pytest_configure(config):
    config.addinivalue_line("markers", "lab: needs the lab container (make lab) and PRO6000_LAB=1")


@pytest.fixture(scope="session")
def local_inventory(tmp_path_factory):
    """Group pro6000 with three hosts reached by the local connection, a child group, and a
    host and a group outside it."""
    local = LOCAL_HOST_VARS
    inventory = {
        "pro6000": {
            "hosts": {"pro6000-01": local, "pro6000-02": local},
            "children": {"pro6000_rack2": {"hosts": {"pro6000-03": local}}},
        },
        "other": {"hosts": {"db-01": local}},
    }
    path = tmp_path_factory.mktemp("inventory") / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return path


@pytest.fixture
def runner_spy():
    return RunnerSpy()


@pytest.fixture
def spied_ops(tmp_path, local_inventory, runner_spy):
    return ChatOps(load_config(write_config(tmp_path, local_inventory)), execute=runner_spy)


@pytest.fixture(scope="session")
def double_url(tmp_path_factory):
    """The SGLang test double serving DDTree on loopback (tests/fixtures/sglang_double)."""
    folder = tmp_path_factory.mktemp("double")
    (folder / "target").mkdir()
    (folder / "drafter").mkdir()
    (folder / "drafter" / "config.json").write_text('{"block_size": 16, "dflash_config": {"block_size": 16}}')
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", str(folder / "target"),
         "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", str(folder / "drafter"),
         "--page-size", "1", "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(SGLANG_DOUBLE), "SGLANG_DOUBLE_STARTUP_S": "0.2"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "the SGLang double did not start"
            time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(30)


@pytest.fixture(scope="module")
def homeserver(tmp_path_factory):
    """Synapse on loopback (matrix_support.py), one for the tests of a module."""
    server = Homeserver(tmp_path_factory.mktemp("synapse"))
    yield server
    server.stop()

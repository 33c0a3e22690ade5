"""Fixtures of the chatops tests: a local inventory in the project's format, a runner spy."""
from __future__ import annotations

import sys

import pytest
import yaml

from pro6000_chatops import ChatOps, load_config

from chatops_support import LOCAL_HOST_VARS, REPO_ROOT, RunnerSpy, write_config

# The repository's shared test helpers (tests/support.py), for the tests that need a free port.
sys.path.insert(0, str(REPO_ROOT / "tests"))


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

"""The ansible-core lines the project runs and claims (issue #38 item 9): ansible-core 2.19 and
Python 3.11 are past their end of life, so `make test`'s main toolchain is ansible-core 2.21 on
Python >= 3.12 (Ubuntu 24.04's python3.12), the newest-line lane runs 2.22 on Python 3.13, and
what users install (the controller's requirements, the chat bot's package, meta/runtime.yml)
admits every line a lane runs.

Lines and their Python floors: ansible-core's release notes (2.20 and 2.21 need Python >= 3.12,
2.22 >= 3.13); the community package `ansible` N is built on ansible-core 2.(N + 7): 12 on 2.19,
14 on 2.21, 15 on 2.22."""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO = pathlib.Path(__file__).resolve().parents[2]


def pins(path):
    """{name: Version} of the `name==version` lines of a requirements file."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            found[match.group(1).lower()] = Version(match.group(2))
    return found


def requirement(path, name):
    (line,) = [line for line in path.read_text(encoding="utf-8").splitlines()
               if re.match(rf"{re.escape(name)}\s*[<>=!~]", line.strip())]
    return Requirement(line.strip())


MAIN = pins(REPO / "requirements.txt")
NEWEST = pins(REPO / "tests" / "images" / "controller" / "requirements.txt")


def test_the_main_toolchain_is_a_maintained_stable_ansible_core_line():
    core = MAIN["ansible-core"]
    assert core >= Version("2.21") and not core.is_prerelease, core


@pytest.mark.parametrize("toolchain", [MAIN, NEWEST], ids=["main", "newest-lane"])
def test_the_community_package_is_built_on_the_pinned_ansible_core_line(toolchain):
    assert toolchain["ansible"].major + 7 == toolchain["ansible-core"].minor, toolchain


def test_the_newest_lane_runs_a_newer_line_than_the_main_toolchain_pinned_exactly():
    assert NEWEST["ansible-core"].release[:2] >= (2, 22), NEWEST["ansible-core"]
    assert NEWEST["ansible-core"].release[:2] > MAIN["ansible-core"].release[:2]


def test_make_venv_takes_python3_12_not_the_default_python3():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    rule = makefile.split("$(BIN)/activate: requirements.txt", 1)[1].split("\n\n", 1)[0]
    assert "$(PYTHON) -m venv $(VENV)" in rule and "python3 -m venv" not in rule


@pytest.mark.skipif(sys.version_info < (3, 12), reason="stands in for a Python 3.12 with the interpreter running the tests")
def test_make_venv_finds_a_pyenv_python_3_12_that_no_shim_offers(tmp_path):
    """A machine whose pyenv global version is older hides its 3.12 behind the shim: the Makefile
    takes the newest 3.12 under $PYENV_ROOT/versions, not 3.11 and not an older 3.12."""
    for version in ("3.12.1", "3.12.10", "3.11.7"):
        (tmp_path / "pyenv" / "versions" / version / "bin").mkdir(parents=True)
        name = "python" + ".".join(version.split(".")[:2])
        (tmp_path / "pyenv" / "versions" / version / "bin" / name).symlink_to(sys.executable)
    (tmp_path / "requirements.txt").write_text("", encoding="utf-8")
    plain_path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                                 if not (pathlib.Path(d) / "python3.12").exists())
    result = subprocess.run(
        ["make", "-n", "-f", str(REPO / "Makefile"), "venv", "SCENARIOS=", "STAGE_SCENARIOS="],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**{k: v for k, v in os.environ.items() if k != "PYTHON"}, "MAKEFLAGS": "", "PATH": plain_path,
             "PYENV_ROOT": str(tmp_path / "pyenv")})
    assert "%s -m venv .venv" % (tmp_path / "pyenv" / "versions" / "3.12.10" / "bin" / "python3.12") in result.stdout, (
        result.stdout + result.stderr)


def test_make_venv_stops_with_a_clear_error_when_python_3_12_is_absent(tmp_path):
    """Run as `make venv` runs it, with an interpreter that is not there: it stops before any
    virtual environment is made. (The requirements are empty, so that a Makefile that ignored
    PYTHON would make one at once and the test would fail quickly.)"""
    (tmp_path / "requirements.txt").write_text("", encoding="utf-8")
    # SCENARIOS and STAGE_SCENARIOS empty: this folder has no molecule/ for the Makefile's check.
    result = subprocess.run(
        ["make", "-f", str(REPO / "Makefile"), "venv", "PYTHON=/nonexistent/python3.12", "SCENARIOS=", "STAGE_SCENARIOS="],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "MAKEFLAGS": ""}, check=False)
    assert result.returncode != 0
    assert "is not a working Python >= 3.12" in result.stderr and "PYTHON=" in result.stderr, result.stderr
    assert not (tmp_path / ".venv").exists()


@pytest.mark.parametrize("toolchain", [MAIN, NEWEST], ids=["main", "newest-lane"])
def test_what_users_install_admits_every_line_a_lane_runs(toolchain):
    core = toolchain["ansible-core"]
    controller = requirement(REPO / "requirements-controller.txt", "ansible-core")
    assert controller.specifier.contains(core, prereleases=True), (str(controller), core)
    pyproject = (REPO / "chatops" / "pyproject.toml").read_text(encoding="utf-8")
    (bot,) = [Requirement(spec) for spec in re.findall(r'"(ansible-core[^"]*)"', pyproject)]
    assert bot.specifier.contains(core, prereleases=True), (str(bot), core)
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    assert Requirement(f"ansible-core{runtime['requires_ansible']}").specifier.contains(core, prereleases=True)


def test_the_collection_claims_the_oldest_line_users_may_install():
    """meta/runtime.yml's floor is the controller requirements' floor: a claim no wider and no
    narrower than what pip may install."""
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    controller = requirement(REPO / "requirements-controller.txt", "ansible-core")
    (floor,) = [spec.version for spec in controller.specifier if spec.operator == ">="]
    assert re.fullmatch(r">=[0-9.]+", runtime["requires_ansible"]), runtime["requires_ansible"]
    assert Version(runtime["requires_ansible"][2:]) == Version(floor)


def test_the_readme_names_the_versions_the_lanes_run():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"ansible-core {MAIN['ansible-core']}" in readme
    assert f"ansible-core {NEWEST['ansible-core']}" in readme

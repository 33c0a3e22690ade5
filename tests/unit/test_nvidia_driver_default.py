"""The driver the collection installs by default: a branch NVIDIA still maintains, the same pin in
the production inventory, one the NVIDIA repository double offers in each layout through the
role's own pinning decision, and one CUDA 13.1 runs on; the seed's 590.48.01 stays installable.

Branch status: shared/reference/nvidia-590-cuda-13.1.md ("Re-read on 2026-12-05": R620 the
long-term branch to 2029-09, R595 production to 2027-03, 590 nothing more)."""
import pathlib

import pytest
import yaml
from support import load_module

from ansible_collections.pro6000.inference.plugins.filter.nvidia_driver_pin_plan import pin_plan

REPO = pathlib.Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "nvidia_driver"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
PRODUCTION = yaml.safe_load((REPO / "inventories" / "production" / "group_vars" / "pro6000" / "main.yml").read_text())
CUDA_DEFAULTS = yaml.safe_load((REPO / "roles" / "cuda_toolkit" / "defaults" / "main.yml").read_text())
# The open kernel module package whose versions the role reads, per layout (vars/Ubuntu.yml from
# 590 on, vars/Debian.yml).
KERNEL_PACKAGE = {"ubuntu2404": "nvidia-dkms-open", "debian12": "nvidia-kernel-open-dkms"}
SEED_PIN = ("590", "590.48.01")


def version_key(package_version):
    return [int(part) for part in package_version.split("-")[0].split(".")]


def madison(packages, names):
    """apt-cache madison's lines for the named packages, newest first, as the double serves them."""
    rows = sorted(((p.name, p.version) for p in packages if p.name in names),
                  key=lambda row: version_key(row[1]), reverse=True)
    return ["%10s | %s | http://127.0.0.1:8081/x86_64  Packages" % row for row in rows]


@pytest.fixture(name="repository", scope="module", params=sorted(KERNEL_PACKAGE))
def fixture_repository(request):
    builder = load_module("build_repo", REPO / "tests" / "fixtures" / "nvidia_repo" / "build_repo.py")
    return request.param, builder.driver_packages(request.param)


def plan(repository, branch, version):
    layout, packages = repository
    pins = madison(packages, {"nvidia-driver-pinning-" + branch, "nvidia-driver-pinning-" + version})
    return pin_plan(pins, madison(packages, {KERNEL_PACKAGE[layout]}), branch, version, KERNEL_PACKAGE[layout],
                    "http://127.0.0.1:8081/%s/x86_64/" % layout)


def test_the_default_branch_is_one_nvidia_maintains():
    status = DEFAULTS["nvidia_driver_branch_support"][DEFAULTS["nvidia_driver_branch"]]
    assert status in ("production", "long-term-support"), (DEFAULTS["nvidia_driver_branch"], status)
    assert DEFAULTS["nvidia_driver_version"].startswith(DEFAULTS["nvidia_driver_branch"] + ".")


def test_the_seed_pin_is_a_branch_past_its_updates():
    assert DEFAULTS["nvidia_driver_branch_support"][SEED_PIN[0]] == "new-feature-ended"


def test_the_production_inventory_pins_the_default():
    assert (PRODUCTION["nvidia_driver_branch"], PRODUCTION["nvidia_driver_version"]) == (
        DEFAULTS["nvidia_driver_branch"], DEFAULTS["nvidia_driver_version"])


def test_the_repository_double_gives_the_default_through_its_pinning_package(repository):
    result = plan(repository, DEFAULTS["nvidia_driver_branch"], DEFAULTS["nvidia_driver_version"])
    assert result["error"] == ""
    assert result["version"] == DEFAULTS["nvidia_driver_version"]
    assert result["pinning_package"] == "nvidia-driver-pinning-" + DEFAULTS["nvidia_driver_version"]


def test_the_repository_double_still_gives_the_seed_pin(repository):
    result = plan(repository, *SEED_PIN)
    assert (result["error"], result["version"]) == ("", SEED_PIN[1])


def test_cuda_13_1_runs_on_the_default_driver_under_full_compatibility():
    # The newest 13.1 update's minimum driver (NVIDIA's release notes table, in role cuda_toolkit).
    needed = CUDA_DEFAULTS["cuda_toolkit_min_driver_versions"]["13.1.1"]
    assert version_key(DEFAULTS["nvidia_driver_version"]) >= version_key(needed)

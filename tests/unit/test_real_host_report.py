"""What the real-host lane saw on a real Ubuntu 24.04 GPU host (tests/real_host/reports/), held
against what the roles must compose there. The roles once loaded their variables by os_family,
which Ansible reports as "Debian" on Ubuntu, and composed NVIDIA's debian12 repository and
Debian's package names on every production host: these tests fail on such a report."""
import json
import pathlib
import re

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REAL_HOST = HERE.parent / "real_host"
REPORTS = sorted((REAL_HOST / "reports").glob("*/report.json"))


@pytest.fixture(name="report", params=REPORTS, ids=[path.parent.name for path in REPORTS])
def fixture_report(request):
    return json.loads(request.param.read_text())


def key_values(text):
    return dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', text, re.MULTILINE))


def test_a_report_from_a_real_host_is_committed():
    assert REPORTS


def test_the_host_is_ubuntu_2404_as_ansible_sees_it(report):
    host = report["host"]
    assert (host["distribution"], host["distribution_version"], host["distribution_release"]) == (
        "Ubuntu", "24.04", "noble")
    # The fact that misled the roles: Ubuntu's family is Debian.
    assert host["os_family"] == "Debian"


def test_the_repository_is_nvidia_ubuntu2404_layout(report):
    assert report["composed"]["nvidia_repository_url"].endswith("/compute/cuda/repos/ubuntu2404/x86_64/")


def test_the_driver_packages_are_the_ubuntu_590_names(report):
    # NVIDIA's ubuntu2404 repository from 590 on (shared/reference/nvidia-590-cuda-13.1.md);
    # debian12 would be nvidia-driver-cuda, nvidia-kernel-open-dkms, nvidia-smi.
    sets = report["composed"]["driver_package_sets"]
    assert sets["open"]["compute"] == ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils", "nvidia-persistenced"]
    assert sets["open"]["full"] == ["nvidia-open"]
    assert report["composed"]["driver_headers_metapackage"] == "linux-headers-generic-hwe-24.04"


def test_the_check_run_reached_the_last_role_and_every_failure_is_explained(report):
    site = report["site_check"]
    assert report["exits"]["site-check"] == "0" or all(task["explanation"] for task in site["failed"])
    assert [task for task in site["failed"] if not task["explanation"]] == []
    assert any(task["task"].startswith("Validating arguments against arg spec 'main' - Serve SGLang")
               for task in site["tasks"])


def test_every_role_preflight_passed_or_was_explained(report):
    assert [r for r in report["preflight_refusals"] if not r["explanation"]] == []


def test_the_ubuntu_identity_image_matches_the_real_host(report):
    """The test image's identity files carry the keys Ansible reads with the real host's values."""
    real = key_values(report["host"]["host_files"])
    image = key_values((HERE.parent / "images/ubuntu2404-identity/os-release").read_text())
    image |= key_values((HERE.parent / "images/ubuntu2404-identity/lsb-release").read_text())
    keys = ("ID", "ID_LIKE", "VERSION_ID", "VERSION_CODENAME", "UBUNTU_CODENAME", "NAME",
            "DISTRIB_ID", "DISTRIB_RELEASE", "DISTRIB_CODENAME")
    assert {key: image.get(key) for key in keys} == {key: real.get(key) for key in keys}

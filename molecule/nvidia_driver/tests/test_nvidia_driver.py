"""State after install 580.95.05 -> idempotence -> upgrade to 590.48.01 -> simulated reboot ->
failed upgrade to 595.71.05 -> upgrade to 595.71.05 with a reboot through the double, on Ubuntu
24.04 (the ubuntu2404 layout) and Debian 12 (debian12) side by side."""
import json

import pytest

DOUBLE = "/var/lib/nvidia-test-double"
# What NVIDIA's repository holds for the 590 branch on each platform (shared/reference/
# nvidia-590-cuda-13.1.md): on ubuntu2404 no branch suffix from 590 on, and Ubuntu's package
# revision "-0ubuntu1" (as cuda-compat-13-0 580.95.05-0ubuntu1 on the real GPU host); debian12
# has names of its own and revision "-1". A role that composed the wrong layout installs none.
# From 595 on NVIDIA's ubuntu2404 packages carry "-1ubuntu1" (595.71.05-1ubuntu1 in NVIDIA's
# gpu-driver-container #899). The repository also has 595.91.07, newer than the pin.
VERSION = "595.71.05"
LAYOUTS = {
    "ubuntu": {"directory": "ubuntu2404", "revision": "1ubuntu1", "pin": "nvidia-driver-pinning-595.71.05",
               "driver": ["nvidia-open", "nvidia-driver-open", "libnvidia-compute", "nvidia-dkms-open",
                          "nvidia-utils", "nvidia-persistenced"],
               "other_layout": ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "libcuda1", "nvidia-smi"]},
    "debian": {"directory": "debian12", "revision": "1", "pin": "nvidia-driver-pinning-595",
               "driver": ["nvidia-open", "nvidia-driver", "nvidia-driver-cuda", "nvidia-kernel-open-dkms",
                          "nvidia-smi", "nvidia-persistenced", "libcuda1"],
               "other_layout": ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils"]},
}


@pytest.fixture(name="layout")
def fixture_layout(host):
    return LAYOUTS[host.system_info.distribution]


def installed_version(host, package):
    result = host.run("dpkg-query -W -f='${Status} ${Version}' %s", package)
    if result.rc != 0 or not result.stdout.startswith("install ok installed"):
        return None
    return result.stdout.split()[-1]


def test_the_platforms_are_the_two_the_role_claims(host):
    assert (host.system_info.distribution, host.system_info.release) in [("ubuntu", "24.04"), ("debian", "12")]


def test_open_driver_packages_of_the_layout_are_at_the_pinned_version(host, layout):
    versions = {package: installed_version(host, package) for package in layout["driver"]}
    assert versions == {package: VERSION + "-" + layout["revision"] for package in layout["driver"]}


def test_no_package_of_the_other_layout_is_installed(host, layout):
    assert [package for package in layout["other_layout"] if installed_version(host, package)] == []


@pytest.mark.parametrize("package", ["cuda-drivers", "nvidia-kernel-dkms", "nvidia-dkms", "cuda-keyring",
                                     "nvidia-driver-pinning-580.95.05", "nvidia-driver-pinning-590.48.01"])
def test_proprietary_metapackages_and_old_pin_are_absent(host, package):
    assert installed_version(host, package) is None


def test_old_pins_were_purged(host):
    listed = host.check_output("dpkg -l | awk '{print $2}'")
    assert "nvidia-driver-pinning-580.95.05" not in listed
    assert "nvidia-driver-pinning-590.48.01" not in listed


def test_pin_holds_the_driver_below_the_newest_of_its_branch(host, layout):
    assert installed_version(host, layout["pin"]) is not None
    policy = host.check_output("apt-cache policy nvidia-open")
    assert "Candidate: %s-%s" % (VERSION, layout["revision"]) in policy
    assert "595.91.07-%s" % layout["revision"] in policy


def test_ubuntu_pins_through_the_exact_pinning_package(host, layout):
    if layout["directory"] != "ubuntu2404":
        pytest.skip("ubuntu2404 layout")
    pin = host.file("/etc/apt/preferences.d/nvidia-driver-pin")
    assert pin.contains("^Pin: version 595.71.05-\\*$")
    assert pin.contains("^Pin-Priority: 1000$")
    assert not host.file("/etc/apt/preferences.d/00-nvidia-driver-version").exists


def test_debian_pins_through_the_branch_package_and_the_roles_exact_pin(host, layout):
    if layout["directory"] != "debian12":
        pytest.skip("debian12 layout")
    assert host.file("/etc/apt/preferences.d/nvidia-driver-pin").contains("^Pin: version 595\\.\\*$")
    exact = host.file("/etc/apt/preferences.d/00-nvidia-driver-version")
    assert exact.contains("^Pin: version 595.71.05-\\*$")
    assert exact.contains("^Pin-Priority: 1001$")


def test_one_signed_sources_entry_for_the_repository(host, layout):
    entries = host.check_output("grep -rl 127.0.0.1:8081 /etc/apt/sources.list /etc/apt/sources.list.d || true").split()
    assert entries == ["/etc/apt/sources.list.d/nvidia-cuda.sources"]
    sources = host.file(entries[0]).content_string
    assert "URIs: http://127.0.0.1:8081/%s/x86_64/" % layout["directory"] in sources
    assert "Suites: /" in sources
    assert "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc" in sources
    assert host.file("/etc/apt/keyrings/nvidia-cuda.asc").contains("BEGIN PGP PUBLIC KEY BLOCK")


def test_nouveau_is_blacklisted(host):
    conf = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert conf.contains("^blacklist nouveau$")
    assert conf.contains("^options nouveau modeset=0$")


def test_unattended_upgrades_leave_the_driver_alone(host):
    conf = host.file("/etc/apt/apt.conf.d/51nvidia-driver-unattended-upgrades").content_string
    assert "Unattended-Upgrade::Package-Blacklist {" in conf
    for pattern in ("^nvidia-", "^libnvidia-", "^cuda-", "^libcuda"):
        assert '"%s";' % pattern in conf


def test_persistence_daemon_is_enabled_and_running(host):
    unit = host.service("nvidia-persistenced")
    assert unit.is_enabled
    assert unit.is_running
    assert "Enabled" in host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")


def test_loaded_driver_is_the_installed_one(host):
    assert host.file(DOUBLE + "/sys/module/nvidia/version").content_string.strip() == VERSION
    assert "Open Kernel Module" in host.file(DOUBLE + "/proc/driver/nvidia/version").content_string
    assert host.check_output("nvidia-smi -L").startswith("GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition")


def test_driver_facts_record_the_final_state(host, layout):
    fact = json.loads(host.file("/etc/ansible/facts.d/nvidia_driver.fact").content_string)
    assert fact["version"] == VERSION
    assert fact["package_version"] == VERSION + "-" + layout["revision"]
    assert fact["pinning_package"] == layout["pin"]
    assert fact["installed_version"] == fact["loaded_version"] == VERSION
    assert fact["reboot_needed"] is False
    assert fact["reboot_decision"] == "reboot"
    assert fact["kernel_headers"] == "skip-container"
    assert fact["flavour"] == "open"


def test_service_was_stopped_only_when_the_driver_changed_and_started_again(host):
    assert host.service("sglang-qwen").is_running
    # prepare started it; the install, the upgrade to 590, the failed upgrade to 595 (started
    # again on 590) and the upgrade to 595 stopped and started it; check mode, the idempotence run
    # and the converge after the reboot left it alone.
    events = host.file("/var/log/sglang-qwen-events").content_string.split()
    assert events == ["start"] + ["stop", "start"] * 4

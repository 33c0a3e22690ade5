"""State after install 580.95.05 -> idempotence -> upgrade to 590.48.01 -> simulated reboot,
on Ubuntu 24.04 (the ubuntu2404 layout) and Debian 12 (debian12) side by side."""
import json

import pytest

DOUBLE = "/var/lib/nvidia-test-double"
# What NVIDIA's repository holds for the 590 branch on each platform (shared/reference/
# nvidia-590-cuda-13.1.md): on ubuntu2404 no branch suffix from 590 on, and Ubuntu's package
# revision "-0ubuntu1" (as cuda-compat-13-0 580.95.05-0ubuntu1 on the real GPU host); debian12
# has names of its own and revision "-1". A role that composed the wrong layout installs none.
LAYOUTS = {
    "ubuntu": {"directory": "ubuntu2404", "revision": "0ubuntu1",
               "driver": ["nvidia-open", "nvidia-driver-open", "libnvidia-compute", "nvidia-dkms-open",
                          "nvidia-utils", "nvidia-persistenced"],
               "other_layout": ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "libcuda1", "nvidia-smi"]},
    "debian": {"directory": "debian12", "revision": "1",
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
    assert versions == {package: "590.48.01-" + layout["revision"] for package in layout["driver"]}


def test_no_package_of_the_other_layout_is_installed(host, layout):
    assert [package for package in layout["other_layout"] if installed_version(host, package)] == []


@pytest.mark.parametrize("package", ["cuda-drivers", "nvidia-kernel-dkms", "nvidia-dkms", "cuda-keyring",
                                     "nvidia-driver-pinning-580.95.05"])
def test_proprietary_metapackages_and_old_pin_are_absent(host, package):
    assert installed_version(host, package) is None


def test_old_pin_was_purged_with_its_preferences_file(host):
    assert not host.file("/etc/apt/preferences.d/nvidia-driver-pinning-580.95.05.pref").exists
    assert "nvidia-driver-pinning-580.95.05" not in host.check_output("dpkg -l | awk '{print $2}'")


def test_pinning_package_pins_the_driver_at_priority_1000(host, layout):
    assert installed_version(host, "nvidia-driver-pinning-590.48.01") == "590.48.01-" + layout["revision"]
    pin = host.file("/etc/apt/preferences.d/nvidia-driver-pinning-590.48.01.pref")
    assert pin.contains("^Pin: version 590.48.01-\\*$")
    assert pin.contains("^Pin-Priority: 1000$")
    policy = host.check_output("apt-cache policy nvidia-open")
    assert "Candidate: 590.48.01-%s" % layout["revision"] in policy


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
    assert host.file(DOUBLE + "/sys/module/nvidia/version").content_string.strip() == "590.48.01"
    assert "Open Kernel Module" in host.file(DOUBLE + "/proc/driver/nvidia/version").content_string
    assert host.check_output("nvidia-smi -L").startswith("GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition")


def test_driver_facts_record_the_final_state(host, layout):
    fact = json.loads(host.file("/etc/ansible/facts.d/nvidia_driver.fact").content_string)
    assert fact["version"] == "590.48.01"
    assert fact["package_version"] == "590.48.01-" + layout["revision"]
    assert fact["installed_version"] == fact["loaded_version"] == "590.48.01"
    assert fact["reboot_needed"] is False
    assert fact["reboot_decision"] == "not-needed"
    assert fact["kernel_headers"] == "skip-container"
    assert fact["flavour"] == "open"


def test_service_was_stopped_only_when_the_driver_changed_and_started_again(host):
    assert host.service("sglang-qwen").is_running
    # prepare started it; the install and the upgrade stopped and started it; check mode, the
    # idempotence run and the converge after the reboot left it alone.
    events = host.file("/var/log/sglang-qwen-events").content_string.split()
    assert events == ["start", "stop", "start", "stop", "start"]

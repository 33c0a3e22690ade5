"""The reboot and kernel-header decisions of role nvidia_driver (they were Jinja in
tasks/reboot.yml and tasks/install.yml; molecule/nvidia_driver checks them on a container end to
end). Container facts as ansible-core's facts/virtual/linux.py reports them."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.nvidia_driver_headers_decision import FilterModule as Headers
from ansible_collections.pro6000.inference.plugins.filter.nvidia_driver_reboot_decision import (
    nvidia_driver_reboot_decision as reboot)

headers = Headers().filters()["nvidia_driver_headers_decision"]
DOCKER = {"virtualization_role": "guest", "virtualization_type": "docker"}
KVM = {"virtualization_role": "guest", "virtualization_type": "kvm"}
METAL = {"virtualization_role": "NA", "virtualization_type": "NA"}


def facts(virtualization, reboot_needed=True):
    return dict(virtualization, nvidia_gpu={"reboot_needed": reboot_needed})


@pytest.mark.parametrize("virtualization, setting, command, connection, host, decision", [
    (METAL, "auto", "", "ssh", "gpu1", "reboot"),
    (KVM, "auto", "", "ssh", "gpu1", "reboot"),  # a virtual machine reboots its own kernel
    (DOCKER, "auto", "", "ssh", "gpu1", "deferred-container"),
    (DOCKER, "auto", "/usr/local/sbin/reboot-double", "ssh", "gpu1", "reboot"),
    (METAL, "never", "", "ssh", "gpu1", "deferred-never"),
    (DOCKER, "never", "/usr/local/sbin/reboot-double", "ssh", "gpu1", "deferred-never"),
    (METAL, "auto", "", "local", "gpu1", "deferred-controller"),
    (METAL, "auto", "", "ssh", "localhost", "deferred-controller"),
    (METAL, "auto", "", "ssh", "127.0.0.1", "deferred-controller"),
    ({}, "auto", "", "ssh", "gpu1", "reboot"),  # no virtualization facts gathered: not a container
])
def test_a_needed_reboot_is_taken_where_it_can_and_may_be(virtualization, setting, command, connection, host,
                                                          decision):
    assert reboot(facts(virtualization), setting, command, connection, host) == decision


@pytest.mark.parametrize("virtualization", [METAL, DOCKER])
def test_no_reboot_when_the_loaded_driver_is_the_installed_one(virtualization):
    assert reboot(facts(virtualization, reboot_needed=False), "auto", "", "local", "localhost") == "not-needed"


def test_without_gpu_facts_the_decision_names_the_module_to_run_first():
    with pytest.raises(AnsibleFilterError, match="run pro6000.inference.nvidia_gpu_facts first"):
        reboot(METAL, "auto", "", "ssh", "gpu1")


@pytest.mark.parametrize("virtualization, setting, decision", [
    (METAL, "auto", "install"), (KVM, "auto", "install"), (DOCKER, "auto", "skip-container"),
    ({"virtualization_role": "guest", "virtualization_type": "lxc"}, "auto", "skip-container"),
    ({"virtualization_role": "host", "virtualization_type": "docker"}, "auto", "install"),
    (DOCKER, "install", "install"), (METAL, "skip", "skip"),
])
def test_kernel_headers_are_skipped_under_auto_only_in_a_container(virtualization, setting, decision):
    assert headers(virtualization, setting) == decision

"""After every refusal: no driver package, no pin, and the repository configured once."""
import pytest


@pytest.mark.parametrize("package", ["nvidia-open", "nvidia-driver", "nvidia-driver-open", "nvidia-dkms-open",
                                     "nvidia-dkms", "libnvidia-compute", "nvidia-utils", "cuda-drivers",
                                     "nvidia-kernel-open-dkms", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1"])
def test_no_driver_package_was_installed(host, package):
    assert not host.package(package).is_installed


def test_no_pin_was_installed(host):
    listing = host.run("dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'nvidia-driver-pinning-*'").stdout
    assert "ii " not in listing
    assert host.file("/etc/apt/preferences.d").listdir() == []


def test_cuda_keyring_gave_way_to_a_single_managed_sources_entry(host):
    assert not host.package("cuda-keyring").is_installed
    entries = host.check_output("grep -rl 127.0.0.1:8081 /etc/apt/sources.list.d").split()
    assert entries == ["/etc/apt/sources.list.d/nvidia-cuda.sources"]

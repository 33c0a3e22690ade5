"""Two toolkits side by side, /usr/local/cuda on 13.1, and no metapackage that pulls a driver."""
import json

import pytest


# The headless driver set of NVIDIA's repository at the role's default, 620.70.10 (R620), on each
# platform (shared/reference/nvidia-590-cuda-13.1.md): CUDA 13.1 and 13.0 run on it under full
# compatibility. Revision "-1ubuntu1" from 595 on (NVIDIA/gpu-driver-container #899); the toolkit
# packages are named alike on both.
DRIVER = "620.70.10"
HEADLESS_DRIVER = {
    "ubuntu": {"libnvidia-compute": DRIVER + "-1ubuntu1", "nvidia-dkms-open": DRIVER + "-1ubuntu1",
               "nvidia-utils": DRIVER + "-1ubuntu1"},
    "debian": {"nvidia-driver-cuda": DRIVER + "-1", "nvidia-kernel-open-dkms": DRIVER + "-1"},
}


@pytest.mark.parametrize("package, version", [
    ("cuda-toolkit-13-1", "13.1.1-1"), ("cuda-nvcc-13-1", "13.1.115-1"),
    ("cuda-toolkit-13-0", "13.0.2-1"), ("cuda-nvcc-13-0", "13.0.88-1"),
])
def test_packages_are_installed(host, package, version):
    assert host.package(package).is_installed
    assert host.package(package).version == version


def test_headless_driver_of_the_platform_is_installed(host):
    expected = HEADLESS_DRIVER[host.system_info.distribution]
    assert {package: host.package(package).version for package in expected} == expected


@pytest.mark.parametrize("package", ["cuda", "cuda-13-1", "cuda-13-0", "cuda-drivers", "nvidia-open",
                                     "nvidia-kernel-dkms", "nvidia-dkms"])
def test_no_metapackage_that_pulls_a_driver(host, package):
    assert not host.package(package).is_installed


@pytest.mark.parametrize("prefix, release, version", [("/usr/local/cuda-13.1", "13.1", "13.1.115"),
                                                      ("/usr/local/cuda-13.0", "13.0", "13.0.88"),
                                                      ("/usr/local/cuda", "13.1", "13.1.115"),
                                                      ("/usr/local/cuda-13", "13.1", "13.1.115")])
def test_each_nvcc_reports_its_release(host, prefix, release, version):
    output = host.check_output("%s/bin/nvcc --version", prefix)
    assert "Cuda compilation tools, release %s, V%s" % (release, version) in output


def test_alternatives_point_at_the_default_toolkit(host):
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-13.1"
    assert host.file("/usr/local/cuda-13").linked_to == "/usr/local/cuda-13.1"
    assert "link currently points to /usr/local/cuda-13.1" in host.check_output("update-alternatives --display cuda")
    assert "/usr/local/cuda-13.0 - priority 130" in host.check_output("update-alternatives --display cuda")


def test_login_shells_find_nvcc_and_the_libraries(host):
    assert host.check_output("bash -lc 'command -v nvcc'") == "/usr/local/cuda/bin/nvcc"
    assert "/usr/local/cuda/lib64" in host.check_output("bash -lc 'echo $LD_LIBRARY_PATH'").split(":")
    # Sourcing twice does not add the directories twice.
    path = host.check_output("bash -lc '. /etc/profile.d/cuda.sh; echo $PATH'").split(":")
    assert path.count("/usr/local/cuda/bin") == 1


def test_toolkit_facts(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/cuda_toolkit.fact").content_string)
    # What the next run compares before deciding there is nothing to do: the packages at the
    # versions dpkg lists, the releases, and the driver they were checked against.
    installed = {name: host.package(name).version for name in ("cuda-toolkit-13-0", "cuda-toolkit-13-1")}
    assert fact == {"versions": {"13.1": "13.1.115", "13.0": "13.0.88"}, "default_version": "13.1",
                    "cuda_home": "/usr/local/cuda", "releases": ["13.0", "13.1"], "packages": installed,
                    "driver": DRIVER, "driver_compatibility": "full"}

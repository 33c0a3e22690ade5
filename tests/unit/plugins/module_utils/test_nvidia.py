"""Parsers of _nvidia against the real outputs captured on a GPU host (tests/fixtures/real-gpu-host)."""
import pathlib

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils import _nvidia

REAL = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "real-gpu-host"
H200_UUID = "GPU-4ed21e5a-8d48-380e-78f2-719f33a452dc"


def real(name):
    return (REAL / name).read_text()


def test_every_real_fixture_is_covered_by_a_test():
    covered = {
        "README.md", "dpkg-l-nvidia-cuda.txt", "nvidia-smi-query-noheader-nounits.csv",
        "nvidia-smi-query.csv", "nvidia-smi-version.txt", "nvidia-smi.txt",
        "proc-driver-nvidia-version.txt", "sys-module-nvidia-version.txt",
    }
    # What the NVIDIA doubles print is made from these (tests/fixtures/nvidia_repo/build_repo.py);
    # the collection itself runs neither nvcc nor nvidia-smi -q, so no parser reads them.
    doubles = {"nvcc-version.txt", "nvidia-smi-q.xml"}
    kept_as_captured = {"nvidia-smi-q.txt"}
    assert {path.name for path in REAL.iterdir()} == covered | doubles | kept_as_captured


def test_query_csv_with_header_strips_units_and_names_fields():
    rows = _nvidia.parse_query_csv(real("nvidia-smi-query.csv"))
    assert rows == [{
        "index": "0", "name": "NVIDIA H200", "uuid": H200_UUID, "pci.bus_id": "00000000:00:06.0",
        "driver_version": "580.159.04", "memory.total": "143771", "memory.used": "0",
        "compute_cap": "9.0", "persistence_mode": "Enabled", "power.limit": "700.00",
        "temperature.gpu": "38", "utilization.gpu": "0",
    }]


def test_query_csv_rows_become_gpu_facts():
    gpus = _nvidia.gpus_from_query(_nvidia.parse_query_csv(real("nvidia-smi-query.csv")))
    assert gpus == [{
        "index": 0, "name": "NVIDIA H200", "uuid": H200_UUID, "pci_bus_id": "00000000:00:06.0",
        "memory_total_mib": 143771, "compute_capability": "9.0", "persistence_mode": True,
    }]


def test_query_csv_without_header_and_units_uses_given_fields():
    fields = ["driver_version", "name", "compute_cap", "memory.total"]
    rows = _nvidia.parse_query_csv(real("nvidia-smi-query-noheader-nounits.csv"), fields)
    assert rows == [{"driver_version": "580.159.04", "name": "NVIDIA H200", "compute_cap": "9.0",
                     "memory.total": "143771"}]
    assert _nvidia.gpus_from_query(rows)[0]["memory_total_mib"] == 143771


def test_query_csv_rejects_rows_that_do_not_match_the_fields():
    with pytest.raises(ValueError, match="expected 2 columns"):
        _nvidia.parse_query_csv("580.159.04, NVIDIA H200, 9.0\n", ["driver_version", "name"])


def test_smi_version():
    assert _nvidia.parse_smi_version(real("nvidia-smi-version.txt")) == {
        "nvidia_smi_version": "580.159.04", "nvml_version": "580.159",
        "driver_version": "580.159.04", "cuda_version": "13.0",
    }


R610 = REAL.parents[1] / "unit" / "fixtures" / "derived-r610"


def test_smi_version_of_r610_reads_the_new_keys():
    """From R610 the old keys say "Deprecated, see ...": the versions come from KMD / CUDA UMD."""
    assert _nvidia.parse_smi_version((R610 / "nvidia-smi-version.txt").read_text()) == {
        "nvidia_smi_version": "610.57.04", "nvml_version": "610.57",
        "driver_version": "610.57.04", "cuda_version": "13.3",
    }


@pytest.mark.parametrize("text", [
    # The old keys alone, holding no version (a future release that drops the new ones).
    'DRIVER version      : Deprecated, see "KMD version" instead\nCUDA version : N/A\n',
    # Values of the wrong shape under every key.
    "NVIDIA-SMI version : 580\nNVML version : x.y\nKMD version : 610.57.04 beta\nCUDA UMD version : 13\n",
    "",
])
def test_smi_version_reads_no_version_from_a_value_that_is_not_one(text):
    assert _nvidia.parse_smi_version(text) == dict.fromkeys(
        ["nvidia_smi_version", "nvml_version", "driver_version", "cuda_version"])


def test_proc_version_of_the_open_module():
    assert _nvidia.parse_proc_driver_version(real("proc-driver-nvidia-version.txt")) == {
        "version": "580.159.04", "flavour": "open"}


def test_proc_version_of_the_proprietary_module():
    text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 10:00:00 UTC 2025\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
    assert _nvidia.parse_proc_driver_version(text) == {"version": "580.95.05", "flavour": "proprietary"}


def test_proc_version_without_nvrm_line():
    assert _nvidia.parse_proc_driver_version("") == {"version": None, "flavour": None}


def test_sys_module_version():
    assert _nvidia.parse_sys_module_version(real("sys-module-nvidia-version.txt")) == "580.159.04"
    assert _nvidia.parse_sys_module_version("not a version\n") is None


def test_dpkg_list_rows_status_and_holds():
    packages = _nvidia.parse_dpkg_list(real("dpkg-l-nvidia-cuda.txt"))
    assert len(packages) == len(real("dpkg-l-nvidia-cuda.txt").splitlines())
    by_name = {p["name"]: p for p in packages}
    assert by_name["cuda-compat-13-0"]["version"] == "580.95.05-0ubuntu1"
    assert by_name["cuda-toolkit-13-0-config-common"]["architecture"] == "all"
    assert by_name["cuda-nvcc-13-0"]["description"] == "CUDA nvcc"
    assert sorted(p["name"] for p in packages if p["held"]) == ["libcudnn9-cuda-13", "libnccl-dev", "libnccl2"]
    assert all(p["installed"] for p in packages)


def test_dpkg_list_skips_headers_and_strips_architecture_qualifier():
    text = ("Desired=Unknown/Install/Remove/Purge/Hold\n"
            "||/ Name           Version      Architecture Description\n"
            "+++-==============-============-============-=================\n"
            "ii  libcuda1:amd64 590.48.01-1  amd64        NVIDIA CUDA Driver Library\n"
            "rc  nvidia-smi     580.95.05-1  amd64        NVIDIA System Management Interface\n")
    packages = _nvidia.parse_dpkg_list(text)
    assert [(p["name"], p["installed"]) for p in packages] == [("libcuda1", True), ("nvidia-smi", False)]


def test_nvml_mismatch_detection():
    output = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.48\n"
    assert _nvidia.nvml_mismatch(output)
    assert _nvidia.nvml_library_version(output) == "590.48"
    assert not _nvidia.nvml_mismatch(real("nvidia-smi.txt"))
    assert _nvidia.nvml_library_version(real("nvidia-smi.txt")) is None


@pytest.mark.parametrize("name, flavour", [
    ("nvidia-dkms-open", "open"), ("nvidia-dkms-580-open", "open"), ("nvidia-kernel-open-dkms", "open"),
    ("nvidia-dkms", "proprietary"), ("nvidia-dkms-580", "proprietary"), ("nvidia-kernel-dkms", "proprietary"),
    ("nvidia-open", None), ("libnvidia-compute", None),
])
def test_kernel_package_flavour(name, flavour):
    assert _nvidia.kernel_package_flavour(name) == flavour


def test_flavour_from_module_licence():
    assert _nvidia.flavour_from_license("Dual MIT/GPL\n") == "open"
    assert _nvidia.flavour_from_license("NVIDIA\n") == "proprietary"
    assert _nvidia.flavour_from_license("") is None


def test_blackwell_recognition():
    assert _nvidia.is_blackwell_pci_device("0x2bb5")
    assert not _nvidia.is_blackwell_pci_device("0x2335")  # the H200 of the real fixture
    assert not _nvidia.is_blackwell_pci_device("garbage")
    assert _nvidia.is_blackwell_compute_capability("12.0")
    assert not _nvidia.is_blackwell_compute_capability("9.0")
    assert not _nvidia.is_blackwell_compute_capability(None)


def test_versions():
    assert _nvidia.upstream_version("590.48.01-0ubuntu1") == "590.48.01"
    assert _nvidia.upstream_version("1:590.48.01-1") == "590.48.01"
    assert _nvidia.version_key("580.159.04") > _nvidia.version_key("580.95.05")


def test_reboot_reasons():
    assert _nvidia.reboot_reasons("580.159.04", "open", "580.159.04", "open", False, True) == []
    assert _nvidia.reboot_reasons(None, None, None, None, False, False) == []
    reasons = _nvidia.reboot_reasons("580.95.05", "open", "590.48.01", "open", True, True)
    assert reasons == ["nvidia-smi reports an NVML driver/library version mismatch",
                       "loaded module 580.95.05 differs from installed 590.48.01"]
    assert _nvidia.reboot_reasons("590.48.01", "proprietary", "590.48.01", "open", False, True) == [
        "loaded proprietary module differs from installed open module"]
    assert _nvidia.reboot_reasons(None, None, "590.48.01", "open", False, True) == [
        "driver 590.48.01 is installed but no nvidia module is loaded"]

"""nvidia_gpu_facts run as Ansible runs it (a process reading an args file) against simulated hosts.

The simulated host is a procfs/sysfs tree under tmp_path and executables that print the real
outputs of tests/fixtures/real-gpu-host (or the real failure messages of nvidia-smi).
"""
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest
from support import load_module, run_module_file

from ansible_collections.pro6000.inference.plugins.module_utils import _nvidia

REPO = pathlib.Path(__file__).resolve().parents[4]
REAL = REPO / "tests" / "fixtures" / "real-gpu-host"
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.48\n"
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n")
DPKG_HEADER = ("Desired=Unknown/Install/Remove/Purge/Hold\n"
               "| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend\n"
               "||/ Name Version Architecture Description\n"
               "+++-====-=======-============-===========\n")


class Host:
    """A simulated host: sysfs/procfs files and executables on a private PATH."""

    def __init__(self, root):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.proc = root / "proc"
        self.sys = root / "sys"
        (self.sys / "bus" / "pci" / "devices").mkdir(parents=True)
        self.proc.mkdir()
        self.executable("dpkg", stdout=DPKG_HEADER)

    def executable(self, name, stdout="", rc=0, by_args=None):
        """A shell script printing stdout (or by_args[first argument]) and exiting with rc."""
        outputs = {"*": (stdout, rc)}
        outputs.update(by_args or {})
        cases = []
        for pattern, (text, code) in outputs.items():
            data = self.root / ("%s-%d.out" % (name, len(cases)))
            data.write_text(text)
            cases.append("  %s) cat '%s'; exit %d ;;" % (pattern if pattern == "*" else "'%s'" % pattern, data, code))
        # The catch-all case must come last.
        cases.append(cases.pop(0))
        script = self.bin / name
        script.write_text("#!/bin/sh\ncase \"$1\" in\n%s\nesac\n" % "\n".join(cases))
        script.chmod(0o755)

    def modinfo(self, version, license_text):
        """modinfo answering -F version / -F license for the nvidia module."""
        script = self.bin / "modinfo"
        script.write_text('#!/bin/sh\n[ "$2" = license ] && echo "%s" || echo %s\n' % (license_text, version))
        script.chmod(0o755)

    def pci_gpu(self, address="0000:01:00.0", device="0x2bb5", vendor="0x10de", device_class="0x030200"):
        base = self.sys / "bus" / "pci" / "devices" / address
        base.mkdir()
        (base / "vendor").write_text(vendor + "\n")
        (base / "device").write_text(device + "\n")
        (base / "class").write_text(device_class + "\n")

    def loaded(self, proc_text, sys_text):
        (self.proc / "driver" / "nvidia").mkdir(parents=True)
        (self.proc / "driver" / "nvidia" / "version").write_text(proc_text)
        (self.sys / "module" / "nvidia").mkdir(parents=True)
        (self.sys / "module" / "nvidia" / "version").write_text(sys_text)

    def run(self, **params):
        args = {"proc_path": str(self.proc), "sys_path": str(self.sys)}
        args.update(params)
        result = run_module_file("nvidia_gpu_facts", args, self.root,
                                 environ={"PATH": "%s:/usr/bin:/bin" % self.bin})
        assert not result.get("failed"), result
        assert result["changed"] is False
        return result["ansible_facts"]["nvidia_gpu"]


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def real(name):
    return (REAL / name).read_text()


def dpkg_rows(*rows):
    return DPKG_HEADER + "".join("ii  %s %s amd64 %s\n" % row for row in rows)


def test_real_gpu_host_with_matching_driver(host):
    host.pci_gpu(address="0000:00:06.0", device="0x2335")
    host.loaded(real("proc-driver-nvidia-version.txt"), real("sys-module-nvidia-version.txt"))
    host.executable("nvidia-smi", stdout=real("nvidia-smi-query.csv"),
                    by_args={"--version": (real("nvidia-smi-version.txt"), 0)})
    host.modinfo("580.159.04", "Dual MIT/GPL")
    facts = host.run()
    assert facts["gpu_present"] is True
    assert facts["gpu_count"] == 1
    assert facts["blackwell_present"] is False
    assert facts["gpus"] == [{
        "index": 0, "name": "NVIDIA H200", "uuid": "GPU-4ed21e5a-8d48-380e-78f2-719f33a452dc",
        "pci_bus_id": "00000000:00:06.0", "memory_total_mib": 143771, "compute_capability": "9.0",
        "persistence_mode": True,
    }]
    assert facts["loaded_version"] == "580.159.04"
    assert facts["loaded_flavour"] == "open"
    assert facts["installed_version"] == "580.159.04"
    assert facts["installed_flavour"] == "open"
    assert facts["flavour"] == "open"
    assert facts["user_space_version"] == "580.159.04"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["nvml_mismatch"] is False
    assert facts["reboot_needed"] is False
    assert facts["reboot_reasons"] == []


def test_upgrade_under_a_loaded_module_needs_a_reboot(host):
    host.pci_gpu()
    host.loaded(real("proc-driver-nvidia-version.txt").replace("580.159.04", "580.95.05"), "580.95.05\n")
    host.executable("nvidia-smi", stdout=MISMATCH, rc=18)
    host.executable("dpkg", stdout=dpkg_rows(
        ("nvidia-open", "590.48.01-1", "NVIDIA driver metapackage"),
        ("nvidia-kernel-open-dkms", "590.48.01-1", "NVIDIA binary kernel module DKMS source"),
        ("nvidia-driver-pinning-590.48.01", "590.48.01-1", "pin"),
        ("python3", "3.11.2-1+b1", "not an NVIDIA package"),
    ))
    facts = host.run()
    assert facts["nvml_mismatch"] is True
    assert facts["nvml_library_version"] == "590.48"
    assert facts["nvidia_smi_error"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert facts["installed_version"] == "590.48.01"
    assert facts["installed_flavour"] == "open"
    assert facts["installed_module_package"] == "nvidia-kernel-open-dkms"
    assert facts["loaded_version"] == "580.95.05"
    assert facts["blackwell_present"] is True
    assert facts["gpus"] == []
    assert facts["packages"] == {"nvidia-open": "590.48.01-1", "nvidia-kernel-open-dkms": "590.48.01-1",
                                 "nvidia-driver-pinning-590.48.01": "590.48.01-1"}
    assert facts["reboot_needed"] is True
    assert facts["reboot_reasons"] == [
        "nvidia-smi reports an NVML driver/library version mismatch",
        "loaded module 580.95.05 differs from installed 590.48.01",
    ]


def test_fresh_install_before_the_first_boot(host):
    host.pci_gpu()
    host.executable("nvidia-smi", stdout=NO_DRIVER, rc=9)
    host.executable("dpkg", stdout=dpkg_rows(("nvidia-dkms-open", "590.48.01-0ubuntu1", "NVIDIA DKMS")))
    facts = host.run()
    assert facts["module_loaded"] is False
    assert facts["installed_version"] == "590.48.01"
    assert facts["nvidia_smi_error"].startswith("NVIDIA-SMI has failed")
    assert facts["reboot_reasons"] == ["driver 590.48.01 is installed but no nvidia module is loaded"]


def test_modinfo_wins_over_the_package_and_gives_the_flavour(host):
    host.pci_gpu()
    host.loaded(real("proc-driver-nvidia-version.txt"), real("sys-module-nvidia-version.txt"))
    host.executable("dpkg", stdout=dpkg_rows(("nvidia-dkms-580-open", "580.95.05-0ubuntu1", "NVIDIA DKMS")))
    host.modinfo("580.159.04", "NVIDIA")
    facts = host.run()
    assert facts["installed_version"] == "580.159.04"
    assert facts["installed_flavour"] == "proprietary"
    assert facts["reboot_reasons"] == ["loaded open module differs from installed proprietary module"]


def test_no_gpu_and_no_driver(host):
    host.pci_gpu(address="0000:00:02.0", vendor="0x8086", device="0x46a6")
    host.pci_gpu(address="0000:03:00.0", device="0x22bc", device_class="0x040300")  # NVIDIA audio
    facts = host.run()
    assert facts["gpu_present"] is False
    assert facts["gpu_count"] == 0
    assert facts["pci_devices"] == []
    assert facts["module_loaded"] is False
    assert facts["installed_version"] is None
    assert facts["reboot_needed"] is False


def test_driver_loaded_but_no_devices(host):
    host.loaded(real("proc-driver-nvidia-version.txt"), real("sys-module-nvidia-version.txt"))
    host.executable("nvidia-smi", stdout="No devices were found\n", rc=6)
    facts = host.run()
    assert facts["gpu_present"] is False
    assert facts["nvidia_smi_error"] == "No devices were found"
    assert facts["nvml_mismatch"] is False


def test_held_packages_are_reported(host):
    host.executable("dpkg", stdout=DPKG_HEADER + "hi  libnvidia-compute 590.48.01-1 amd64 NVIDIA compute\n")
    assert host.run()["held_packages"] == ["libnvidia-compute"]


def test_runs_in_check_mode(host):
    host.pci_gpu()
    # run() also asserts that the module neither failed nor reported a change.
    assert host.run(_ansible_check_mode=True)["gpu_count"] == 1


def load_repo_builder():
    """tests/fixtures/nvidia_repo/build_repo.py, which renders the packaged nvidia-smi double."""
    return load_module("build_repo", REPO / "tests" / "fixtures" / "nvidia_repo" / "build_repo.py")


# The real host's H200 (tests/fixtures/real-gpu-host) as the nvidia-smi double's hardware.json holds it.
H200_DOUBLE = {"name": "NVIDIA H200", "uuid": "GPU-4ed21e5a-8d48-380e-78f2-719f33a452dc", "pci_bus_id": "00000000:00:06.0",
               "memory_total_mib": 143771, "compute_cap": "9.0", "power_limit_w": 700, "architecture": "Hopper"}


def install_smi_double(host, monkeypatch, version, cuda):
    """The packaged nvidia-smi double of driver ``version`` on ``host``'s PATH, with that driver's
    module loaded and the real host's H200; returns the script and the double's state folder."""
    builder = load_repo_builder()
    state = host.root / "double-state"
    (state / "sys" / "module" / "nvidia").mkdir(parents=True)
    (state / "sys" / "module" / "nvidia" / "version").write_text(version + "\n")
    (state / "hardware.json").write_text(json.dumps({"gpus": [H200_DOUBLE]}))
    monkeypatch.setenv("NVIDIA_TEST_DOUBLE_STATE", str(state))
    smi = host.bin / "nvidia-smi"
    smi.write_text(builder.render("nvidia-smi", VERSION=version, CUDA_VERSION=cuda,
                                  XML_TEMPLATE=json.dumps(builder.xml_template())))
    smi.chmod(0o755)
    return smi, state


def test_the_nvidia_smi_double_reads_like_the_real_host(host, monkeypatch):
    """Facts from the packaged nvidia-smi double equal the facts from the real captures."""
    smi, state = install_smi_double(host, monkeypatch, "580.159.04", "13.0")
    host.pci_gpu(address="0000:00:06.0", device="0x2335")
    host.loaded(real("proc-driver-nvidia-version.txt"), real("sys-module-nvidia-version.txt"))
    double = host.run()

    assert double["gpus"] == [{
        "index": 0, "name": "NVIDIA H200", "uuid": "GPU-4ed21e5a-8d48-380e-78f2-719f33a452dc",
        "pci_bus_id": "00000000:00:06.0", "memory_total_mib": 143771, "compute_capability": "9.0",
        "persistence_mode": False,  # no persistence daemon runs here; the real host had one
    }]
    assert double["user_space_version"] == "580.159.04"
    assert double["cuda_driver_version"] == "13.0"
    assert double["reboot_needed"] is False

    # The other forms the double prints parse like the real captures.

    def run(*args):
        return subprocess.run([str(smi)] + list(args), capture_output=True, text=True, check=True).stdout
    assert _nvidia.parse_smi_version(run("--version")) == _nvidia.parse_smi_version(real("nvidia-smi-version.txt"))
    fields = ["driver_version", "name", "compute_cap", "memory.total"]
    assert _nvidia.parse_query_csv(run("--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"), fields) == \
        _nvidia.parse_query_csv(real("nvidia-smi-query-noheader-nounits.csv"), fields)
    # A module loaded from another driver: the double fails like the real one.
    (state / "sys" / "module" / "nvidia" / "version").write_text("590.48.01\n")
    mismatch = subprocess.run([str(smi)], capture_output=True, text=True, check=False)
    assert mismatch.returncode == 18
    assert _nvidia.nvml_mismatch(mismatch.stdout)


def test_the_nvidia_smi_double_of_r610_prints_the_new_version_keys(host, monkeypatch):
    """A double packaged for an R610+ driver prints what that driver prints (derived-r610), and the
    facts read its versions from the new keys."""
    smi = install_smi_double(host, monkeypatch, "610.57.04", "13.3")[0]
    printed = subprocess.run([str(smi), "--version"], capture_output=True, text=True, check=True).stdout
    derived = (REPO / "tests" / "unit" / "fixtures" / "derived-r610" / "nvidia-smi-version.txt").read_text()
    assert printed == derived
    facts = host.run()
    assert (facts["user_space_version"], facts["cuda_driver_version"]) == ("610.57.04", "13.3")


DERIVED = REPO / "tests" / "unit" / "fixtures" / "derived-multi-gpu"


def test_interconnect_of_a_multi_gpu_host_from_topo_m(host):
    """The derived 8-card PCIe host (tests/unit/fixtures/derived-multi-gpu): every pair's link."""
    query = (DERIVED / "rtx-pro-6000-8gpu-pcie" / "nvidia-smi-query.csv").read_text()
    topo = (DERIVED / "rtx-pro-6000-8gpu-pcie" / "nvidia-smi-topo-m.txt").read_text()
    host.executable("nvidia-smi", stdout=query, by_args={"topo": (topo, 0)})
    facts = host.run()
    assert [gpu["pci_bus_id"] for gpu in facts["gpus"]] == [
        "00000000:%s:00.0" % bus for bus in ("17", "18", "3A", "3B", "98", "99", "B1", "B2")]
    assert len(facts["interconnect"]) == 28
    assert facts["interconnect"][0] == {"gpus": [0, 1], "link": "PIX", "type": "pcie", "nvlinks": 0}
    assert {tuple(pair["gpus"]): pair["link"] for pair in facts["interconnect"]}[(3, 4)] == "SYS"


def test_no_interconnect_on_one_gpu_or_when_topo_fails(host):
    host.executable("nvidia-smi", stdout=real("nvidia-smi-query.csv"))
    assert host.run()["interconnect"] == []
    query = (DERIVED / "h200-8gpu-nvlink" / "nvidia-smi-query.csv").read_text()
    host.executable("nvidia-smi", stdout=query, by_args={"topo": ("Invalid combination of input arguments.\n", 2)})
    assert host.run()["interconnect"] == []


def test_the_nvidia_smi_double_prints_a_topology_the_parser_reads(host, monkeypatch):
    builder = load_repo_builder()
    state = host.root / "double-state"
    (state / "sys" / "module" / "nvidia").mkdir(parents=True)
    (state / "sys" / "module" / "nvidia" / "version").write_text("595.71.05\n")
    double = load_module("test_double", REPO / "tests" / "fixtures" / "nvidia_repo" / "test_double.py")
    monkeypatch.setattr(double, "STATE", state)
    monkeypatch.setattr(double, "BOOT_ID", state / "boot_id")
    double.hardware("rtx-pro-6000", 4)
    monkeypatch.setenv("NVIDIA_TEST_DOUBLE_STATE", str(state))
    smi = host.bin / "nvidia-smi"
    smi.write_text(builder.render("nvidia-smi", VERSION="595.71.05", CUDA_VERSION="13.2",
                                  XML_TEMPLATE=json.dumps(builder.xml_template())))
    smi.chmod(0o755)
    out = subprocess.run([str(smi), "topo", "-m"], capture_output=True, text=True, check=True).stdout
    pairs = _nvidia.gpu_interconnect(_nvidia.parse_topo_matrix(out))
    assert [(pair["gpus"], pair["link"]) for pair in pairs] == [
        ([0, 1], "PIX"), ([0, 2], "NODE"), ([0, 3], "NODE"), ([1, 2], "NODE"), ([1, 3], "NODE"), ([2, 3], "PIX")]


def test_the_nvidia_smi_double_lists_the_processes_holding_a_gpu(host, monkeypatch):
    """After the double's boot, --query-compute-apps lists a process that holds the GPU's device
    file open, and nothing once it closed it, in nvidia-smi's CSV form."""
    smi, state = install_smi_double(host, monkeypatch, "595.71.05", "13.2")
    double = load_module("test_double", REPO / "tests" / "fixtures" / "nvidia_repo" / "test_double.py")
    installed = host.root / "kernel-module"
    installed.write_text("version=595.71.05\nlicense=Dual MIT/GPL\n")
    monkeypatch.setattr(double, "STATE", state)
    monkeypatch.setattr(double, "INSTALLED_MODULE", installed)
    # No systemd here: the persistence daemon's unit is not enabled.
    monkeypatch.setattr(double, "subprocess", types.SimpleNamespace(run=lambda *args, **kwargs: types.SimpleNamespace(returncode=1)))
    double.boot()
    query = [str(smi), "--query-compute-apps=pid,process_name,gpu_bus_id", "--format=csv,noheader"]
    assert subprocess.run(query, capture_output=True, text=True, check=True).stdout == ""
    with (state / "dev" / "nvidia0").open():
        listed = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    assert listed == "%d, %s, 00000000:00:06.0\n" % (os.getpid(), os.path.realpath(sys.executable))
    assert subprocess.run(query, capture_output=True, text=True, check=True).stdout == ""

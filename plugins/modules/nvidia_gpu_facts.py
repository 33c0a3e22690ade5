#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather NVIDIA GPU and driver facts, loaded versus installed
version_added: 0.1.0
description:
  - Reports the NVIDIA GPUs of a host and the state of its driver as RV(ansible_facts.nvidia_gpu).
  - Compares the B(loaded) kernel module (C(/sys/module/nvidia/version), C(/proc/driver/nvidia/version))
    with the B(installed) one (C(modinfo nvidia), else the kernel module package) and with
    C(nvidia-smi)'s user space, and says whether a reboot is needed and why.
  - Finds GPUs on the PCI bus even when no driver is loaded, so a host without a GPU reports
    RV(ansible_facts.nvidia_gpu.gpu_present=false) instead of failing.
  - Only reads; never changes anything.
author:
  - pro6000.inference developers (@pro6000)
options:
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) executable.
      - When it cannot be found, GPU details come from the PCI bus only.
    type: str
    default: nvidia-smi
  modinfo:
    description:
      - Name or path of the C(modinfo) executable, used to read the installed module's version
        and licence (C(Dual MIT/GPL) is the open flavour).
    type: str
    default: modinfo
  dpkg:
    description:
      - Name or path of C(dpkg), used to list installed NVIDIA and CUDA packages.
    type: str
    default: dpkg
  proc_path:
    description:
      - Mount point of procfs. Tests point it at a simulated tree.
    type: path
    default: /proc
  sys_path:
    description:
      - Mount point of sysfs (module version, PCI devices). Tests point it at a simulated tree.
    type: path
    default: /sys
extends_documentation_fragment:
  - pro6000.inference.attributes
  - pro6000.inference.attributes.read_only
  - pro6000.inference.attributes.facts
attributes:
  facts:
    details: Returns RV(ansible_facts.nvidia_gpu).
notes:
  - The loaded flavour comes from C(/proc/driver/nvidia/version) (C(Open Kernel Module) or not),
    the installed flavour from C(modinfo -F license nvidia) or from the kernel module package name
    (C(nvidia-dkms-open), C(nvidia-kernel-open-dkms)).
  - Blackwell is recognised from the compute capability (10.0 and above) when C(nvidia-smi) answers,
    else from the PCI device id.
seealso:
  - name: NVIDIA driver installation guide
    description: How NVIDIA packages its Linux driver.
    link: https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/
"""

EXAMPLES = r"""
- name: Gather NVIDIA GPU facts
  pro6000.inference.nvidia_gpu_facts:

- name: Stop when the loaded driver is not the installed one
  ansible.builtin.assert:
    that: not ansible_facts.nvidia_gpu.reboot_needed
    fail_msg: "{{ ansible_facts.nvidia_gpu.reboot_reasons | join('; ') }}"

- name: Read a simulated host (test double)
  pro6000.inference.nvidia_gpu_facts:
    proc_path: /var/lib/nvidia-test-double/proc
    sys_path: /var/lib/nvidia-test-double/sys
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    nvidia_gpu:
      description: NVIDIA GPUs and driver state.
      returned: always
      type: dict
      contains:
        gpu_present:
          description: Whether any NVIDIA display-class device is on the PCI bus (or nvidia-smi lists one).
          type: bool
          sample: true
        gpu_count:
          description: Number of NVIDIA GPUs (PCI bus, or nvidia-smi when it lists more).
          type: int
          sample: 1
        blackwell_present:
          description: Whether any GPU is a Blackwell GPU (proprietary modules do not drive it).
          type: bool
          sample: true
        gpus:
          description: GPUs as nvidia-smi lists them; empty when nvidia-smi cannot answer.
          type: list
          elements: dict
          sample:
            - index: 0
              name: NVIDIA RTX PRO 6000 Blackwell Server Edition
              uuid: GPU-4ed21e5a-8d48-380e-78f2-719f33a452dc
              pci_bus_id: "00000000:01:00.0"
              memory_total_mib: 97887
              compute_capability: "12.0"
              persistence_mode: true
        pci_devices:
          description: NVIDIA display-class PCI devices (address and device id).
          type: list
          elements: dict
          sample: [{"address": "0000:01:00.0", "device_id": "0x2bb5", "blackwell": true}]
        module_loaded:
          description: Whether an nvidia kernel module is loaded.
          type: bool
        loaded_version:
          description: Version of the loaded module, null when none is loaded.
          type: str
          sample: 590.48.01
        loaded_flavour:
          description: C(open) or C(proprietary) for the loaded module, null when none is loaded.
          type: str
        installed_version:
          description: Version of the module that loads at next boot (modinfo, else the package).
          type: str
          sample: 590.48.01
        installed_flavour:
          description: C(open) or C(proprietary) for the installed module.
          type: str
        installed_module_package:
          description: Name of the installed kernel module package.
          type: str
          sample: nvidia-dkms-open
        flavour:
          description: Loaded flavour when a module is loaded, else the installed flavour.
          type: str
          sample: open
        user_space_version:
          description: Version of nvidia-smi (the user-space driver), null when it cannot answer.
          type: str
        cuda_driver_version:
          description: Newest CUDA version the loaded driver supports, as nvidia-smi reports it.
          type: str
          sample: "13.1"
        nvml_mismatch:
          description: Whether nvidia-smi failed with "Driver/library version mismatch".
          type: bool
        nvml_library_version:
          description: NVML library version from the mismatch message, when given.
          type: str
        nvidia_smi_error:
          description: First line of nvidia-smi's error output when it failed, else null.
          type: str
        packages:
          description: Installed NVIDIA driver and CUDA packages, name to Debian version.
          type: dict
          sample: {"nvidia-open": "590.48.01-1", "cuda-toolkit-13-1": "13.1.1-1"}
        held_packages:
          description: NVIDIA and CUDA packages on hold (apt-mark hold).
          type: list
          elements: str
        interconnect:
          description:
            - The link between each pair of GPUs, from C(nvidia-smi topo -m), on hosts with more than
              one GPU (empty otherwise, or when nvidia-smi cannot tell).
            - C(gpus) are nvidia-smi indexes; C(link) the matrix cell (C(NV18), C(PIX), C(PXB), C(PHB),
              C(NODE), C(SYS)); C(type) C(nvlink), C(pcie) or C(unknown); C(nvlinks) the number of
              bonded NVLinks (0 for PCIe).
          type: list
          elements: dict
          sample: [{"gpus": [0, 1], "link": "PIX", "type": "pcie", "nvlinks": 0}]
        reboot_needed:
          description: Whether the loaded driver differs from the installed one.
          type: bool
        reboot_reasons:
          description: Why a reboot is needed, one sentence each.
          type: list
          elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pro6000.inference.plugins.module_utils._nvidia import (
    DISPLAY_CLASS_PREFIX,
    NO_DEVICES_MARKER,
    NVIDIA_PCI_VENDOR,
    flavour_from_license,
    gpu_interconnect,
    gpus_from_query,
    is_blackwell_compute_capability,
    is_blackwell_pci_device,
    kernel_package_flavour,
    nvml_library_version,
    nvml_mismatch,
    parse_dpkg_list,
    parse_proc_driver_version,
    parse_query_csv,
    parse_smi_version,
    parse_sys_module_version,
    parse_topo_matrix,
    reboot_reasons,
    upstream_version,
)

QUERY_FIELDS = "index,name,uuid,pci.bus_id,driver_version,memory.total,compute_cap,persistence_mode"
PACKAGE_PREFIXES = ("nvidia-", "libnvidia-", "cuda-", "libcuda")


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def pci_devices(sys_path):
    """NVIDIA display-class devices under <sys>/bus/pci/devices."""
    root = os.path.join(sys_path, "bus", "pci", "devices")
    devices = []
    for address in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        base = os.path.join(root, address)
        vendor = (read_text(os.path.join(base, "vendor")) or "").strip().lower()
        device_class = (read_text(os.path.join(base, "class")) or "").strip().lower()
        if vendor != NVIDIA_PCI_VENDOR or not device_class.startswith(DISPLAY_CLASS_PREFIX):
            continue
        device_id = (read_text(os.path.join(base, "device")) or "").strip().lower()
        devices.append({"address": address, "device_id": device_id,
                        "blackwell": is_blackwell_pci_device(device_id)})
    return devices


def loaded_module(proc_path, sys_path):
    """Version and flavour of the loaded module; sysfs is authoritative for the version."""
    proc = parse_proc_driver_version(read_text(os.path.join(proc_path, "driver", "nvidia", "version")) or "")
    sys_version = parse_sys_module_version(read_text(os.path.join(sys_path, "module", "nvidia", "version")) or "")
    return sys_version or proc["version"], proc["flavour"]


def installed_packages(module):
    dpkg = module.get_bin_path(module.params["dpkg"])
    if not dpkg:
        return []
    # A wide COLUMNS keeps dpkg from truncating long names and versions.
    rc, out, err = module.run_command([dpkg, "-l"], environ_update={"COLUMNS": "250"})
    if rc != 0:
        module.fail_json(msg="dpkg -l failed: %s" % err.strip(), rc=rc)
    return [package for package in parse_dpkg_list(out)
            if package["installed"] and package["name"].startswith(PACKAGE_PREFIXES)]


def installed_module(module, packages):
    """Version and flavour of the module that loads at next boot, and its package."""
    package = next((p for p in packages if kernel_package_flavour(p["name"])), None)
    version, flavour = None, None
    modinfo = module.get_bin_path(module.params["modinfo"])
    if modinfo:
        rc, out, dummy = module.run_command([modinfo, "-F", "version", "nvidia"])
        if rc == 0 and out.strip():
            version = out.strip()
            rc, out, dummy = module.run_command([modinfo, "-F", "license", "nvidia"])
            flavour = flavour_from_license(out) if rc == 0 else None
    if package is not None:
        version = version or upstream_version(package["version"])
        flavour = flavour or kernel_package_flavour(package["name"])
    return version, flavour, package["name"] if package else None


def query_nvidia_smi(module):
    """Run nvidia-smi; returns (gpus, version dict, interconnect, error text)."""
    smi = module.get_bin_path(module.params["nvidia_smi"])
    if not smi:
        return [], {}, [], None
    rc, out, err = module.run_command([smi, "--query-gpu=%s" % QUERY_FIELDS, "--format=csv,nounits"])
    if rc != 0:
        return [], {}, [], (out + err).strip()
    gpus = gpus_from_query(parse_query_csv(out))
    interconnect = []
    if len(gpus) > 1:
        # A topology nvidia-smi cannot print (or this parser cannot read) leaves the pairs unknown.
        rc, out, dummy = module.run_command([smi, "topo", "-m"])
        try:
            interconnect = gpu_interconnect(parse_topo_matrix(out)) if rc == 0 else []
        except ValueError:
            interconnect = []
    rc, out, err = module.run_command([smi, "--version"])
    return gpus, parse_smi_version(out) if rc == 0 else {}, interconnect, None


def gather(module):
    params = module.params
    devices = pci_devices(params["sys_path"])
    loaded_version, loaded_flavour = loaded_module(params["proc_path"], params["sys_path"])
    packages = installed_packages(module)
    installed_version, installed_flavour, module_package = installed_module(module, packages)
    gpus, versions, interconnect, smi_error = query_nvidia_smi(module)
    if smi_error and NO_DEVICES_MARKER in smi_error:
        smi_error_line = NO_DEVICES_MARKER
    else:
        smi_error_line = smi_error.splitlines()[0] if smi_error else None
    mismatch = nvml_mismatch(smi_error)
    gpu_count = max(len(devices), len(gpus))
    reasons = reboot_reasons(loaded_version, loaded_flavour, installed_version, installed_flavour,
                             mismatch, gpu_count > 0)
    return {
        "gpu_present": gpu_count > 0,
        "gpu_count": gpu_count,
        "blackwell_present": any(is_blackwell_compute_capability(gpu["compute_capability"]) for gpu in gpus)
        or any(device["blackwell"] for device in devices),
        "gpus": gpus,
        "pci_devices": devices,
        "interconnect": interconnect,
        "module_loaded": loaded_version is not None,
        "loaded_version": loaded_version,
        "loaded_flavour": loaded_flavour,
        "installed_version": installed_version,
        "installed_flavour": installed_flavour,
        "installed_module_package": module_package,
        "flavour": loaded_flavour or installed_flavour,
        "user_space_version": versions.get("nvidia_smi_version"),
        "cuda_driver_version": versions.get("cuda_version"),
        "nvml_mismatch": mismatch,
        "nvml_library_version": nvml_library_version(smi_error),
        "nvidia_smi_error": smi_error_line,
        "packages": dict((p["name"], p["version"]) for p in packages),
        "held_packages": sorted(p["name"] for p in packages if p["held"]),
        "reboot_needed": bool(reasons),
        "reboot_reasons": reasons,
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            modinfo=dict(type="str", default="modinfo"),
            dpkg=dict(type="str", default="dpkg"),
            proc_path=dict(type="path", default="/proc"),
            sys_path=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, ansible_facts={"nvidia_gpu": gather(module)})


if __name__ == "__main__":
    main()

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for what NVIDIA's tools and the kernel print about GPUs, drivers and CUDA.

Pure functions over text: no I/O, so that they are tested against real captured outputs.
Standard library only (they run on targets).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

NVML_MISMATCH_MARKER = "Driver/library version mismatch"
NO_DRIVER_MARKER = "couldn't communicate with the NVIDIA driver"
NO_DEVICES_MARKER = "No devices were found"

OPEN_LICENSE = "Dual MIT/GPL"
PROPRIETARY_LICENSE = "NVIDIA"

# PCI vendor id of NVIDIA and the PCI class prefix of display controllers (VGA 0x0300, 3D 0x0302).
NVIDIA_PCI_VENDOR = "0x10de"
DISPLAY_CLASS_PREFIX = "0x03"
# Blackwell device ids: GB100/GB102 (0x29xx) and GB20x (0x2bxx-0x2fxx); RTX PRO 6000 Blackwell
# Server Edition is 0x2bb5, Workstation Edition 0x2bb1. Used only before a driver can answer.
BLACKWELL_PCI_DEVICE_RANGES = ((0x2900, 0x29FF), (0x2B00, 0x2FFF))
# Blackwell starts at compute capability 10.0 (B200 10.0, RTX PRO 6000 12.0).
BLACKWELL_MIN_COMPUTE_MAJOR = 10

_VERSION_RE = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)\b")
_UNIT_RE = re.compile(r"^(?P<name>.+?)\s*\[(?P<unit>[^\]]+)\]$")
_DPKG_LINE_RE = re.compile(
    r"^(?P<status>[uihrp][ncHUFWti][ R]?)\s+(?P<name>\S+)\s+(?P<version>\S+)\s+(?P<arch>\S+)\s*(?P<description>.*)$"
)


def version_key(version):
    """Sortable key for dotted driver/toolkit versions ("590.48.01" -> (590, 48, 1))."""
    return tuple(int(part) for part in re.findall(r"\d+", version or ""))


def upstream_version(package_version):
    """Upstream part of a Debian package version: "590.48.01-0ubuntu1" -> "590.48.01"."""
    version = package_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def _strip_unit(value, unit):
    """Drop the unit nvidia-smi appends to values when the header names one ("143771 MiB")."""
    value = value.strip()
    if unit and value.endswith(" " + unit):
        return value[: -len(unit) - 1]
    return value


def parse_query_csv(text, fields=None):
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

    With a header, field names come from it and units (``[MiB]``) are stripped from the values.
    Without one (``noheader``), pass the queried ``fields`` in order. Returns a list of dicts.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    units = {}
    if fields is None:
        if not lines:
            return []
        fields = []
        for column in lines.pop(0).split(","):
            match = _UNIT_RE.match(column.strip())
            if match:
                fields.append(match.group("name"))
                units[match.group("name")] = match.group("unit")
            else:
                fields.append(column.strip())
    rows = []
    for line in lines:
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise ValueError("expected %d columns, got %d: %r" % (len(fields), len(values), line))
        rows.append(dict((field, _strip_unit(value, units.get(field))) for field, value in zip(fields, values)))
    return rows


def _mib(value):
    """Integer MiB from "143771 MiB", "143771" or "143771MiB"; None for N/A."""
    match = re.match(r"^\s*(\d+)\s*(?:MiB)?\s*$", value or "")
    return int(match.group(1)) if match else None


def _enabled(value):
    """nvidia-smi's Enabled/Disabled (or On/Off) as a boolean; None for N/A."""
    value = (value or "").strip().lower()
    if value in ("enabled", "on"):
        return True
    if value in ("disabled", "off"):
        return False
    return None


def gpus_from_query(rows):
    """Normalise query rows into the facts' GPU shape (missing fields stay None)."""
    gpus = []
    for position, row in enumerate(rows):
        index = row.get("index")
        gpus.append({
            "index": int(index) if index not in (None, "") else position,
            "name": row.get("name"),
            "uuid": row.get("uuid"),
            "pci_bus_id": row.get("pci.bus_id"),
            "memory_total_mib": _mib(row.get("memory.total")),
            "compute_capability": row.get("compute_cap"),
            "persistence_mode": _enabled(row.get("persistence_mode")),
        })
    return gpus


def parse_smi_version(text):
    """Parse ``nvidia-smi --version`` into a dict with snake_case keys."""
    keys = {
        "NVIDIA-SMI version": "nvidia_smi_version",
        "NVML version": "nvml_version",
        "DRIVER version": "driver_version",
        "CUDA Version": "cuda_version",
    }
    result = dict.fromkeys(keys.values())
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in keys:
            result[keys[key.strip()]] = value.strip()
    return result


def parse_proc_driver_version(text):
    """Parse ``/proc/driver/nvidia/version``: loaded version and flavour (open/proprietary)."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _VERSION_RE.search(line.split("Kernel Module", 1)[-1])
            flavour = "open" if "Open Kernel Module" in line else "proprietary"
            return {"version": match.group(1) if match else None, "flavour": flavour}
    return {"version": None, "flavour": None}


def parse_sys_module_version(text):
    """``/sys/module/nvidia/version`` holds the loaded module version and a newline."""
    value = text.strip()
    return value if _VERSION_RE.fullmatch(value) else None


def flavour_from_license(license_text):
    """``modinfo -F license nvidia``: "Dual MIT/GPL" is the open module, "NVIDIA" the other."""
    value = license_text.strip()
    if value == OPEN_LICENSE:
        return "open"
    if value == PROPRIETARY_LICENSE:
        return "proprietary"
    return None


def parse_dpkg_list(text):
    """Parse ``dpkg -l`` rows into dicts (name without ":arch", status, version, held)."""
    packages = []
    for line in text.splitlines():
        match = _DPKG_LINE_RE.match(line)
        if not match:
            continue
        status = match.group("status").strip()
        packages.append({
            "name": match.group("name").split(":", 1)[0],
            "version": match.group("version"),
            "architecture": match.group("arch"),
            "description": match.group("description").strip(),
            "status": status,
            "installed": status[1:2] == "i",
            "held": status[:1] == "h",
        })
    return packages


def nvml_mismatch(text):
    """True when nvidia-smi says user space and the loaded kernel module disagree."""
    return NVML_MISMATCH_MARKER in (text or "")


def nvml_library_version(text):
    """NVML's own version from the mismatch message ("NVML library version: 590.48"), if any."""
    match = re.search(r"NVML library version:\s*(\S+)", text or "")
    return match.group(1) if match else None


def kernel_package_flavour(name):
    """Flavour of a kernel module package name across Ubuntu and Debian naming, else None."""
    if re.fullmatch(r"nvidia-dkms(-\d+)?-open|nvidia-kernel-open-dkms", name):
        return "open"
    if re.fullmatch(r"nvidia-dkms(-\d+)?|nvidia-kernel-dkms", name):
        return "proprietary"
    return None


def is_blackwell_pci_device(device_id):
    """True for PCI device ids of Blackwell GPUs ("0x2bb5")."""
    try:
        value = int(device_id, 16)
    except (TypeError, ValueError):
        return False
    return any(low <= value <= high for low, high in BLACKWELL_PCI_DEVICE_RANGES)


def is_blackwell_compute_capability(compute_capability):
    """True for compute capability 10.0 and above ("12.0" on RTX PRO 6000)."""
    key = version_key(compute_capability)
    return bool(key) and key[0] >= BLACKWELL_MIN_COMPUTE_MAJOR


def reboot_reasons(loaded_version, loaded_flavour, installed_version, installed_flavour,
                   mismatch, gpu_present):
    """Why the loaded driver is not the one installed (empty list: no reboot needed)."""
    reasons = []
    if mismatch:
        reasons.append("nvidia-smi reports an NVML driver/library version mismatch")
    if installed_version and loaded_version and installed_version != loaded_version:
        reasons.append("loaded module %s differs from installed %s" % (loaded_version, installed_version))
    if installed_flavour and loaded_flavour and installed_flavour != loaded_flavour:
        reasons.append("loaded %s module differs from installed %s module" % (loaded_flavour, installed_flavour))
    if installed_version and not loaded_version and gpu_present:
        reasons.append("driver %s is installed but no nvidia module is loaded" % installed_version)
    return reasons

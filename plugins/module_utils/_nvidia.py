# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for what NVIDIA's tools and the kernel print about GPUs, drivers and CUDA.

Pure functions over text: no I/O, so that they are tested against real captured outputs.
Standard library only (they run on targets).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import re
from xml.etree import ElementTree

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

# ansible_facts['virtualization_type'] values of a container (ansible's facts/virtual/linux.py):
# a container runs its host's kernel, so it neither reboots it nor builds modules for it.
CONTAINER_TYPES = ("docker", "container", "containerd", "podman", "lxc", "systemd-nspawn")

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


# ``nvidia-smi --version`` keys, and the shape each value must have. From R610 on the driver's
# version is under "KMD version" and the CUDA driver API's under "CUDA UMD version"; the old keys
# stay, with "Deprecated, see ..." as their value (NVIDIA's R610 release notes;
# tests/unit/fixtures/nvidia-smi-r610/). A new key wins; an old one counts only when it holds a
# version.
_SMI_VERSION_KEYS = (
    ("NVIDIA-SMI version", "nvidia_smi_version", r"\d+\.\d+(\.\d+)?"),
    ("NVML version", "nvml_version", r"\d+\.\d+(\.\d+)?"),
    ("KMD version", "driver_version", r"\d+\.\d+(\.\d+)?"),
    ("DRIVER version", "driver_version", r"\d+\.\d+(\.\d+)?"),
    ("CUDA UMD version", "cuda_version", r"\d+\.\d+"),
    ("CUDA Version", "cuda_version", r"\d+\.\d+"),
)


def parse_smi_version(text):
    """Parse ``nvidia-smi --version`` into a dict with snake_case keys; a value that is not a
    version (R610's "Deprecated, ..." under the old keys, or anything unexpected) reads as None."""
    lines = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            lines.setdefault(key.strip().lower(), value.strip())
    result = dict.fromkeys(entry[1] for entry in _SMI_VERSION_KEYS)
    for key, name, shape in _SMI_VERSION_KEYS:
        value = lines.get(key.lower())
        if result[name] is None and value is not None and re.fullmatch(shape, value):
            result[name] = value
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


# Link kinds of `nvidia-smi topo -m`, as its legend defines them: NV# traverses a bonded set of #
# NVLinks; the PCIe paths from the shortest to the longest: PIX (at most one PCIe bridge), PXB
# (several bridges, no host bridge), PHB (a PCIe host bridge, typically the CPU), NODE (between
# host bridges of one NUMA node), SYS (across NUMA nodes, QPI/UPI). Higher rank: faster.
PCIE_LINK_RANKS = {"PIX": 5, "PXB": 4, "PHB": 3, "NODE": 2, "SYS": 1}
NVLINK_RANK_BASE = 100
_NVLINK_RE = re.compile(r"^NV(\d+)$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def link_rank(link):
    """How fast a `topo -m` link is relative to the others: NV18 > NV4 > PIX > ... > SYS > unknown (0)."""
    match = _NVLINK_RE.match(link or "")
    if match:
        return NVLINK_RANK_BASE + int(match.group(1))
    return PCIE_LINK_RANKS.get(link, 0)


def parse_topo_matrix(text):
    """Parse ``nvidia-smi topo -m`` (tab-separated matrix, then a legend).

    Returns ``{"devices": [...], "links": {row: {column: cell}}, "affinity": {row: {...}}}``:
    devices in column order (``GPU0``..., NICs such as ``NIC0`` or ``mlx5_0``), each cell as
    printed (``X``, ``NV18``, ``PIX``...), and per row the trailing columns (``CPU Affinity``,
    ``NUMA Affinity``, ``GPU NUMA ID``) that follow the device columns.
    """
    lines = [_ANSI_RE.sub("", line).rstrip("\n") for line in text.splitlines()]
    matrix = []
    for line in lines:
        if line.strip().startswith("Legend"):
            break
        if line.strip():
            matrix.append(line)
    if not matrix:
        return {"devices": [], "links": {}, "affinity": {}}
    header = [cell.strip() for cell in matrix[0].split("\t") if cell.strip()]
    devices = [cell for cell in header if "Affinity" not in cell and "NUMA" not in cell]
    trailing = header[len(devices):]
    links, affinity = {}, {}
    for line in matrix[1:]:
        cells = [cell.strip() for cell in line.split("\t")]
        name, values = cells[0], cells[1:]
        if name not in devices or len(values) < len(devices):
            raise ValueError("unexpected topo -m row: %r" % line)
        links[name] = dict(zip(devices, values[:len(devices)]))
        rest = [value for value in values[len(devices):] if value]
        affinity[name] = dict(zip(trailing, rest))
    return {"devices": devices, "links": links, "affinity": affinity}


def gpu_interconnect(topology):
    """Every pair of GPUs of a parsed ``topo -m`` with its link, in GPU index order.

    Each pair is ``{"gpus": [a, b], "link": "NV18", "type": "nvlink"|"pcie"|"unknown", "nvlinks": 18}``,
    a and b being nvidia-smi's GPU indexes (``GPU<index>``).
    """
    gpus = sorted((int(name[3:]), name) for name in topology["devices"] if re.fullmatch(r"GPU\d+", name))
    pairs = []
    for position, (index_a, name_a) in enumerate(gpus):
        for index_b, name_b in gpus[position + 1:]:
            link = topology["links"].get(name_a, {}).get(name_b)
            match = _NVLINK_RE.match(link or "")
            pairs.append({
                "gpus": [index_a, index_b], "link": link,
                "type": "nvlink" if match else "pcie" if link in PCIE_LINK_RANKS else "unknown",
                "nvlinks": int(match.group(1)) if match else 0,
            })
    return pairs


def tensor_parallel_groups(gpus, size, interconnect):
    """Split GPUs into groups of ``size`` for tensor parallelism, preferring fast links inside groups.

    ``gpus``: GPU indexes in PCI order; ``interconnect``: pairs as ``gpu_interconnect`` returns them.
    A group is as fast as its slowest link (an all-reduce waits on it), so the split maximises
    the slowest group first, then the next slowest, and so on (leximin over the groups' slowest
    links); among equal splits it keeps PCI order (consecutive GPUs together). Returns a list of
    groups, each a list of indexes in PCI order.
    """
    order = list(gpus)
    if size < 1 or not order or len(order) % size:
        raise ValueError("cannot split %d GPU(s) into groups of %d" % (len(order), size))
    if size == 1:
        return [[gpu] for gpu in order]
    ranks = {}
    for pair in interconnect:
        a, b = pair["gpus"]
        ranks[frozenset((a, b))] = link_rank(pair["link"])

    def slowest(group):
        return min(ranks.get(frozenset((a, b)), 0) for position, a in enumerate(group) for b in group[position + 1:])

    best = {}

    def split(remaining):
        # remaining: a tuple of GPUs in PCI order; the first one always opens the next group, so
        # each split is seen once, and combinations come in PCI order (the first best wins ties).
        if not remaining:
            return (), ()
        if remaining in best:
            return best[remaining]
        first, rest = remaining[0], remaining[1:]
        winner = None
        for others in itertools.combinations(rest, size - 1):
            group = (first,) + others
            score, groups = split(tuple(gpu for gpu in rest if gpu not in others))
            candidate = (tuple(sorted(score + (slowest(group),))), (group,) + groups)
            if winner is None or candidate[0] > winner[0]:
                winner = candidate
        best[remaining] = winner
        return winner

    return [list(group) for group in split(tuple(order))[1]]


def gpus_from_smi_xml(text):
    """The GPUs of ``nvidia-smi -q -x`` in its order (PCI order): index, name, UUID, bus id, minor number."""
    root = ElementTree.fromstring(text)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        minor = gpu.findtext("minor_number")
        gpus.append({
            "index": index, "name": gpu.findtext("product_name"), "uuid": gpu.findtext("uuid"),
            "pci_bus_id": gpu.findtext("pci/pci_bus_id") or gpu.get("id"),
            "minor_number": int(minor) if minor and minor.isdigit() else None,
        })
    return gpus


def in_container(facts):
    """Whether ansible_facts describe a container guest."""
    return facts.get("virtualization_role") == "guest" and facts.get("virtualization_type") in CONTAINER_TYPES


def reboot_decision(facts, reboot, reboot_command, connection, host):
    """Whether role nvidia_driver reboots the host, from nvidia_gpu_facts' reboot_needed."""
    if not facts["nvidia_gpu"].get("reboot_needed"):
        return "not-needed"
    if reboot == "never":
        return "deferred-never"
    if connection == "local" or host in ("localhost", "127.0.0.1"):
        return "deferred-controller"
    if in_container(facts) and reboot_command == "":
        return "deferred-container"
    return "reboot"


def headers_decision(facts, kernel_headers):
    """Kernel headers as asked; under auto, none in a container (its kernel is the host's)."""
    if kernel_headers in ("skip", "install"):
        return kernel_headers
    return "skip-container" if in_container(facts) else "install"

# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The replicas of a host and the gateway in front of them: which GPUs each SGLang replica owns,
where it listens, what the host records, and the command line of SGLang's gateway (smg). The
one place that decides the layout; role sglang_service wires it, role smoke reads the record."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_replica_plan
short_description: One SGLang replica per group of GPUs, the gateway in front, and the record of what the host serves
version_added: 0.1.0
description:
  - Groups the GPUs that M(pro6000.inference.nvidia_gpu_facts) reports, in PCI bus order, into
    consecutive groups of O(_input.tensor_parallel_size) GPUs, one SGLang replica per group,
    each with its own C(CUDA_VISIBLE_DEVICES) (GPU UUIDs), loopback port and unit.
  - With more than one replica (or O(_input.gateway=always)) the replicas listen on loopback
    and the gateway takes the host's public address and port; without a gateway the only
    replica keeps today's unit name, address and port.
  - Returns the record role C(sglang_service) writes (C(ansible_local.sglang_service),
    docs/CONTRACTS.md), computed once here, and which units of the previous record the new
    layout retires (a host moving from one unit to replicas).
  - With O(layout.metrics_host) beyond loopback (a scraper on another host) the gateway's
    metrics listener binds it, and so does every replica whose address is loopback while it
    serves metrics, since SGLang serves C(/metrics) on its API port; the replica itself leaves
    loopback (role C(sglang_service) then requires the API key and admits only localhost, the
    scrapers and, for the only replica, its clients). Recorded URLs stay the host's own view
    (loopback for a wildcard bind), which role C(monitoring) retargets to the host's address.
options:
  _input:
    description: >-
      The facts of M(pro6000.inference.nvidia_gpu_facts) (C(ansible_facts.nvidia_gpu)): its C(gpus)
      (C(uuid), C(pci_bus_id)) as nvidia-smi lists them, or, where nvidia-smi cannot answer yet (a
      driver installed but not loaded before the reboot), its C(pci_devices), which are then
      named by PCI position (C(CUDA_VISIBLE_DEVICES) takes positions, and the unit sets
      C(CUDA_DEVICE_ORDER=PCI_BUS_ID)). A list is taken as C(gpus). Empty when no GPU is seen.
    type: raw
    required: true
  layout:
    description: >-
      C(tensor_parallel_size), C(gpus) (GPU indexes in PCI order or UUIDs to use; empty: all),
      C(replicas) (at most this many; 0: one per group), C(gateway) (C(auto), C(always),
      C(never)), C(unit_name), C(gateway_unit_name), C(host), C(port), C(replica_port) (first loopback port; a
      replica listens on it plus the PCI position of its first GPU), C(gateway_metrics_port),
      C(gateway_policy) (smg's C(--policy), recorded for the smoke gate; default C(cache_aware)),
      C(gateway_control_plane_key_file) (the root-only file of the key of smg's C(/workers),
      recorded for the smoke gate), C(enable_metrics), C(metrics_host) (where the metrics
      listeners bind, P(pro6000.inference.metrics_listen_address#filter) over
      C(common_metrics_scrapers); default C(127.0.0.1)).
    type: dict
    required: true
  serves:
    description: >-
      What every replica serves: C(argv) (from P(pro6000.inference.sglang_speculative_plan#filter),
      without C(--host)/C(--port)), C(algorithm), C(wanted_algorithm), C(fallback),
      C(draft_length), C(ddtree_budget), C(model_path), C(served_model_name), C(draft_model_path),
      C(mamba) and C(drafter_context) (the plan's decisions for correctness).
    type: dict
    required: true
  previous:
    description: The record a former run wrote (C(ansible_local.sglang_service)), to find the units to retire.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Plan the replicas
  ansible.builtin.set_fact:
    __plan: "{{ ansible_facts.nvidia_gpu.gpus | pro6000.inference.sglang_replica_plan(layout, serves, previous) }}"
"""

RETURN = r"""
_value:
  description: The layout.
  type: dict
  contains:
    replicas:
      description: >-
        In PCI order: C(name), C(unit), C(host), C(port), C(url), C(metrics_url), C(gpus) (UUIDs),
        C(argv) (complete), C(worker) (its entry in the gateway's manifest), C(after_retire) (its
        GPUs or port are held by a unit being retired).
      type: list
      elements: dict
    gateway:
      description: >-
        C(unit), C(host), C(port), C(url), C(metrics_url), C(metrics_host), C(metrics_port), C(policy),
        C(control_plane_key_file); null without a gateway.
      type: dict
    retire:
      description: Units (names without C(.service)) of the previous record that this layout no longer has.
      type: list
      elements: str
    record:
      description: What the host serves, as role sglang_service records it.
      type: dict
    note:
      description: GPUs left idle because they do not fill a group; null otherwise.
      type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.pro6000.inference.plugins.module_utils import _inputs
from ansible_collections.pro6000.inference.plugins.module_utils._monitoring import is_loopback

GATEWAY_MODES = ("auto", "always", "never")
LOOPBACK = "127.0.0.1"


def _error(message):
    return AnsibleFilterError("sglang_replica_plan: " + message)


def _positive(layout, key, default):
    value = layout.get(key, default)
    try:
        if isinstance(value, bool):
            raise TypeError()
        number = int(value)
    except (TypeError, ValueError):
        raise _error("%s must be an integer, got %r" % (key, value))
    if number < 0:
        raise _error("%s must not be negative, got %d" % (key, number))
    return number


def _pci_order(gpus):
    """(position, uuid) in PCI bus order: the order CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them."""
    for gpu in gpus:
        if not isinstance(gpu, dict) or not gpu.get("uuid") or not gpu.get("pci_bus_id"):
            raise _error("every GPU needs uuid and pci_bus_id (nvidia_gpu_facts), got %r" % (gpu,))
    ordered = sorted(gpus, key=lambda gpu: str(gpu["pci_bus_id"]).lower())
    return list(enumerate(ordered))


def _selected(ordered, wanted):
    """The GPUs the layout may use: all, or those named by PCI position or UUID."""
    if not wanted:
        return ordered
    by_uuid = dict((gpu["uuid"], (position, gpu)) for position, gpu in ordered)
    chosen = []
    for item in wanted:
        if not _inputs.gpu(item):
            raise _error("GPU %r is neither a PCI position (0, 1, ...) nor a UUID" % (item,))
        if isinstance(item, int) or str(item).isdigit():
            if int(item) >= len(ordered):
                raise _error("GPU %s is not present: the host has %d GPU(s) (positions 0 to %d in PCI order)"
                             % (item, len(ordered), len(ordered) - 1))
            entry = ordered[int(item)]
        elif item in by_uuid:
            entry = by_uuid[item]
        else:
            raise _error("GPU %r is neither a PCI position nor the UUID of a GPU present" % (item,))
        if entry in chosen:
            raise _error("GPU %r is named twice" % (item,))
        chosen.append(entry)
    return sorted(chosen, key=lambda entry: entry[0])


def gpu_groups(selected, tp_size):
    """Consecutive groups of tp_size GPUs in PCI order, and those left over. The only grouping
    rule: a topology-aware one (NVLink or PCIe switch from nvidia_gpu_facts) replaces this."""
    whole = len(selected) - len(selected) % tp_size
    return [selected[start:start + tp_size] for start in range(0, whole, tp_size)], selected[whole:]


def _client_host(host):
    """Where a client on the host reaches a server bound to host (loopback for a wildcard)."""
    if host in ("0.0.0.0", ""):
        return LOOPBACK
    if host == "::":
        return "[::1]"
    if ":" in host:
        return "[%s]" % host
    return host


def _port(layout, key, default):
    port = _positive(layout, key, default)
    if not 1 <= port <= 65535:
        raise _error("%s must be 1 to 65535, got %d" % (key, port))
    return port


def _metrics_host(layout):
    host = str(layout.get("metrics_host") or LOOPBACK)
    if not _inputs.single_line(host):
        raise _error("metrics_host %r holds a newline or another control character" % host)
    return host


def _replicas(layout, groups, with_gateway, argv):
    unit_name = layout.get("unit_name") or "sglang-qwen"
    metrics = bool(layout.get("enable_metrics", True))
    # SGLang serves /metrics on its API port: where the scrapers are beyond loopback, a replica
    # that serves metrics binds where they reach it (its unit admits them, and requires the key).
    own_host = _metrics_host(layout) if metrics else LOOPBACK
    replicas = []
    for group in groups or [[]]:
        first = group[0][0] if group else 0
        if with_gateway:
            name, host = "%s-%d" % (unit_name, first), own_host
            port = _port(layout, "replica_port", 30001) + first
            if port > 65535:
                raise _error("replica_port + %d (the PCI position of GPU %s) is %d, past 65535: lower replica_port"
                             % (first, group[0][1]["uuid"], port))
        else:
            name, host, port = unit_name, str(layout.get("host", LOOPBACK)), _port(layout, "port", 30000)
            if is_loopback(host) and not is_loopback(own_host):
                host = own_host
        if not _inputs.single_line(host):
            raise _error("host %r holds a newline or another control character" % host)
        url = "http://%s:%d" % (_client_host(host), port)
        replicas.append({
            "name": name, "unit": name + ".service", "host": host, "port": port, "url": url,
            "metrics_url": url + "/metrics" if metrics else None,
            "gpus": [entry[1]["uuid"] for entry in group],
            "argv": list(argv) + ["--host", host, "--port", str(port)],
            # Its entry in the gateway's worker manifest (smg --discovery-provider file).
            "worker": {"url": url},
        })
    if with_gateway:
        public = _port(layout, "port", 30000)
        clash = [replica["name"] for replica in replicas if replica["port"] == public]
        if clash or _port(layout, "gateway_metrics_port", 29000) in [r["port"] for r in replicas] + [public]:
            raise _error("the replica ports (replica_port + GPU position), the public port %d and the gateway "
                         "metrics port must all differ" % public)
    return replicas


def _previous_units(previous, groups):
    """{unit: (port, gpu uuids)} of the previous record; a record from before replicas (one unit,
    no replica list) held the first group's GPUs, SGLang's own default devices."""
    if not previous:
        return {}
    if previous.get("replicas"):
        found = dict((r["unit"], (r.get("port"), set(r.get("gpus") or []))) for r in previous["replicas"])
        if previous.get("gateway"):
            found[previous["gateway"]["unit"]] = (None, set())
        return found
    if previous.get("unit"):
        port = str(previous.get("url", "")).rsplit(":", 1)[-1]
        return {previous["unit"]: (int(port) if port.isdigit() else None,
                                   set(entry[1]["uuid"] for entry in groups[0]) if groups else set())}
    return {}


def _gpus(facts):
    """The GPUs with uuid and pci_bus_id: nvidia-smi's, else the PCI bus's, named by position."""
    if isinstance(facts, list):
        return facts
    facts = facts or {}
    if facts.get("gpus"):
        return facts["gpus"]
    devices = sorted(str(device.get("address", "")).lower() for device in facts.get("pci_devices") or [])
    return [{"uuid": str(position), "pci_bus_id": address} for position, address in enumerate(devices)]


def sglang_replica_plan(facts, layout, serves, previous=None):
    if not isinstance(layout, dict) or not isinstance(serves, dict):
        raise _error("layout and serves must be dictionaries")
    gpus = _gpus(facts)
    tp_size = _positive(layout, "tensor_parallel_size", 1)
    if tp_size < 1:
        raise _error("tensor_parallel_size must be at least 1, got %d" % tp_size)
    for key in ("unit_name", "gateway_unit_name"):
        if layout.get(key) and not _inputs.unit_name(layout[key]):
            raise _error("%s %r is not a plain systemd unit name (letters, digits, _ . -; no /)" % (key, layout[key]))
    cap = _positive(layout, "replicas", 0)
    mode = layout.get("gateway", "auto")
    if mode not in GATEWAY_MODES:
        raise _error("gateway must be one of %s, got %r" % (", ".join(GATEWAY_MODES), mode))
    selected = _selected(_pci_order(gpus or []), layout.get("gpus") or [])
    if selected and tp_size > len(selected):
        raise _error("tensor_parallel_size %d exceeds the %d GPU(s) selected" % (tp_size, len(selected)))
    groups, idle = gpu_groups(selected, tp_size)
    if cap:
        groups, idle = groups[:cap], [gpu for group in groups[cap:] for gpu in group] + idle
    count = len(groups) or 1
    if mode == "never" and count > 1:
        raise _error("%d replicas need the gateway: set gateway to auto, or replicas to 1" % count)
    with_gateway = mode == "always" or (mode == "auto" and count > 1)
    replicas = _replicas(layout, groups, with_gateway, serves.get("argv") or [])
    unit_name = layout.get("unit_name") or "sglang-qwen"
    gateway = None
    if with_gateway:
        host, port = str(layout.get("host", LOOPBACK)), _port(layout, "port", 30000)
        metrics_port = _port(layout, "gateway_metrics_port", 29000)
        metrics_host = _metrics_host(layout)
        gateway = {"unit": (layout.get("gateway_unit_name") or unit_name + "-gateway") + ".service",
                   "host": host, "port": port,
                   "url": "http://%s:%d" % (_client_host(host), port), "metrics_port": metrics_port,
                   "metrics_host": metrics_host,
                   "metrics_url": "http://%s:%d/metrics" % (_client_host(metrics_host), metrics_port),
                   "policy": str(layout.get("gateway_policy") or "cache_aware"),
                   "control_plane_key_file": layout.get("gateway_control_plane_key_file")}
    units = set(r["unit"] for r in replicas) | ({gateway["unit"]} if gateway else set())
    old = _previous_units(previous or {}, groups)
    retire = sorted(unit for unit in old if unit not in units)
    retire_names = [unit[:-len(".service")] if unit.endswith(".service") else unit for unit in retire]
    held_ports = set(old[unit][0] for unit in retire)
    held_gpus = set(uuid for unit in retire for uuid in old[unit][1])
    for replica in replicas:
        replica["after_retire"] = replica["port"] in held_ports or bool(held_gpus & set(replica["gpus"]))
    record = dict((key, serves.get(key)) for key in (
        "algorithm", "wanted_algorithm", "fallback", "draft_length", "ddtree_budget", "model_path",
        "served_model_name", "draft_model_path", "mamba", "drafter_context"))
    record.update({
        "url": gateway["url"] if gateway else replicas[0]["url"],
        "unit": gateway["unit"] if gateway else replicas[0]["unit"],
        "gateway": dict((k, gateway[k]) for k in ("url", "unit", "metrics_url", "policy", "control_plane_key_file"))
        if gateway else None,
        "replicas": [dict((k, r[k]) for k in ("name", "unit", "url", "port", "gpus", "metrics_url"))
                     for r in replicas],
    })
    note = None
    if idle:
        note = "GPU(s) %s stay idle: they do not fill a group of tensor_parallel_size %d%s" % (
            ", ".join(entry[1]["uuid"] for entry in idle), tp_size, " or exceed replicas %d" % cap if cap else "")
    return {"replicas": replicas, "gateway": gateway, "retire": retire_names, "record": record, "note": note}


class FilterModule(object):
    def filters(self):
        return {"sglang_replica_plan": sglang_replica_plan}

# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd units of a host serving as wanted, in the shape module host_state compares."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_service_units
short_description: Every replica's unit and the gateway's, running and enabled as asked
version_added: 0.1.0
description:
  - The O(pro6000.inference.host_state#module:units) entries of M(pro6000.inference.host_state)
    for a layout of P(pro6000.inference.sglang_replica_plan#filter), each replica's unit, then,
    when the layout has a gateway, the unit O(gateway_unit_name), each active and enabled as
    O(enabled) says.
options:
  _input:
    description: The layout (C(replicas), each with its C(unit), and C(gateway), V(null) without one).
    type: dict
    required: true
  gateway_unit_name:
    description: The gateway's unit, without C(.service).
    type: str
    required: true
  enabled:
    description: Whether every unit must start at boot.
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Compare the units with the layout
  pro6000.inference.host_state:
    units: "{{ layout | pro6000.inference.sglang_service_units('sglang-qwen-gateway', true) }}"
"""

RETURN = r"""
_value:
  description: C(name), C(active) (V(true)) and C(enabled) of each unit, the replicas' first.
  type: list
  elements: dict
"""

from ansible.module_utils.parsing.convert_bool import boolean


def sglang_service_units(layout, gateway_unit_name, enabled):
    names = [replica["unit"] for replica in layout["replicas"]]
    if layout.get("gateway"):
        names.append(gateway_unit_name + ".service")
    return [{"name": name, "active": True, "enabled": boolean(enabled)} for name in names]


class FilterModule:
    def filters(self):
        return {"sglang_service_units": sglang_service_units}

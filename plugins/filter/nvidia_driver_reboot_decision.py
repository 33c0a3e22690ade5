# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether role nvidia_driver reboots a host to load the installed driver, as one value."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nvidia_driver_reboot_decision
short_description: Whether to reboot a host so that the installed NVIDIA driver loads
version_added: "0.1.0"
description:
  - Decides from the facts of M(pro6000.inference.nvidia_gpu_facts) (the loaded against the
    installed driver and NVML), not from "a task changed".
  - V(not-needed) when the loaded driver is the installed one; V(deferred-never) when
    O(reboot=never); V(deferred-controller) when the host is the controller (a local
    connection or C(localhost)); V(deferred-container) in a container with no
    O(reboot_command) (a container cannot reboot its host's kernel); else V(reboot).
options:
  _input:
    description: The host's C(ansible_facts), with C(nvidia_gpu) and the virtualization facts.
    type: dict
    required: true
  reboot:
    description: C(nvidia_driver_reboot), V(auto) or V(never).
    type: str
    required: true
  reboot_command:
    description: C(nvidia_driver_reboot_command); a command given means the site knows how to reboot.
    type: str
    required: true
  connection:
    description: The host's C(ansible_connection).
    type: str
    required: true
  host:
    description: The host's C(inventory_hostname).
    type: str
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Decide on a reboot
  ansible.builtin.set_fact:
    decision: >-
      {{ ansible_facts | pro6000.inference.nvidia_driver_reboot_decision(nvidia_driver_reboot,
         nvidia_driver_reboot_command, ansible_connection | default(''), inventory_hostname) }}
"""

RETURN = r"""
_value:
  description: V(not-needed), V(deferred-never), V(deferred-controller), V(deferred-container) or V(reboot).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.pro6000.inference.plugins.module_utils import _nvidia


def nvidia_driver_reboot_decision(facts, reboot, reboot_command, connection, host):
    if "nvidia_gpu" not in facts:
        raise AnsibleFilterError("nvidia_driver_reboot_decision: ansible_facts has no nvidia_gpu: "
                                 "run pro6000.inference.nvidia_gpu_facts first")
    return _nvidia.reboot_decision(facts, reboot, reboot_command, connection, host)


class FilterModule:
    def filters(self):
        return {"nvidia_driver_reboot_decision": nvidia_driver_reboot_decision}

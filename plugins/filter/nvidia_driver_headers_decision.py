# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether role nvidia_driver installs kernel headers, as one value."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nvidia_driver_headers_decision
short_description: Whether to install the running kernel's headers for DKMS
version_added: "0.1.0"
description:
  - V(skip) or V(install) as O(kernel_headers) asks; under V(auto), V(skip-container) in a
    container (it runs its host's kernel), else V(install).
options:
  _input:
    description: The host's C(ansible_facts), with the virtualization facts.
    type: dict
    required: true
  kernel_headers:
    description: C(nvidia_driver_kernel_headers), V(auto), V(install) or V(skip).
    type: str
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Decide whether to install kernel headers
  ansible.builtin.set_fact:
    decision: "{{ ansible_facts | pro6000.inference.nvidia_driver_headers_decision(nvidia_driver_kernel_headers) }}"
"""

RETURN = r"""
_value:
  description: V(skip), V(install) or V(skip-container).
  type: str
"""

from ansible_collections.pro6000.inference.plugins.module_utils import _nvidia


class FilterModule:
    def filters(self):
        return {"nvidia_driver_headers_decision": _nvidia.headers_decision}

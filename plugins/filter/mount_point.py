# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mount that holds a path."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: mount_point
short_description: The mount point that holds a path, from ansible_facts.mounts
version_added: "0.1.0"
description:
  - The longest mount point at or above the path, the file system whose free space counts for it.
options:
  _input:
    description: An absolute path.
    type: str
    required: true
  mounts:
    description: C(ansible_facts.mounts).
    type: list
    elements: dict
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Find the file system of the weights
  ansible.builtin.set_fact:
    weights_mount: "{{ '/srv/models' | pro6000.inference.mount_point(ansible_facts.mounts) }}"
"""

RETURN = r"""
_value:
  description: C(path) (normalised) and C(mountpoint).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring


def mount_point(path, mounts):
    try:
        return _monitoring.mount_point(path, mounts)
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError("mount_point: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"mount_point": mount_point}

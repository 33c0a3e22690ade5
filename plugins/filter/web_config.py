# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The web configuration (basic auth) of Prometheus's exporter-toolkit, from users and passwords."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: web_config
short_description: The exporter-toolkit web configuration that asks Prometheus's HTTP clients for a password
version_added: "0.1.0"
description:
  - The document C(--web.config.file) names for Prometheus (2.24 and later), Alertmanager (0.22 and
    later) and the exporters built on Prometheus's exporter-toolkit - C(basic_auth_users), each with
    a bcrypt hash (cost 10) of its password.
  - The salt is derived from O(site), the user and the password, so the same input renders the same
    file (a rerun changes nothing) and no two sites share a hash.
  - Needs the C(pycryptodome) Python package on the controller.
options:
  _input:
    description: User names and their passwords (1 to 72 bytes, no NUL).
    type: dict
    required: true
  site:
    description: What tells this site from others, e.g. the host's inventory name.
    type: str
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Write Prometheus's web configuration
  ansible.builtin.copy:
    content: "{{ {'pro6000': monitoring_web_password} | pro6000.inference.web_config(inventory_hostname) | to_nice_yaml }}"
    dest: /etc/prometheus/web.yml
    mode: "0640"
"""

RETURN = r"""
_value:
  description: C({basic_auth_users - {user - bcrypt hash}}).
  type: dict
"""

from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring
from ansible_collections.pro6000.inference.plugins.plugin_utils._filters import engine_filters


class FilterModule:
    def filters(self):
        return engine_filters(_monitoring.MonitoringError, web_config=_monitoring.web_config)

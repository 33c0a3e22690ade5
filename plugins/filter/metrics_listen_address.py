# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where an exporter binds, from the addresses allowed to scrape it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: metrics_listen_address
short_description: The address an exporter binds, from the addresses allowed to scrape it
version_added: "0.1.0"
description:
  - C(127.0.0.1) when every scraper is a loopback address (the monitoring host is this host),
    else C(0.0.0.0); the unit's C(IPAddressAllow=) then admits the scrapers only.
options:
  _input:
    description: Addresses or networks allowed to scrape (C(127.0.0.1), C(10.0.0.5), C(10.0.0.0/24)).
    type: list
    elements: str
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Bind the exporter where the scrapers reach it
  ansible.builtin.set_fact:
    address: "{{ ['127.0.0.1'] | pro6000.inference.metrics_listen_address }}"
"""

RETURN = r"""
_value:
  description: C(127.0.0.1) or C(0.0.0.0).
  type: str
"""

from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring
from ansible_collections.pro6000.inference.plugins.plugin_utils._filters import engine_filters


class FilterModule:
    def filters(self):
        return engine_filters(_monitoring.MonitoringError, metrics_listen_address=_monitoring.metrics_listen_address)

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where Prometheus and Alertmanager are reached, and whom they may exchange packets with."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: monitoring_exposure
short_description: Where Prometheus and Alertmanager are reached, and whom they may exchange packets with
version_added: "0.1.0"
description:
  - systemd's C(IPAddressAllow=) filters both directions of every socket of a unit, so the list a
    monitoring service admits holds its clients and also every host it reaches itself.
  - Returns C(loopback) (the listen address is a loopback one), C(local_address) (the address this
    host reaches them at, loopback for a wildcard), C(allow) (C(localhost), the listen address,
    every scraped address, the webhook's host and O(allow)) and C(names) (scraped addresses and the
    webhook's host that are names, which C(IPAddressAllow=) cannot hold).
options:
  _input:
    description: The address Prometheus and Alertmanager listen on.
    type: str
    required: true
  scrape_addresses:
    description: The addresses Prometheus scrapes the inference hosts at.
    type: list
    elements: str
    required: true
  webhook_url:
    description: Alertmanager's webhook receiver; empty for none.
    type: str
    default: ""
  allow:
    description: Further addresses or networks (clients such as Grafana, a resolver).
    type: list
    elements: str
    default: []
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Admit the clients and the scraped hosts only
  ansible.builtin.debug:
    msg: "{{ '0.0.0.0' | pro6000.inference.monitoring_exposure(['10.0.0.11'], '', ['10.0.0.0/24']) }}"
"""

RETURN = r"""
_value:
  description: C(loopback), C(local_address), C(allow) and C(names), as described above.
  type: dict
"""

from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring
from ansible_collections.pro6000.inference.plugins.plugin_utils._filters import engine_filters


class FilterModule:
    def filters(self):
        return engine_filters(_monitoring.MonitoringError, monitoring_exposure=_monitoring.monitoring_exposure)

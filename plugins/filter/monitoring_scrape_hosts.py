# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inference hosts Prometheus scrapes, with what each recorded, from the play's hostvars."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: monitoring_scrape_hosts
short_description: The inference hosts to scrape, each with its address and what it recorded
version_added: "0.1.0"
description:
  - One entry per host of O(_input), in the shape P(pro6000.inference.prometheus_scrape_configs#filter)
    takes, read from O(hostvars).
  - C(address) is the host variable C(monitoring_scrape_address), else C(ansible_host), else the host's name.
  - C(exporters) and C(service) are what roles P(pro6000.inference.metrics_exporters#role) and
    P(pro6000.inference.sglang_service#role) recorded (C(ansible_local.metrics_exporters),
    C(ansible_local.sglang_service)); empty for a host without the record (facts not gathered, or
    not deployed yet).
options:
  _input:
    description: Names of the inference hosts.
    type: list
    elements: str
    required: true
  hostvars:
    description: The play's C(hostvars).
    type: dict
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: List the inference hosts with the address and the records Prometheus scrapes them by
  ansible.builtin.set_fact:
    scraped_hosts: "{{ groups['pro6000'] | pro6000.inference.monitoring_scrape_hosts(hostvars) }}"
"""

RETURN = r"""
_value:
  description: One mapping per host with C(host), C(address), C(exporters) and C(service).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring


def monitoring_scrape_hosts(names, hostvars):
    try:
        return _monitoring.scrape_hosts(names, hostvars)
    except KeyError as exc:
        raise AnsibleFilterError("monitoring_scrape_hosts: host %s is not in the inventory" % exc) from exc


class FilterModule:
    def filters(self):
        return {"monitoring_scrape_hosts": monitoring_scrape_hosts}

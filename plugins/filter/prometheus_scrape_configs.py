# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus scrape jobs from what each inference host recorded."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: prometheus_scrape_configs
short_description: Prometheus scrape jobs from the exporters, replicas and gateway each host recorded
version_added: "0.1.0"
description:
  - One job per kind (C(node), C(dcgm), C(sglang), C(smg)) with a static target per host (per replica
    for C(sglang)), labelled C(host) (and C(replica)). Hosts come with what roles
    P(pro6000.inference.metrics_exporters#role) (C(ansible_local.metrics_exporters)) and
    P(pro6000.inference.sglang_service#role) (C(ansible_local.sglang_service)) recorded; a host without
    a record has no targets of that kind yet.
  - Recorded URLs are the host's own view (loopback); their host part is replaced by the address the
    monitoring host scrapes the host at.
options:
  _input:
    description: One entry per host with C(host), C(address), C(exporters) and C(service) (the two records, possibly empty).
    type: list
    elements: dict
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Work out what Prometheus scrapes
  ansible.builtin.set_fact:
    jobs: "{{ hosts | pro6000.inference.prometheus_scrape_configs }}"
"""

RETURN = r"""
_value:
  description: Scrape configurations, in Prometheus's C(scrape_configs) shape.
  type: list
"""

from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring
from ansible_collections.pro6000.inference.plugins.plugin_utils._filters import engine_filters


class FilterModule:
    def filters(self):
        return engine_filters(_monitoring.MonitoringError, prometheus_scrape_configs=_monitoring.prometheus_scrape_configs)

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last smoke result as node exporter textfile metrics."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: smoke_textfile
short_description: The last smoke benchmark result as Prometheus metrics for node exporter's textfile collector
version_added: "0.1.0"
description:
  - Turns the result document of M(pro6000.inference.sglang_bench) into gauges
    C(pro6000_smoke_decode_tps), C(pro6000_smoke_output_tps), C(pro6000_smoke_acceptance_length), each with
    C(_floor) when its gate had a floor above 0, C(pro6000_smoke_concurrency), C(pro6000_smoke_passed) and
    C(pro6000_smoke_timestamp_seconds), so that alert rules compare live figures with the deploy-time floors.
  - With O(weights_mount), also C(pro6000_smoke_weights_directory_info{path, mountpoint}) = 1, which
    tells the free-space alert which file system holds the weights.
options:
  _input:
    description: The benchmark document (the JSON file sglang_bench wrote); empty writes no smoke metrics.
    type: dict
    required: true
  weights_mount:
    description: C(path) and C(mountpoint) of the weights directory (the mount point as C(findmnt --target) finds it).
    type: dict
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Write the smoke result as metrics
  ansible.builtin.copy:
    content: "{{ bench | pro6000.inference.smoke_textfile }}"
    dest: /var/lib/prometheus/node-exporter/pro6000_smoke.prom
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The textfile (Prometheus text format), empty when there is nothing to write.
  type: str
"""

from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring
from ansible_collections.pro6000.inference.plugins.plugin_utils._filters import engine_filters


class FilterModule:
    def filters(self):
        return engine_filters(_monitoring.MonitoringError, smoke_textfile=_monitoring.smoke_textfile)

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rules, in the idiom of every role, for variables that end up in units, defaults files and
command lines: one definition (module_utils/_inputs.py) that the renderers apply too."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: input_rules
short_description: One rule per variable for what units, defaults files and command lines can carry
version_added: "0.1.0"
description:
  - For each variable of O(_input), whether its value is of its kind, as the mapping the roles
    pass to M(pro6000.inference.host_state)'s O(pro6000.inference.host_state#module:rules)
    (C(name), C(value), C(rule), C(why)).
  - The same checks refuse such values in the filters that render the units'
    command lines (P(pro6000.inference.sglang_speculative_plan#filter),
    P(pro6000.inference.sglang_replica_plan#filter), P(pro6000.inference.sglang_gateway_argv#filter)).
options:
  _input:
    description:
      - Kind to a mapping of variable names to their values. The kinds are
        V(single_line) no newline or other control character in the value (a list's items, a
        mapping's keys and values); V(args_words) each word fits a defaults file's quoted C(ARGS);
        V(port) 1 to 65535; V(unit_name) a plain systemd unit name; V(duration) a Prometheus
        duration; V(gpus) GPU positions or UUIDs; V(positive) an integer of at least 1.
    type: dict
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Check the ports before anything changes
  pro6000.inference.host_state:
    rules: "{{ {'port': {'monitoring_prometheus_port': monitoring_prometheus_port}} | pro6000.inference.input_rules }}"
"""

RETURN = r"""
_value:
  description: One mapping per variable, C(name), C(value), C(rule) (whether it holds) and C(why).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.pro6000.inference.plugins.module_utils._inputs import KINDS


def input_rules(inputs):
    unknown = sorted(set(inputs) - set(KINDS)) if isinstance(inputs, dict) else [repr(inputs)]
    if unknown or not all(isinstance(values, dict) for values in inputs.values()):
        raise AnsibleFilterError("input_rules: takes kinds (%s) to mappings of variables to values, got %s"
                                 % (", ".join(sorted(KINDS)), ", ".join(unknown) or inputs))
    return [{"name": name, "value": value, "rule": KINDS[kind][0](value), "why": KINDS[kind][1]}
            for kind, values in inputs.items() for name, value in values.items()]


class FilterModule:
    def filters(self):
        return {"input_rules": input_rules}

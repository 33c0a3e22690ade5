# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sglang_argv command line plus what it serves (the same function, whole result)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_speculative_plan
short_description: The sglang_argv command line plus the algorithm it serves and any fallback
version_added: 0.1.0
description:
- Takes the same input and arguments as P(pro6000.inference.sglang_argv#filter) and applies the same checks.
- Returns the command line together with the speculative algorithm actually rendered, so a play can report
  a DDTree to DFLASH fallback instead of hiding it.
positional: sglang, drafter
options:
  _input:
    description: The wanted serving config, as for P(pro6000.inference.sglang_argv#filter).
    type: dict
    required: true
  sglang:
    description: The C(sglang) local fact (C(options), C(choices), C(speculative_algorithms), C(ddtree),
      C(version)).
    type: dict
    required: true
  drafter:
    description: The drafter entry of the C(model_weights) fact.
    type: dict
author:
- pro6000.inference developers (@pro6000)
"""

EXAMPLES = r"""
- name: Render the command line and learn whether DDTree fell back
  ansible.builtin.set_fact:
    __sglang_service_plan: >-
      {{ __sglang_service_wanted
         | pro6000.inference.sglang_speculative_plan(ansible_local.sglang,
             drafter=ansible_local.model_weights.models.drafter) }}

- name: Report the fallback
  ansible.builtin.debug:
    msg: "{{ __sglang_service_plan.note }}"
  when: __sglang_service_plan.fallback
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    argv:
      description: Arguments for C(python -m sglang.launch_server).
      type: list
      elements: str
    algorithm:
      description: What is served, C(ddtree), C(dflash) or C(none).
      type: str
    fallback:
      description: True when DDTree was wanted and DFLASH is served instead.
      type: bool
    note:
      description: Says why a fallback happened; null otherwise.
      type: str
"""

from ansible_collections.pro6000.inference.plugins.filter.sglang_argv import sglang_speculative_plan


class FilterModule(object):
    def filters(self):
        return {"sglang_speculative_plan": sglang_speculative_plan}

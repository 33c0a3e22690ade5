# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which of playbooks/tune.yml's configurations the installed build can serve."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: tune_sweep
short_description: The speculative configurations a build can serve, for playbooks/tune.yml
version_added: "0.1.0"
description:
  - Marks each DDTree configuration with C(skipped) and the reason where the build has no DDTree
    (a release; DDTree is only in the build of SGLang pull request 29907 or a fork), so that
    C(playbooks/tune.yml) compares DDTree with DFLASH only where a DDTree build is installed.
  - Marks each DDTree configuration whose C(ddtree_budget) the build cannot serve with
    C(skipped) and the reason, so that C(playbooks/tune.yml) sweeps budgets above the draft
    length - 1 only where the build allows it. What a build serves is decided by
    P(pro6000.inference.sglang_speculative_plan#filter) (its C(ddtree_budgets)) from the
    C(sglang) fact, the same rule the service role applies.
options:
  _input:
    description: The configurations, each with C(name), C(algorithm), and C(draft_length) and C(ddtree_budget) where set.
    type: list
    elements: dict
    required: true
  sglang:
    description: The C(sglang) local fact of the build.
    type: dict
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Keep what this build serves
  ansible.builtin.set_fact:
    configs: "{{ tune_configs | pro6000.inference.tune_sweep(ansible_facts['ansible_local']['sglang']) }}"
"""

RETURN = r"""
_value:
  description: The configurations in the same order, those the build cannot serve with C(skipped) (a reason).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.pro6000.inference.plugins.filter.sglang_speculative_plan import ddtree_budgets


def tune_sweep(configs, sglang):
    """The configurations to try on this build: each DDTree one is marked C(skipped) with the
    reason where the build has no DDTree, or where it cannot serve its budget (outside its
    limits, or other than draft length - 1 on the fork, which has no budget option), so the
    sweep compares DDTree only on a DDTree build and goes above draft length - 1 only where the
    build allows it."""
    if not isinstance(configs, list):
        raise AnsibleFilterError("tune_sweep: the configurations must be a list, got %s" % type(configs).__name__)
    sglang = sglang or {}
    swept = []
    for config in configs:
        budget = config.get("ddtree_budget")
        if config.get("algorithm") == "ddtree" and not sglang.get("ddtree"):
            config = dict(config, skipped="SGLang %s has no DDTree (it offers %s): DDTree is compared only on a "
                          "build that has it, such as pull request 29907's" % (
                              sglang.get("version"), ", ".join(sglang.get("speculative_algorithms") or []) or "none"))
        elif config.get("algorithm") == "ddtree" and budget:
            default, low, high = ddtree_budgets(sglang, int(config.get("draft_length") or 16))
            if not low <= int(budget) <= high:
                config = dict(config, skipped="SGLang %s serves DDTree budgets %s for draft length %s, not %s" % (
                    sglang.get("version"), low if low == high else "%d to %d" % (low, high),
                    config.get("draft_length") or 16, budget))
        swept.append(config)
    return swept


class FilterModule:
    def filters(self):
        return {"tune_sweep": tune_sweep}

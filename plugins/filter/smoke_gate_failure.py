# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The smoke result of a gate that failed: what role smoke writes to smoke_result_path before the
host fails, so that the monitoring sees the failure (pro6000_smoke_passed 0) at once."""

from __future__ import annotations

DOCUMENTATION = r"""
name: smoke_gate_failure
short_description: The smoke result document of a failed smoke gate
version_added: 0.1.0
description:
  - Where the host's benchmark itself failed, its own document (M(pro6000.inference.sglang_bench)
    wrote it to the result file already, gates and figures included) is returned as it is.
  - Where the gate failed elsewhere (the probe, a replica's benchmark, the gateway's routing),
    the host's benchmark document of this run when it ran and passed (its figures and floors
    stand, as measured), else a document without figures, with one more gate
    C(failed_task) that failed, naming the task and its message. Filter
    P(pro6000.inference.smoke_textfile#filter) then writes C(pro6000_smoke_passed 0).
options:
  _input:
    description: The failed task's result (C(ansible_failed_result) in a C(rescue)).
    type: dict
    required: true
  task:
    description: The failed task's name.
    type: str
    required: true
  measured:
    description: The host's benchmark document of this run, empty when the host was not benchmarked.
    type: dict
    default: {}
  at:
    description: When the gate failed (ISO 8601), the document's C(finished_at).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Write the failed gate as the host's smoke result
  ansible.builtin.copy:
    content: >-
      {{ ansible_failed_result | pro6000.inference.smoke_gate_failure(ansible_failed_task.name,
         smoke_bench.result | default({}), now(utc=true).isoformat()) | to_nice_json }}
    dest: /var/lib/pro6000/smoke/bench.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: A result document as M(pro6000.inference.sglang_bench) writes it, with C(passed) false.
  type: dict
"""

import copy

from ansible.errors import AnsibleFilterError


def _message(failed):
    """The failure's message; for a loop, each failed item's, by the item's name."""
    items = [item for item in failed.get("results") or [] if isinstance(item, dict) and item.get("failed")]
    if items:
        return "; ".join("%s: %s" % ((item.get("item") or {}).get("name", "item") if isinstance(item.get("item"), dict)
                                     else item.get("item"), item.get("msg", "failed")) for item in items)
    return str(failed.get("msg") or "failed")


def smoke_gate_failure(failed, task, measured=None, at=None):
    if not isinstance(failed, dict):
        raise AnsibleFilterError("smoke_gate_failure: the failed result must be a dictionary, got %r" % (failed,))
    if not at:
        raise AnsibleFilterError("smoke_gate_failure: at (when the gate failed) is required")
    own = failed.get("result")
    if isinstance(own, dict) and isinstance(own.get("gates"), list) and own.get("passed") is False:
        return own
    document = copy.deepcopy(measured) if isinstance(measured, dict) and measured.get("gates") else {"gates": []}
    document.setdefault("started_at", at)
    document["finished_at"] = at
    document["gates"].append({"name": "failed_task", "value": str(task), "floor": None, "passed": False,
                              "detail": _message(failed)})
    document["passed"] = False
    return document


class FilterModule(object):
    def filters(self):
        return {"smoke_gate_failure": smoke_gate_failure}

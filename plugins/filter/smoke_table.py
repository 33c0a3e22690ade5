# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The smoke gate's table: one row per replica and one for the host (the gateway, or the only
server), with each gate's verdict, and the requests each replica took from the gateway."""

from __future__ import annotations

DOCUMENTATION = r"""
name: smoke_table
short_description: The smoke gate's table of every replica and the host, and the replicas the gateway left idle
version_added: 0.1.0
description:
  - Turns the results of M(pro6000.inference.sglang_bench) for each replica and for the host,
    and each replica's C(/metrics) read before and after the host's benchmark, into the lines
    role C(smoke) prints and the replicas whose own C(sglang:num_requests_total) did not grow
    while the gateway was benchmarked.
options:
  _input:
    description: >-
      The registered loop results of the per-replica benchmarks (each with C(item) and C(result));
      empty when the replicas were not benchmarked alone (their rows then show only the requests
      each took from the gateway).
    type: list
    elements: dict
    required: true
  host:
    description: The C(result) of the host's benchmark (through the gateway, or of the only server).
    type: dict
    required: true
  before:
    description: The registered loop results of reading each replica's C(metrics_url) before the host's benchmark.
    type: list
    elements: dict
    default: []
  after:
    description: The same, read after it.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Tabulate
  ansible.builtin.set_fact:
    report: "{{ benches.results | pro6000.inference.smoke_table(smoke_bench.result, before.results, after.results) }}"
"""

RETURN = r"""
_value:
  description: C(lines) (the table), C(taken) (replica name to requests taken from the gateway), C(idle) (names that took none).
  type: dict
"""

import re

ROW = "%-16s %12s %12s %12s %10s  %s"
COUNTER = re.compile(r"^sglang:num_requests_total(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


def requests_total(metrics):
    """Sum of sglang:num_requests_total over its label sets; None when the server has none."""
    found = COUNTER.findall(metrics or "")
    return sum(float(value) for value in found) if found else None


def _figures(result):
    levels = result.get("levels") or []
    single = (levels[0].get("decode_tps") or {}).get("p50") if levels else None
    many = levels[-1] if levels else {}
    acceptance = (result.get("acceptance") or {}).get("value")
    return single, many.get("output_tps"), many.get("concurrency"), acceptance


def _number(value, form="%.1f"):
    return form % value if isinstance(value, (int, float)) else "n/a"


def _verdicts(result):
    failed = [gate["name"] for gate in result.get("gates") or [] if gate.get("passed") is False]
    return "FAILED " + ", ".join(failed) if failed else "ok"


def smoke_table(replicas, host, before=None, after=None):
    before = dict((r["item"]["name"], requests_total(r.get("content"))) for r in before or [])
    taken = {}
    for read in after or []:
        name, now = read["item"]["name"], requests_total(read.get("content"))
        if now is not None and before.get(name) is not None:
            taken[name] = int(now - before[name])
    lines = [ROW % ("server", "tok/s c=1", "tok/s c=N", "N", "accept", "verdict / requests from gateway")]
    for bench in replicas:
        single, many, concurrency, acceptance = _figures(bench.get("result") or {})
        name = bench["item"]["name"]
        lines.append(ROW % (name, _number(single), _number(many, "%.0f"), concurrency or "", _number(acceptance, "%.2f"),
                            "%s / %s" % (_verdicts(bench.get("result") or {}), taken.get(name, "n/a"))))
    # Replicas counted but not benchmarked alone (role smoke's smoke_bench_replicas: false).
    benched = set(bench["item"]["name"] for bench in replicas)
    for read in after or []:
        name = read["item"]["name"]
        if name not in benched:
            lines.append(ROW % (name, "n/a", "n/a", "", "n/a", "not measured alone / %s" % taken.get(name, "n/a")))
    single, many, concurrency, acceptance = _figures(host)
    lines.append(ROW % ("gateway" if replicas or after else "server", _number(single), _number(many, "%.0f"), concurrency or "",
                        _number(acceptance, "%.2f"), _verdicts(host)))
    for gate in host.get("gates") or []:
        value = gate.get("value")
        lines.append("  gate %-22s %10s %10s  %s" % (
            gate["name"], _number(value) if isinstance(value, float) else value, gate.get("floor"),
            "recorded" if gate.get("passed") is None else "ok" if gate["passed"] else "FAILED"))
    return {"lines": lines, "taken": taken, "idle": sorted(name for name, count in taken.items() if count <= 0)}


class FilterModule(object):
    def filters(self):
        return {"smoke_table": smoke_table}

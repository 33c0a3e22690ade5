# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ranks the speculative configurations that playbooks/tune.yml measured."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: tune_table
short_description: Rank benchmarked speculative configurations
version_added: "0.1.0"
description:
  - Takes the configurations that C(playbooks/tune.yml) tried, each with the result of
    M(pro6000.inference.sglang_bench) under C(bench) or the failure under C(error), and ranks
    those whose benchmark passed by a metric.
  - Speedups are relative to the configuration with algorithm C(none), when it was measured.
  - "Goodput (requests meeting every latency objective, per second) is shown at the design
    concurrency and, when the benchmarks ran open-loop levels (Poisson arrivals at given
    request rates), at each rate: one column per rate, C(goodput_open) in each row (a list of
    C(request_rate), C(goodput), C(request_throughput))."
options:
  _input:
    description: Configurations as tried, each with C(name), C(algorithm) and C(bench) or C(error).
    type: list
    elements: dict
    required: true
  metric:
    description:
      - C(decode_tps_c1) ranks by the median single-stream decode speed, what speculative
        decoding is for; C(output_tps_cn) by the aggregate output at the design concurrency.
    type: str
    default: decode_tps_c1
    choices: [decode_tps_c1, output_tps_cn]
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Rank what tune.yml measured
  ansible.builtin.set_fact:
    table: "{{ results | pro6000.inference.tune_table }}"
"""

RETURN = r"""
_value:
  description:
    - C(rows) (one per configuration, best first, failed ones last), C(best) (the winning
      configuration as given), C(metric) and C(lines) (a printable table).
  type: dict
"""

from ansible.errors import AnsibleFilterError

CONFIG_KEYS = ("name", "algorithm", "draft_length", "ddtree_budget", "thinking")
# sglang_bench's latency objectives (max_ttft_p99_s, max_tpot_p99_s, max_e2e_p99_s).
LATENCY_GATES = ("ttft_p99_s", "tpot_p99_s", "e2e_p99_s")


def _level(bench, phase):
    for level in bench.get("levels", []):
        if level.get("phase") == phase:
            return level
    return {}


def _row(config):
    row = dict((key, config[key]) for key in CONFIG_KEYS if key in config)
    bench = config.get("bench")
    if not bench:
        row["error"] = config.get("error", "not measured")
        return row
    single = _level(bench, "concurrency_1")
    many = _level(bench, "concurrency_n")
    row["decode_tps_c1"] = (single.get("decode_tps") or {}).get("p50")
    row["output_tps_cn"] = many.get("output_tps")
    row["concurrency"] = many.get("concurrency")
    row["acceptance_length"] = (bench.get("acceptance") or {}).get("value")
    row["goodput_cn"] = many.get("goodput")
    row["goodput_open"] = [{"request_rate": level.get("request_rate"), "goodput": level.get("goodput"),
                            "request_throughput": level.get("request_throughput")}
                           for level in bench.get("open_loop") or []]
    # A configuration that misses a latency objective is still measured: its goodput says how
    # far; only the other gates make it a failure.
    if not bench.get("passed", False):
        failed = [gate["name"] for gate in bench.get("gates", []) if not gate.get("passed")]
        others = [name for name in failed if name not in LATENCY_GATES]
        if others or not failed:
            row["error"] = "benchmark gates failed: %s" % ", ".join(others)
    return row


def _fmt(value, pattern="%.1f"):
    return "-" if value is None else pattern % value


def tune_table(configs, metric="decode_tps_c1"):
    if metric not in ("decode_tps_c1", "output_tps_cn"):
        raise AnsibleFilterError("tune_table: metric must be decode_tps_c1 or output_tps_cn, got %r" % metric)
    rows = [_row(config) for config in configs]
    served = sorted((row for row in rows if "error" not in row and row.get(metric) is not None),
                    key=lambda row: row[metric], reverse=True)
    if not served:
        raise AnsibleFilterError("tune_table: no configuration served and passed its benchmark: %s"
                                 % "; ".join("%s: %s" % (row.get("name"), row.get("error")) for row in rows))
    baseline = next((row for row in served if row.get("algorithm") == "none"), None)
    for row in served:
        row["speedup"] = round(row[metric] / baseline[metric], 3) if baseline and baseline[metric] else None
    failed = [row for row in rows if row not in served]
    ordered = served + failed
    best_name = served[0]["name"]
    # The open-loop rates, in the order the benchmarks ran them (the same for every configuration).
    rates = []
    for row in rows:
        for level in row.get("goodput_open") or []:
            if level["request_rate"] not in rates:
                rates.append(level["request_rate"])
    row_format = "%-16s %12s %14s %10s %8s %10s" + " %12s" * len(rates) + "  %s"
    lines = [row_format % (("config", "decode tok/s", "output tok/s@N", "accept", "speedup", "goodput@N")
                           + tuple("goodput@%g/s" % rate for rate in rates) + ("",))]
    for row in ordered:
        open_loop = dict((level["request_rate"], level["goodput"]) for level in row.get("goodput_open") or [])
        lines.append(row_format % ((
            row.get("name"), _fmt(row.get("decode_tps_c1")), _fmt(row.get("output_tps_cn")),
            _fmt(row.get("acceptance_length"), "%.2f"), _fmt(row.get("speedup"), "%.2fx"),
            _fmt(row.get("goodput_cn"), "%.2f/s"))
            + tuple(_fmt(open_loop.get(rate), "%.2f/s") for rate in rates)
            + ("<- best" if row["name"] == best_name else row.get("error", ""),)))
    return {
        "metric": metric,
        "rows": ordered,
        "best": next(config for config in configs if config.get("name") == best_name),
        "lines": lines,
    }


class FilterModule:
    def filters(self):
        return {"tune_table": tune_table}

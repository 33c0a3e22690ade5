# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a benchmark reports and gates on: percentiles, TPOT, the serving figures of a level,
the per-request records, and the gates with their floors.
"""

from __future__ import annotations

import time


def summarise(values):
    """min, p50, p90, p95, p99, max and mean of a list of numbers (None when empty)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    last = len(values) - 1

    def pick(q):
        # Linear interpolation between closest ranks, as numpy's default percentile.
        pos = q * last
        low = int(pos)
        high = min(low + 1, last)
        return values[low] + (values[high] - values[low]) * (pos - low)

    return {
        "count": len(values),
        "min": values[0],
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "max": values[-1],
        "mean": sum(values) / len(values),
    }


def decode_method(results):
    """How the decode speeds of ``results`` got their first event's token count."""
    methods = set(r.decode_method for r in results if r.decode_tps is not None)
    return methods.pop() if len(methods) == 1 else ("mixed" if methods else None)


def level_summary(phase, concurrency, results, wall, max_tokens, objectives=(None, None, None)):
    """One concurrency level of the result document."""
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    out_tokens = sum(r.n_out for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    errors = []
    for r in failed:
        if r.error not in errors:
            errors.append(r.error)
    return dict({
        "phase": phase,
        "concurrency": concurrency,
        "requests": len(results),
        "successes": len(ok),
        "failures": len(failed),
        "errors": errors[:5],
        "wall_s": round(wall, 4),
        "output_tokens": out_tokens,
        "output_tps": out_tokens / wall if wall > 0 else None,
        "total_tps": (out_tokens + prompt_tokens) / wall if wall > 0 else None,
        "achieved_concurrency": sum(r.e2e for r in results) / wall if wall > 0 else None,
        "ttft_s": summarise(r.ttft for r in ok),
        "decode_tps": summarise(r.decode_tps for r in ok),
        "tokens_per_chunk": summarise(r.tokens_per_chunk for r in ok),
        "decode_method": decode_method(ok),
        "length_mismatches": [r.n_out for r in ok if r.n_out != max_tokens],
    }, **serving_figures(ok, wall, objectives))


def tpot(result):
    """Time per output token after the first: (e2e - ttft) / (n_out - 1), as SGLang's
    bench_serving computes it (python/sglang/bench_serving.py, calculate_metrics)."""
    if result.ttft is None or not result.n_out or result.n_out < 2:
        return None
    return (result.e2e - result.ttft) / (result.n_out - 1)


def meets_objectives(result, objectives):
    """Whether one request meets every objective set (TTFT, TPOT, E2E ceilings in seconds), as
    vLLM's benchmark_serving --goodput judges a request (vllm/benchmarks/serve.py,
    calculate_metrics: every configured SLO >= the request's figure; TPOT of a one-token request
    counts as 0)."""
    max_ttft, max_tpot, max_e2e = objectives
    return ((max_ttft is None or result.ttft <= max_ttft)
            and (max_tpot is None or (tpot(result) or 0.0) <= max_tpot)
            and (max_e2e is None or result.e2e <= max_e2e))


def serving_figures(ok, wall, objectives=(None, None, None)):
    """The latency distributions and request rate of a level's successful requests, and its
    goodput when an objective is set: requests meeting every objective set (O(max_ttft_p99_s),
    O(max_tpot_p99_s), O(max_e2e_p99_s)), per second of the level's wall time."""
    goodput = None
    if wall > 0 and any(objective is not None for objective in objectives):
        goodput = sum(1 for r in ok if meets_objectives(r, objectives)) / wall
    token_gaps = [r.itl_token_gaps() for r in ok]
    return {
        "tpot_s": summarise(tpot(r) for r in ok),
        "itl_s": summarise(gap for r in ok for gap in r.itl_gaps()),
        "itl_token_s": summarise(gap for gaps in token_gaps for gap in gaps)
        if ok and all(gaps is not None for gaps in token_gaps) else None,
        "e2e_s": summarise(r.e2e for r in ok),
        "request_throughput": len(ok) / wall if wall > 0 else None,
        "goodput": goodput,
    }


def request_records(phase, concurrency, results):
    """One record per request of a level, for O(records_path)."""
    return [{"phase": phase, "concurrency": concurrency, "ok": r.ok, "error": r.error,
             "ttft_s": r.ttft, "tpot_s": tpot(r) if r.ok else None, "e2e_s": r.e2e if r.t_end else None,
             "output_tokens": r.n_out, "prompt_tokens": r.prompt_tokens,
             "decode_tps": r.decode_tps if r.ok else None} for r in results]


def latency_gates(level, params):
    """The latency objectives that are set, judged on the design-concurrency level; the
    figures themselves are in the level either way."""
    found = []
    for name, key, option in (("ttft_p99_s", "ttft_s", "max_ttft_p99_s"), ("tpot_p99_s", "tpot_s", "max_tpot_p99_s"),
                              ("e2e_p99_s", "e2e_s", "max_e2e_p99_s")):
        ceiling = params[option]
        if ceiling is not None:
            value = (level.get(key) or {}).get("p99")
            found.append(gate(name, value, ceiling, value is not None and value <= ceiling,
                              "p99 %s in seconds at concurrency %d, at most the objective"
                              % (key[:-2].upper(), level["concurrency"])))
    return found


def gate(name, value, floor, passed, detail):
    return {"name": name, "value": value, "floor": floor, "passed": passed, "detail": detail}


def floor_gate(name, value, floor, detail):
    if floor is None:
        return gate(name, value, None, None, detail + "; no floor set, recorded only")
    return gate(name, value, floor, value is not None and value >= floor, detail)


def finish(result, started):
    result["duration_s"] = round(time.perf_counter() - started, 3)
    result["passed"] = all(g["passed"] is not False for g in result["gates"])
    return result


def failure_message(result):
    failed = [g for g in result["gates"] if g["passed"] is False]
    return "sglang_bench failed %d gate(s): %s" % (len(failed), "; ".join(
        "%s: value %s, floor %s (%s)" % (g["name"], _fmt(g["value"]), _fmt(g["floor"]), g["detail"]) for g in failed))


def _fmt(value):
    return "%.3f" % value if isinstance(value, float) else str(value)

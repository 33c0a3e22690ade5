"""Accuracy of sglang_bench: measured vs true decode tok/s, output tok/s and acceptance length.

Runs sglang_bench's own measurement code (``run_benchmark``) against the SGLang test double,
whose timing model makes the true figures known in advance (see the double's README):
per-stream rate = tokens per verify step / (STEP_S + TOKEN_S x W), and a request of n tokens
in S steps takes PREFILL_S + S x step. Cases: per-stream 30, 150 and 600 tok/s, each with
acceptance length 1 (DFLASH accepting 1 token per step), 6.5 (DFLASH cycling 6,7) and 11
(DDTree accepting 11). max_tokens is a multiple of 143 = 11 x 13, a whole number of accept
cycles in every case, so no request ends on a capped step; at 600 tok/s it is 4 x 143 so that
a request lasts about a second: the timing model leaves out the HTTP handling of client and
double (a few ms per request, measured here), which a 0.3 s request cannot hide within 2 %.

Done when every output tok/s is within 2 % of the true value and every acceptance length
within 0.05. Prints one row per case; exits 1 when a case misses.

    python tests/benchmarks/bench_accuracy.py
"""
import sys

from _double import running_double

from ansible_collections.pro6000.inference.plugins.modules.sglang_bench import run_benchmark

ACCEPT_CYCLE_LCM = 143
CONCURRENCY = 8
PREFILL_S = 0.05
TOKEN_S = 0.00005
BLOCK_SIZE = 16
# (label, algorithm, accept cycle env, cycle, verify width W)
ACCEPTANCE = (
    ("1", "DFLASH", "SGLANG_DOUBLE_ACCEPT_DFLASH", (1,), BLOCK_SIZE),
    ("6.5", "DFLASH", "SGLANG_DOUBLE_ACCEPT_DFLASH", (6, 7), BLOCK_SIZE),
    ("11", "DDTREE", "SGLANG_DOUBLE_ACCEPT_DDTREE", (11,), BLOCK_SIZE),  # budget 15 -> W = 16
)
RATES = (30.0, 150.0, 600.0)


def max_tokens_for(rate):
    return ACCEPT_CYCLE_LCM * max(1, int(rate // 150))


def case(rate, label, algorithm, cycle_env, cycle, width):
    accept = sum(cycle) / float(len(cycle))
    step_s = accept / rate
    max_tokens = max_tokens_for(rate)
    steps = max_tokens / accept
    env = {"SGLANG_DOUBLE_PREFILL_S": PREFILL_S, "SGLANG_DOUBLE_TOKEN_S": TOKEN_S,
           "SGLANG_DOUBLE_STEP_S": "%.9f" % (step_s - TOKEN_S * width),
           cycle_env: ",".join(str(c) for c in cycle)}
    params = {
        "model": None, "timeout": 120, "request_timeout": 30, "concurrency": CONCURRENCY,
        "requests_per_worker": 1, "single_stream_requests": 2, "warmup_requests": 1,
        "max_tokens": max_tokens, "acceptance_requests": 4, "acceptance_max_tokens": max_tokens,
        "acceptance_ignore_eos": True, "expect_speculation": True, "min_decode_tps": None,
        "min_output_tps": None, "min_acceptance_length": None, "flush_cache": True,
    }
    with running_double(algorithm, env) as (client, _pid):
        result = run_benchmark(client, params)
    c1, cn = result["levels"]
    true_output = CONCURRENCY * max_tokens / (PREFILL_S + steps * step_s)
    return {
        "case": "%4.0f tok/s, accept %-4s n=%d" % (rate, label, max_tokens),
        "decode": (c1["decode_tps"]["p50"], rate),
        "output": (cn["output_tps"], true_output),
        "acceptance": (result["acceptance"]["value"], accept),
        "achieved": cn["achieved_concurrency"],
        "passed": result["passed"],
        "counts": c1["token_counts"],
    }


def main():
    print("sglang_bench accuracy against the SGLang double (N=%d, prefill %.2f s, block 16, W=16)"
          % (CONCURRENCY, PREFILL_S))
    print("%-30s | %-27s | %-29s | %-21s | %s" % (
        "case", "decode tok/s c=1 meas/true", "output tok/s c=%d meas/true" % CONCURRENCY,
        "acceptance meas/true", "verdict"))
    misses = 0
    for rate in RATES:
        for row in ACCEPTANCE:
            figures = case(rate, *row)
            errors = []
            for name in ("decode", "output"):
                measured, true = figures[name]
                if abs(measured / true - 1) > 0.02:
                    errors.append(name)
            measured, true = figures["acceptance"]
            if measured is None or abs(measured - true) > 0.05:
                errors.append("acceptance")
            if not figures["passed"]:
                errors.append("gates")
            misses += bool(errors)
            print("%-30s | %8.2f / %8.2f (%+5.2f%%) | %8.1f / %8.1f (%+5.2f%%) | %6.3f / %5.2f (%+.3f) | %s" % (
                figures["case"],
                figures["decode"][0], figures["decode"][1], 100 * (figures["decode"][0] / figures["decode"][1] - 1),
                figures["output"][0], figures["output"][1], 100 * (figures["output"][0] / figures["output"][1] - 1),
                measured, true, measured - true,
                "ok" if not errors else "MISS: " + ", ".join(errors)))
            sys.stdout.flush()
    print("all cases within 2 % (tok/s) and 0.05 (acceptance)" if not misses else "%d case(s) missed" % misses)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())

"""Client capacity of sglang_bench: how many streams and streamed tokens/s one core sustains.

Pins this process (the client: sglang_bench's own request engine and parser) to one core
and the SGLang test double to another, then drives the double at concurrency 1 to 64 and at
increasing per-stream rates, until a level misses: achieved concurrency (sum of e2e / wall)
at most 0.95 N, or measured output tok/s below 95 % of what the double's timing model
delivers. For each level it prints both processes' CPU use, so the limiting side shows.
Two sweeps: 16 tokens per SSE event (speculative decoding, block 16 fully accepted) and
1 token per event (no speculation: the most events per token, the hardest case for a client).

Target: >= 64 concurrent streams and >= 20,000 streamed tokens/s with achieved concurrency
above 0.95 N.

    python tests/benchmarks/bench_client_capacity.py
"""
import os
import sys
import time

from _double import cpu_seconds, running_double

from ansible_collections.pro6000.inference.plugins.modules.sglang_bench import Deadline, stream_level

CLIENT_CPU, DOUBLE_CPU = 0, 1
LEVELS = (1, 8, 16, 32, 64)
PREFILL_S = 0.01
REQUEST_S = 1.5  # about how long each request streams
# (label, algorithm, env of the accept cycle, tokens per event, per-stream rates tok/s)
SWEEPS = (
    ("16 tokens/event", "DFLASH", {"SGLANG_DOUBLE_ACCEPT_DFLASH": "16"}, 16,
     (100, 200, 400, 800, 1600, 3200, 6400, 12800)),
    ("1 token/event", None, {}, 1, (50, 100, 200, 400, 800, 1600, 3200)),
)


def level(client, pid, workers, max_tokens, true_request_s):
    deadline = Deadline(120)
    cpu_client, cpu_double, start = time.process_time(), cpu_seconds(pid), time.perf_counter()
    results, wall = stream_level(client, "capacity", workers, 1, max_tokens, deadline, 30)
    elapsed = time.perf_counter() - start
    client_cpu = (time.process_time() - cpu_client) / elapsed
    double_cpu = (cpu_seconds(pid) - cpu_double) / elapsed
    ok = [r for r in results if r.ok]
    tokens = sum(r.n_out for r in ok)
    measured = tokens / wall
    true = workers * max_tokens / true_request_s
    achieved = sum(r.e2e for r in results) / wall
    return {
        "failures": len(results) - len(ok), "measured": measured, "true": true, "achieved": achieved,
        "events": sum(r.content_chunks for r in ok) / wall, "client_cpu": client_cpu,
        "double_cpu": double_cpu,
        "missed": len(ok) < len(results) or achieved <= 0.95 * workers or measured < 0.95 * true,
    }


def main():
    if len(os.sched_getaffinity(0)) < 2:
        print("needs two cores (client on one, double on the other)")
        return 2
    os.sched_setaffinity(0, {CLIENT_CPU})
    print("client pinned to CPU %d, double to CPU %d; a level misses when achieved concurrency <= 0.95 N"
          " or tok/s < 95 %% of the timing model" % (CLIENT_CPU, DOUBLE_CPU))
    best = None
    for label, algorithm, cycle_env, per_event, rates in SWEEPS:
        print("\n== %s ==" % label)
        print("%9s %3s | %10s %10s %6s | %8s %8s | %6s %6s | %s" % (
            "tok/s/str", "N", "true tok/s", "meas tok/s", "ratio", "achieved", "events/s", "client", "double",
            "verdict"))
        for rate in rates:
            step_s = per_event / float(rate)
            max_tokens = per_event * max(1, int(round(REQUEST_S * rate / per_event)))
            true_request_s = PREFILL_S + (max_tokens / per_event) * step_s
            env = dict(cycle_env, SGLANG_DOUBLE_PREFILL_S=PREFILL_S, SGLANG_DOUBLE_TOKEN_S=0,
                       SGLANG_DOUBLE_STEP_S="%.9f" % step_s)
            with running_double(algorithm, env, cpu=DOUBLE_CPU) as (client, pid):
                for workers in LEVELS:
                    figures = level(client, pid, workers, max_tokens, true_request_s)
                    if figures["missed"]:
                        limiter = "client" if figures["client_cpu"] >= figures["double_cpu"] else "double"
                        verdict = "MISS (limited by the %s: %.0f %% CPU)" % (
                            limiter, 100 * max(figures["client_cpu"], figures["double_cpu"]))
                        if figures["failures"]:
                            verdict += ", %d failed" % figures["failures"]
                    else:
                        verdict = "ok"
                        if workers == 64 and (best is None or figures["measured"] > best[1]):
                            best = (label, figures["measured"], figures["achieved"])
                    print("%9d %3d | %10.0f %10.0f %6.3f | %8.2f %8.0f | %5.0f%% %5.0f%% | %s" % (
                        rate, workers, figures["true"], figures["measured"], figures["measured"] / figures["true"],
                        figures["achieved"], figures["events"], 100 * figures["client_cpu"],
                        100 * figures["double_cpu"], verdict))
                    sys.stdout.flush()
                    if figures["missed"]:
                        break
            if figures["missed"]:
                break
    if best:
        print("\nbest level passing at N=64: %.0f streamed tok/s (%s), achieved concurrency %.2f; target "
              ">= 20000 tok/s: %s" % (best[1], best[0], best[2], "met" if best[1] >= 20000 else "NOT met"))
    else:
        print("\nno level passed at N=64")
    return 0 if best and best[1] >= 20000 else 1


if __name__ == "__main__":
    sys.exit(main())

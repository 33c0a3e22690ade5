"""Accuracy of sglang_bench, run as users run it (ansible-playbook), against the SGLang double.

The double streams as SGLang does (the prefill's token alone, then one event per verify step)
and its timing model makes the true figures known in advance (see the double's README): with
TOKEN_S = 0 a verify step takes STEP_S, so a request of 1 + sum(accepts) tokens in S verify
steps has TTFT = PREFILL_S, per-stream decode speed = sum(accepts) / (S x STEP_S) and takes
PREFILL_S + S x STEP_S; its acceptance length is sum(accepts) / S. None of these comes from
the code under test.

Cases: draft patterns (the double's accept cycle: 1, 6/7, 11 under DDTree, and an uneven
3/16/5/10) x verify steps per request (10 and 30) x the two ways servers report usage in a
stream (SGLANG_DOUBLE_USAGE_STATS: "continuous", cumulative usage in every chunk as asked
with continuous_usage_stats; "final", usage only at the end). STEP_S is chosen so that each
request decodes for DECODE_S seconds.

The serving figures are checked against what the double itself sent, not against the model nor
the client: it runs with SGLANG_DOUBLE_SENT_LOG and writes, per stream, when the request had
arrived, when it wrote each event that brought tokens (and how many) and when it wrote [DONE].
From that record, per level (concurrency 1, concurrency N, and one open-loop level of Poisson
arrivals at OPEN_LOOP_RATE): TPOT = (done - first event) / (tokens - 1), ITL per chunk = the
gaps between consecutive token events after the first (bench_serving's OpenAI backends), ITL
per token = each gap over its tokens (its native backend; only where the stream carries counts
per event, the "continuous" mode), E2E = done - arrival, each as p50/p95/p99 over the level
(numpy's linear interpolation, statistics.quantiles "inclusive"), request throughput = requests
/ (last done - first arrival), and goodput under objectives every request meets (so it equals
that request throughput; the double serves all requests alike).

A case passes when the median decode tok/s at concurrency 1, the output tok/s at concurrency
N, TPOT, E2E, request throughput, goodput and the per-chunk ITL median within 1 % of their
truth, the acceptance length within 0.02, and the module passed its own gates. The other ITL
figures are printed and not gated: an ITL is a gap between two of the client's read stamps,
one late wake-up of the client moves it, and the p95/p99 over a level's 30 to 240 gaps are
its top few gaps, so on a shared machine their error is the client's scheduling delay (p95
and p99 up to +16 % on 100 ms gaps, seen on 2 busy cores); the per-token median sits at the
edge of a cluster of equal values (gap/16 beside gap/10) and moved up to -12 % the same way. The
benchmark method says as much of per-chunk ITL: never gate on it. Prints one row per case,
and the worst error of each serving figure per usage mode over all cases; exits 1 when a case
misses.

    python tests/benchmarks/bench_accuracy.py
"""
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from _double import REPO_ROOT, running_double

CONCURRENCY = 8
PREFILL_S = 0.05
DECODE_S = 3.0
BLOCK_SIZE = 16
TOK_S_TOLERANCE = 0.01
ACCEPTANCE_TOLERANCE = 0.02
# Poisson arrivals of the open-loop level, per second: CONCURRENCY requests over about 2 s.
OPEN_LOOP_RATE = 4.0
# (label, algorithm, accept cycle)
PATTERNS = (
    ("1", "DFLASH", (1,)),
    ("6,7", "DFLASH", (6, 7)),
    ("11 (DDTree)", "DDTREE", (11,)),
    ("3,16,5,10", "DFLASH", (3, 16, 5, 10)),
)
VERIFY_STEPS = (10, 30)
USAGE_MODES = ("continuous", "final")
PLAYBOOK = """
- name: Benchmark the SGLang double as a user would
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the smoke benchmark
      pro6000.inference.sglang_bench: {args}
"""


def run_module_through_ansible(workdir, args):
    """Run sglang_bench in a playbook with ansible-playbook; return its result document."""
    workdir = pathlib.Path(workdir)
    result_path = workdir / "result.json"
    (workdir / "playbook.yml").write_text(PLAYBOOK.format(args=json.dumps(dict(args, result_path=str(result_path)))))
    command = [str(pathlib.Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
               "-e", "ansible_python_interpreter=%s" % sys.executable, str(workdir / "playbook.yml")]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    if not result_path.exists():
        raise RuntimeError("ansible-playbook wrote no result (rc %d): %s" % (done.returncode, done.stdout[-3000:]))
    return json.loads(result_path.read_text()), done.returncode


def quantiles(values):
    """p50, p95 and p99 by linear interpolation between closest ranks (numpy's default)."""
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98]}


def sent_truth(streams):
    """The serving figures of one level, from what the double recorded it sent."""
    tpots, chunk_gaps, token_gaps, e2es = [], [], [], []
    for stream in streams:
        times = [at for at, _tokens in stream["events"]]
        tokens = sum(count for _at, count in stream["events"])
        tpots.append((stream["done"] - times[0]) / (tokens - 1))
        for (earlier, _k), (later, count) in zip(stream["events"], stream["events"][1:]):
            chunk_gaps.append(later - earlier)
            token_gaps.extend([(later - earlier) / count] * count)
        e2es.append(stream["done"] - stream["received"])
    wall = max(s["done"] for s in streams) - min(s["received"] for s in streams)
    return {"tpot": quantiles(tpots), "itl": quantiles(chunk_gaps), "itl_token": quantiles(token_gaps),
            "e2e": quantiles(e2es), "rps": len(streams) / wall, "goodput": len(streams) / wall}


def case(algorithm, cycle, steps, usage):
    accepts = [cycle[step % len(cycle)] for step in range(steps)]
    max_tokens = 1 + sum(accepts)
    step_s = DECODE_S / steps
    truth = {
        "decode": sum(accepts) / (steps * step_s),
        "output": CONCURRENCY * max_tokens / (PREFILL_S + steps * step_s),
        "acceptance": sum(accepts) / float(steps),
        "ttft": PREFILL_S,
    }
    args = {"timeout": 120, "request_timeout": 30, "concurrency": CONCURRENCY, "requests_per_worker": 1,
            "single_stream_requests": 3, "warmup_requests": 1, "max_tokens": max_tokens,
            "acceptance_requests": 4, "acceptance_max_tokens": max_tokens, "acceptance_ignore_eos": True,
            "expect_speculation": True, "request_rates": [OPEN_LOOP_RATE], "open_loop_requests": CONCURRENCY,
            # Objectives every request meets: goodput must then equal the request throughput.
            "max_ttft_p99_s": 10 * PREFILL_S, "max_tpot_p99_s": 10 * step_s, "max_e2e_p99_s": 10 * DECODE_S}
    with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as workdir:
        sent_log = pathlib.Path(workdir, "sent.jsonl")
        env = {"SGLANG_DOUBLE_PREFILL_S": PREFILL_S, "SGLANG_DOUBLE_TOKEN_S": 0,
               "SGLANG_DOUBLE_STEP_S": "%.9f" % step_s, "SGLANG_DOUBLE_USAGE_STATS": usage,
               "SGLANG_DOUBLE_ACCEPT_%s" % algorithm: ",".join(str(c) for c in cycle),
               "SGLANG_DOUBLE_SENT_LOG": str(sent_log)}
        with running_double(algorithm, env, block_size=BLOCK_SIZE) as (client, _pid):
            result, rc = run_module_through_ansible(workdir, dict(args, url=client.base_url))
        streams = sorted((json.loads(line) for line in sent_log.read_text().splitlines()),
                         key=lambda stream: stream["received"])
    chat = [stream for stream in streams if stream["path"] == "/v1/chat/completions"]
    # In the order the module sends them: warm-up, concurrency 1, concurrency N, open loop.
    warmup, single = args["warmup_requests"], args["single_stream_requests"]
    sent = {"c1": chat[warmup:warmup + single], "cn": chat[warmup + single:warmup + single + CONCURRENCY],
            "open": chat[warmup + single + CONCURRENCY:]}
    c1, cn = result["levels"]
    levels = {"c1": c1, "cn": cn, "open": result["open_loop"][0]}
    measured = {
        "decode": c1["decode_tps"]["p50"],
        "output": cn["output_tps"],
        "acceptance": result["acceptance"]["value"],
        "ttft": c1["ttft_s"]["p50"],
    }
    serving = {}
    for name, level in levels.items():
        real = sent_truth(sent[name])
        figures = (("tpot", "tpot_s"), ("itl", "itl_s"), ("e2e", "e2e_s"))
        if usage == "continuous":
            figures += (("itl_token", "itl_token_s"),)
        for figure, key in figures:
            for quantile in ("p50", "p95", "p99"):
                value = (level.get(key) or {}).get(quantile)
                serving["%s_%s_%s" % (figure, quantile, name)] = (value, real[figure][quantile])
        serving["rps_%s" % name] = (level["request_throughput"], real["rps"])
        serving["goodput_%s" % name] = (level["goodput"], real["goodput"])
    return truth, measured, serving, {"passed": result["passed"] and rc == 0, "method": c1["decode_method"],
                                      "server": result["acceptance"]["server_avg_spec_accept_length"]}


def tolerance(name):
    """How far a serving figure may be from its truth; inf for the ITL figures not gated."""
    if name.startswith("itl") and not name.startswith("itl_p50_"):
        return float("inf")
    return TOK_S_TOLERANCE


def serving_errors(serving):
    """Relative error of each serving figure against what the double sent."""
    return dict((name, float("inf") if value is None else value / real - 1)
                for name, (value, real) in serving.items())


def main():
    print("sglang_bench through ansible-playbook against the SGLang double: N=%d, prefill %.2f s, block %d, "
          "%.1f s of decode per request, open loop at %g req/s; pass: tok/s, TPOT, E2E, request throughput, "
          "goodput and the per-chunk ITL median within %g %%, acceptance within %g"
          % (CONCURRENCY, PREFILL_S, BLOCK_SIZE, DECODE_S, OPEN_LOOP_RATE, 100 * TOK_S_TOLERANCE,
             ACCEPTANCE_TOLERANCE))
    header = "%-10s | %-11s | %5s | %-15s | %-27s | %-29s | %-24s | %-15s | %-14s | %s" % (
        "usage", "pattern", "steps", "decode method", "decode tok/s c=1 meas/true",
        "output tok/s c=%d meas/true" % CONCURRENCY, "acceptance meas/true", "TTFT ms meas/true",
        "worst serving", "verdict")
    print(header)
    print("-" * len(header))
    misses = 0
    worst = {}
    for usage in USAGE_MODES:
        for label, algorithm, cycle in PATTERNS:
            for steps in VERIFY_STEPS:
                truth, measured, serving, extra = case(algorithm, cycle, steps, usage)
                errors = [name for name in ("decode", "output")
                          if measured[name] is None or abs(measured[name] / truth[name] - 1) > TOK_S_TOLERANCE]
                if measured["acceptance"] is None or abs(measured["acceptance"] - truth["acceptance"]) > ACCEPTANCE_TOLERANCE:
                    errors.append("acceptance")
                if not extra["passed"]:
                    errors.append("module gates")
                relative = serving_errors(serving)
                for name, error in relative.items():
                    # One line per figure and quantile over the levels (c1, cn, open) of a usage mode.
                    figure = (usage, name.rsplit("_", 1)[0])
                    if abs(error) >= abs(worst.get(figure, (0, ""))[0]):
                        worst[figure] = (error, "%s, %s %d steps" % (name.rsplit("_", 1)[1], label, steps))
                errors += [name for name, error in relative.items() if abs(error) > tolerance(name)]
                misses += bool(errors)
                largest = max(relative.values(), key=abs)
                print("%-10s | %-11s | %5d | %-15s | %8.2f / %8.2f (%+5.2f%%) | %8.1f / %8.1f (%+5.2f%%) | "
                      "%6.3f / %6.3f (%+.3f) | %6.1f / %6.1f | %+12.3f%% | %s" % (
                          usage, label, steps, extra["method"],
                          measured["decode"], truth["decode"], 100 * (measured["decode"] / truth["decode"] - 1),
                          measured["output"], truth["output"], 100 * (measured["output"] / truth["output"] - 1),
                          measured["acceptance"], truth["acceptance"], measured["acceptance"] - truth["acceptance"],
                          1000 * measured["ttft"], 1000 * truth["ttft"], 100 * largest,
                          "pass" if not errors else "FAIL: " + ", ".join(errors)))
                sys.stdout.flush()
    print("worst relative error of each serving figure against what the double sent (levels c1, cn, open; "
          "of ITL only the per-chunk p50 gated):")
    for (usage, figure), (error, where) in sorted(worst.items()):
        print("  %-10s %-16s %+7.3f %%  (%s)" % (usage, figure, 100 * error, where))
    print("every case passed" if not misses else "%d case(s) failed" % misses)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())

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

The serving figures follow from the same model: every request has TPOT = S x STEP_S /
sum(accepts) ((e2e - ttft) / (n_out - 1), bench_serving's definition) and E2E = PREFILL_S +
S x STEP_S, so their p50, p95 and p99 all equal those; request throughput is 1 / E2E at
concurrency 1 (requests one after another) and N / E2E at concurrency N (released together).

A case passes when the median decode tok/s at concurrency 1, the output tok/s at concurrency
N, TPOT and E2E p50/p95/p99 at both levels and the request throughput of both levels are
within 1 % of the truth, the acceptance length within 0.02, and the module passed its own
gates. Prints one row per case, and the worst error of each serving figure over all cases;
exits 1 when a case misses.

    python tests/benchmarks/bench_accuracy.py
"""
import json
import os
import pathlib
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


def case(algorithm, cycle, steps, usage):
    accepts = [cycle[step % len(cycle)] for step in range(steps)]
    max_tokens = 1 + sum(accepts)
    step_s = DECODE_S / steps
    truth = {
        "decode": sum(accepts) / (steps * step_s),
        "output": CONCURRENCY * max_tokens / (PREFILL_S + steps * step_s),
        "acceptance": sum(accepts) / float(steps),
        "ttft": PREFILL_S,
        "tpot": steps * step_s / sum(accepts),
        "e2e": PREFILL_S + steps * step_s,
        "rps_c1": 1 / (PREFILL_S + steps * step_s),
        "rps_cn": CONCURRENCY / (PREFILL_S + steps * step_s),
    }
    env = {"SGLANG_DOUBLE_PREFILL_S": PREFILL_S, "SGLANG_DOUBLE_TOKEN_S": 0,
           "SGLANG_DOUBLE_STEP_S": "%.9f" % step_s, "SGLANG_DOUBLE_USAGE_STATS": usage,
           "SGLANG_DOUBLE_ACCEPT_%s" % algorithm: ",".join(str(c) for c in cycle)}
    args = {"timeout": 120, "request_timeout": 30, "concurrency": CONCURRENCY, "requests_per_worker": 1,
            "single_stream_requests": 3, "warmup_requests": 1, "max_tokens": max_tokens,
            "acceptance_requests": 4, "acceptance_max_tokens": max_tokens, "acceptance_ignore_eos": True,
            "expect_speculation": True}
    with running_double(algorithm, env, block_size=BLOCK_SIZE) as (client, _pid):
        with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as workdir:
            result, rc = run_module_through_ansible(workdir, dict(args, url=client.base_url))
    c1, cn = result["levels"]
    measured = {
        "decode": c1["decode_tps"]["p50"],
        "output": cn["output_tps"],
        "acceptance": result["acceptance"]["value"],
        "ttft": c1["ttft_s"]["p50"],
        "rps_c1": c1["request_throughput"],
        "rps_cn": cn["request_throughput"],
    }
    for level, name in ((c1, "c1"), (cn, "cn")):
        for figure, key in (("tpot", "tpot_s"), ("e2e", "e2e_s")):
            for quantile in ("p50", "p95", "p99"):
                measured["%s_%s_%s" % (figure, quantile, name)] = level[key][quantile]
    return truth, measured, {"passed": result["passed"] and rc == 0, "method": c1["decode_method"],
                             "server": result["acceptance"]["server_avg_spec_accept_length"]}


def serving_errors(truth, measured):
    """Relative error of each TPOT/E2E quantile and request rate against its truth."""
    found = {}
    for name, value in measured.items():
        base = name.split("_", 1)[0] if name.startswith(("tpot", "e2e")) else name
        if base in ("tpot", "e2e", "rps_c1", "rps_cn"):
            found[name] = float("inf") if value is None else value / truth[base] - 1
    return found


def main():
    print("sglang_bench through ansible-playbook against the SGLang double: N=%d, prefill %.2f s, block %d, "
          "%.1f s of decode per request; pass: tok/s within %g %%, acceptance within %g"
          % (CONCURRENCY, PREFILL_S, BLOCK_SIZE, DECODE_S, 100 * TOK_S_TOLERANCE, ACCEPTANCE_TOLERANCE))
    header = "%-10s | %-11s | %5s | %-15s | %-27s | %-29s | %-24s | %-15s | %s" % (
        "usage", "pattern", "steps", "decode method", "decode tok/s c=1 meas/true",
        "output tok/s c=%d meas/true" % CONCURRENCY, "acceptance meas/true", "TTFT ms meas/true", "verdict")
    print(header)
    print("-" * len(header))
    misses = 0
    worst = {}
    for usage in USAGE_MODES:
        for label, algorithm, cycle in PATTERNS:
            for steps in VERIFY_STEPS:
                truth, measured, extra = case(algorithm, cycle, steps, usage)
                errors = [name for name in ("decode", "output")
                          if measured[name] is None or abs(measured[name] / truth[name] - 1) > TOK_S_TOLERANCE]
                if measured["acceptance"] is None or abs(measured["acceptance"] - truth["acceptance"]) > ACCEPTANCE_TOLERANCE:
                    errors.append("acceptance")
                if not extra["passed"]:
                    errors.append("module gates")
                serving = serving_errors(truth, measured)
                for name, error in serving.items():
                    figure = name.rsplit("_", 1)[0] if name.startswith(("tpot", "e2e")) else name
                    if abs(error) > abs(worst.get(figure, (0, ""))[0]):
                        worst[figure] = (error, "%s %s %d steps" % (usage, label, steps))
                errors += [name for name, error in serving.items() if abs(error) > TOK_S_TOLERANCE]
                misses += bool(errors)
                print("%-10s | %-11s | %5d | %-15s | %8.2f / %8.2f (%+5.2f%%) | %8.1f / %8.1f (%+5.2f%%) | "
                      "%6.3f / %6.3f (%+.3f) | %6.1f / %6.1f | %s" % (
                          usage, label, steps, extra["method"],
                          measured["decode"], truth["decode"], 100 * (measured["decode"] / truth["decode"] - 1),
                          measured["output"], truth["output"], 100 * (measured["output"] / truth["output"] - 1),
                          measured["acceptance"], truth["acceptance"], measured["acceptance"] - truth["acceptance"],
                          1000 * measured["ttft"], 1000 * truth["ttft"],
                          "pass" if not errors else "FAIL: " + ", ".join(errors)))
                sys.stdout.flush()
    print("worst relative error of each serving figure (truth from the timing model):")
    for figure, (error, where) in sorted(worst.items()):
        print("  %-13s %+6.3f %%  (%s)" % (figure, 100 * error, where))
    print("every case passed" if not misses else "%d case(s) failed" % misses)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())

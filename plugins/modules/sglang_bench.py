#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Smoke benchmark of an SGLang server with gates on tokens per second and acceptance length
version_added: "0.1.0"
description:
  - Measures an SGLang server from the host it runs on and fails when requests fail, when
    single-stream decode speed or aggregate throughput is below its floor, or when speculative
    decoding is off or broken.
  - "Phases: preflight (C(/health), C(/v1/models), C(/server_info) or C(/get_server_info)),
    warm-up (discarded), cache flush (C(/flush_cache), which also resets the server's
    speculative counters), concurrency 1, concurrency O(concurrency) with every worker
    released together, open-loop levels at O(request_rates) when given, acceptance length through C(/generate) when speculating, and a
    cross-check of C(sglang:generation_tokens_total) from C(/metrics) when the server has
    metrics on."
  - Tokens are counted by the server (C(usage.completion_tokens), C(meta_info.completion_tokens)),
    never by counting stream chunks. Per-stream decode speed is (n_out - n_first) / (t_last - t_first),
    from the first to the last event that carried text, and does not depend on how the tokens
    are split into events.
  - "n_first, the tokens of the first event, comes from the server's cumulative count in that
    event when every event carries one (the module asks for
    C(stream_options: {include_usage: true, continuous_usage_stats: true}), which SGLang
    honours); a level reports this as C(decode_method=per_event_counts). A server that sends
    usage only at the end gets n_first = 1, the token the prefill committed, which SGLang
    streams alone (C(decode_method=prefill_token)). The first event's size is never guessed
    from an average."
  - The throughput phases stream C(/v1/chat/completions) at temperature 0 with C(ignore_eos)
    and a fixed O(max_tokens); every request must return exactly O(max_tokens) tokens.
  - "Acceptance length is the tokens committed by verify steps per verify step over the
    acceptance requests, sum(completion_tokens - 1) / sum(spec_verify_ct): the first token
    comes from the prefill, not from a verify step. It measures what the server's own
    C(avg_spec_accept_length) measures (committed tokens per verify step), but over exactly
    the measured requests; that server figure is cumulative since start or the last
    C(/flush_cache), lags by up to the decode log interval and is recorded next to it, not
    gated on. SGLang's per-request C(spec_accept_length) is completion_tokens / spec_verify_ct,
    the prefill token included, so it is larger by 1/spec_verify_ct; their mean (what z-lab's
    benchmark reports) is recorded as C(per_request_mean)."
  - Prompts are fixed natural-language prompts shipped with the module, since acceptance
    depends on content, or the site's own from O(prompts_path).
  - Every request's prompt starts with a tag of its own (8 random hex digits in brackets), so
    no two requests of a run, or of two runs, share more than a character or two of prefix.
    A gateway that routes by prefix (smg's C(cache_aware), where, as its 1.9.0 source reads, a request whose text matches
    less than its cache threshold, 0.5 by default, of a tree entry goes to the least loaded
    worker) then sends the concurrent requests of a level to every replica, as it does with a
    production mix of new conversations, instead of pinning the few fixed prompts to the
    replicas that saw them first; and the server's prefix cache holds no earlier answer of the
    same text. Recorded as C(prompt_mode.distinct_prefix).
  - "Prompt mode, recorded as C(prompt_mode) in the result: the throughput phases use the chat
    API with the model's chat template and thinking explicitly on or off (O(thinking), sent as
    C(chat_template_kwargs: {enable_thinking: ...}), which Qwen3's templates read; Qwen3.6 thinks
    by default, which changes what is generated and so the acceptance); the acceptance phase
    sends the same prompts raw to the native C(/generate), without a chat template."
  - The module never reports a change. A failed gate fails the task with a message naming
    each failed gate, its value and its floor.
author:
  - pro6000.inference developers (@pro6000)
extends_documentation_fragment:
  - pro6000.inference.sglang_server
  - pro6000.inference.attributes
  - pro6000.inference.attributes.read_only
options:
  model:
    description:
      - Model name sent with each request. Defaults to the first id C(/v1/models) lists.
    type: str
  timeout:
    description:
      - Upper bound in seconds on the whole run, preflight, retries, cache flush and every read
        of C(/metrics) and C(/server_info) included; the module returns by then whatever the
        server does. Phases not started by then are skipped and requests still running are cut
        off and counted as failed, which fails the run; so are answers whose decoding after
        their phase is not done by then.
      - Must be positive, at most 86400 (a day).
    type: float
    default: 180
  request_timeout:
    description:
      - Seconds a request may wait for any answer or for the next piece of a stream; never
        longer than what is left of O(timeout).
      - Must be positive, at most 3600.
    type: float
    default: 60
  concurrency:
    description:
      - "Design concurrency N of the deployment: workers released together in the concurrency-N phase."
      - From 1 to 256 (one connection each).
    type: int
    default: 8
  requests_per_worker:
    description:
      - Requests each worker sends one after another in the concurrency-N phase.
      - From 1 to 1000.
    type: int
    default: 2
  single_stream_requests:
    description:
      - Requests sent one after another in the concurrency-1 phase.
      - From 1 to 1000.
    type: int
    default: 3
  warmup_requests:
    description:
      - Discarded requests sent before measuring.
      - From 0 to 100.
    type: int
    default: 2
  max_tokens:
    description:
      - Tokens generated by every request of the throughput phases (with C(ignore_eos)).
      - From 1 to 65536.
    type: int
    default: 256
  acceptance_requests:
    description:
      - C(/generate) requests used to measure the acceptance length when speculating.
      - From 1 to 1000.
    type: int
    default: 4
  acceptance_max_tokens:
    description:
      - C(max_new_tokens) of the acceptance requests.
      - From 1 to 65536.
    type: int
    default: 256
  acceptance_ignore_eos:
    description:
      - Send the acceptance requests with C(ignore_eos), so each produces exactly
        O(acceptance_max_tokens) tokens.
      - "Off by default: a natural stop keeps the measured content representative, while
        text generated past the end-of-sequence token can have an unusual acceptance."
    type: bool
    default: false
  expect_speculation:
    description:
      - Fail when the server reports no speculative algorithm.
      - When the server reports one, acceptance is measured and gated whatever this says.
    type: bool
    default: false
  min_decode_tps:
    description:
      - Floor for the median per-stream decode speed at concurrency 1, in tokens per second.
      - Unset records the value without gating on it. Must not be negative.
    type: float
  min_output_tps:
    description:
      - Floor for the aggregate output tokens per second at concurrency O(concurrency).
      - Unset records the value without gating on it. Must not be negative.
    type: float
  min_acceptance_length:
    description:
      - Floor for the acceptance length when speculating. Unset still requires that the
        server reports one. Must not be negative.
    type: float
  thinking:
    description:
      - Ask the chat template to think (true) or not (false) in the throughput phases; always
        sent explicitly, so the mode never depends on the template's default.
    type: bool
    default: false
  prompts_path:
    description:
      - JSON Lines file on the target with the site's own prompts, one object with a C(prompt)
        string per line (blank lines skipped); used in order and cycled. Unset uses the
        module's fixed prompts.
    type: path
  max_ttft_p99_s:
    description:
      - Latency objective, gated at concurrency O(concurrency), on the 99th percentile of the time
        to first token, in seconds. Unset, no gate (the level reports the figure). Must be positive.
    type: float
  max_tpot_p99_s:
    description:
      - Latency objective, gated at concurrency O(concurrency), on the 99th percentile of the time
        per output token after the first, in seconds. Unset, no gate (the level reports the
        figure). Must be positive.
    type: float
  max_e2e_p99_s:
    description:
      - Latency objective, gated at concurrency O(concurrency), on the 99th percentile of the
        end-to-end request latency (send to the end of the stream), in seconds. Unset, no gate
        (the level reports the figure). Must be positive.
    type: float
  request_rates:
    description:
      - "Open-loop levels, after the concurrency-N phase: for each rate (requests per second),
        O(open_loop_requests) streams arrive as a Poisson process of that rate, as SGLang's
        C(bench_serving --request-rate) sends them (the first at once, then exponential gaps of
        mean 1/rate, from a fixed seed so every run sees the same arrivals), each on its own
        connection whether or not earlier ones have finished. Reported under C(result.open_loop)
        with the same figures as a level, C(goodput) included when an objective is set."
      - Each rate must be positive, at most 10000. Empty, no open-loop level.
    type: list
    elements: float
    default: []
  open_loop_requests:
    description:
      - Requests of each open-loop level (one connection each). From 1 to 256.
    type: int
    default: 32
  records_path:
    description:
      - File on the target to write one JSON line per measured request to (level, concurrency,
        success or error, TTFT, TPOT, end-to-end latency, token counts, decode speed; open-loop
        requests add their C(request_rate)), replaced
        atomically. Not written in check mode.
    type: path
  flush_cache:
    description:
      - Call C(/flush_cache) after the warm-up so the measurement starts from an empty cache
        and the server's speculative counters cover only the measured requests.
    type: bool
    default: true
  result_path:
    description:
      - File on the target to write the JSON result to (replaced atomically), whether the gates
        pass or not. Not written in check mode.
    type: path
attributes:
  check_mode:
    details:
      - "In check mode the module sends nothing that changes the server's state or loads it (no
        C(/flush_cache), no generation request): it runs the preflight reads only
        (C(/health), C(/v1/models), C(/server_info)), checks O(expect_speculation), and returns
        C(result.check_mode=true) with the phases it would run in C(result.would_run) and the
        requests per phase in C(result.would_send). The floors are not gated, since nothing is
        measured. O(result_path) is not written."
notes:
  - Uses the Python standard library only; nothing needs to be installed on the target.
  - "Whatever a server sends, the module's memory stays within a fixed multiple of the client's
    caps (64 MiB per answer, 1 GiB per phase) however small its packets, JSON nested too deep
    fails naming the endpoint, and a request whose server reports more tokens (or verify steps)
    than O(max_tokens) or O(acceptance_max_tokens) asked fails."
  - The client stamps each read with C(time.perf_counter()) and parses after each stream ends,
    with one connection per worker, so that it is not the bottleneck; the achieved concurrency
    of each level shows whether it was.
  - Floors are calibrated per model, GPU and configuration; do not copy them from papers.
seealso:
  - module: pro6000.inference.sglang_probe
"""

EXAMPLES = r"""
- name: Benchmark the local DFLASH server and gate the deploy on it
  pro6000.inference.sglang_bench:
    url: http://127.0.0.1:30000
    concurrency: 8
    expect_speculation: true
    min_decode_tps: 60
    min_output_tps: 300
    min_acceptance_length: 5
    result_path: /var/lib/pro6000/smoke/bench.json
  register: bench

- name: Show single-stream decode speed
  ansible.builtin.debug:
    msg: "{{ bench.result.levels[0].decode_tps.p50 }} tok/s"
"""

RETURN = r"""
result:
  description:
    - The benchmark document, also written to O(result_path) when given.
    - C(levels) has one entry per concurrency level with C(requests), C(successes), C(failures),
      C(errors), C(wall_s), C(output_tps), C(total_tps), C(achieved_concurrency),
      C(ttft_s), C(decode_tps), C(tokens_per_chunk) (each a distribution with C(count),
      C(min), C(p50), C(p90), C(p95), C(p99), C(max), C(mean)), C(decode_method) (C(per_event_counts),
      C(prefill_token) or C(mixed), see the description) and C(length_mismatches).
    - "What serving engineers read, per level: C(tpot_s) (time per output token after the first,
      (e2e - ttft) / (n_out - 1) per request, as SGLang's C(bench_serving) defines it), C(itl_s)
      (inter-token latency per chunk: every gap between consecutive content events of a stream,
      the first excluded, pooled over the level's requests, as C(bench_serving) collects it for
      its OpenAI backends), C(itl_token_s) (each of those gaps spread over the k tokens its event
      brought, gap/k k times, as C(bench_serving)'s native backend and SGLang's own
      C(inter_token_latency_seconds) histogram do; null when the server sends no count per
      event), C(e2e_s) (request latency from send to the end of its stream), all distributions
      as above, C(request_throughput) (successful requests per second of the level's wall
      time), and C(goodput) when a latency objective is set (requests meeting every objective
      set, TTFT, TPOT and E2E, each judged on the request's own figure as vLLM's
      C(benchmark_serving --goodput) does, per second; null otherwise)."
    - C(open_loop) has one entry per O(request_rates) rate, shaped as a level (C(phase) is
      C(open_loop), C(concurrency) null) with C(request_rate) and C(arrivals_s) (when the last
      request was due); empty without O(request_rates). Its requests count in the
      C(requests_succeeded) and C(ignore_eos_lengths) gates.
    - C(acceptance) has C(value), C(method), C(per_request_mean), C(server_avg_spec_accept_length),
      C(completion_tokens), C(prefill_tokens), C(spec_verify_ct) and the request counts.
    - C(gates) has one entry per gate with C(name), C(value), C(floor), C(passed) and C(detail).
    - In check mode C(check_mode) is V(true), C(would_run) lists the phases a real run would run
      and C(would_send) the requests each would send; C(levels) stays empty.
  returned: always
  type: dict
  sample:
    schema: pro6000.inference.sglang_bench/v1
    passed: true
    server: {url: http://127.0.0.1:30000, model: Qwen3.6-27B, version: 0.5.23,
             speculative: {algorithm: DFLASH, num_draft_tokens: 16}}
    acceptance: {value: 6.7, method: sum(completion_tokens - 1)/sum(spec_verify_ct), per_request_mean: 6.72}
    gates: [{name: decode_tps_c1, value: 142.1, floor: 60, passed: true, detail: median of 3}]
result_file:
  description: Where the result was written, and whether it was (not in check mode).
  returned: when O(result_path) is given
  type: dict
  sample: {path: /var/lib/pro6000/smoke/bench.json, written: true}
records_file:
  description: Where the per-request records were written, whether they were, and how many.
  returned: when O(records_path) is given
  type: dict
  sample: {path: /var/lib/pro6000/smoke/requests.jsonl, written: true, records: 19}
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pro6000.inference.plugins.module_utils._files import replace_file
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.bench import PROMPTS, load_prompts, run_benchmark
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.client import (
    POSITIVE, SERVER_ARGUMENT_SPEC, SGLangClient, check_bounds, url_credentials,
)
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.errors import SGLangError
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.figures import failure_message

# (least, most, unit) of each numeric option, checked before any request. The most values keep
# a run within what one host's client can hold (one connection per worker, every answer kept
# until its phase ends) and its time bound meaningful; inf and nan are refused.
BOUNDS = {
    "timeout": (POSITIVE, 86400, "seconds"),
    "request_timeout": (POSITIVE, 3600, "seconds"),
    "concurrency": (1, 256, "workers"),
    "requests_per_worker": (1, 1000, "requests"),
    "single_stream_requests": (1, 1000, "requests"),
    "warmup_requests": (0, 100, "requests"),
    "max_tokens": (1, 65536, "tokens"),
    "acceptance_requests": (1, 1000, "requests"),
    "acceptance_max_tokens": (1, 65536, "tokens"),
    "min_decode_tps": (0, None, "tokens per second"),
    "min_output_tps": (0, None, "tokens per second"),
    "min_acceptance_length": (0, None, "tokens"),
    "max_ttft_p99_s": (POSITIVE, 3600, "seconds"),
    "max_tpot_p99_s": (POSITIVE, 3600, "seconds"),
    "max_e2e_p99_s": (POSITIVE, 86400, "seconds"),
    "open_loop_requests": (1, 256, "requests"),
}
# Request rates of the open-loop levels, per second: positive and finite (inf, a closed burst,
# is what the concurrency-N phase measures).
RATE_BOUNDS = (POSITIVE, 10000, "requests per second")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **SERVER_ARGUMENT_SPEC,
            model=dict(type="str"),
            timeout=dict(type="float", default=180),
            request_timeout=dict(type="float", default=60),
            concurrency=dict(type="int", default=8),
            requests_per_worker=dict(type="int", default=2),
            single_stream_requests=dict(type="int", default=3),
            warmup_requests=dict(type="int", default=2),
            max_tokens=dict(type="int", default=256, no_log=False),
            acceptance_requests=dict(type="int", default=4),
            acceptance_max_tokens=dict(type="int", default=256, no_log=False),
            acceptance_ignore_eos=dict(type="bool", default=False),
            expect_speculation=dict(type="bool", default=False),
            min_decode_tps=dict(type="float"),
            min_output_tps=dict(type="float"),
            min_acceptance_length=dict(type="float"),
            thinking=dict(type="bool", default=False),
            prompts_path=dict(type="path"),
            max_ttft_p99_s=dict(type="float"),
            max_tpot_p99_s=dict(type="float"),
            max_e2e_p99_s=dict(type="float"),
            request_rates=dict(type="list", elements="float", default=[]),
            open_loop_requests=dict(type="int", default=32),
            records_path=dict(type="path"),
            flush_cache=dict(type="bool", default=True),
            result_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    module.no_log_values.update(url_credentials(params["url"]))
    problem = check_bounds(params, BOUNDS)
    for index, rate in enumerate(params["request_rates"]):
        problem = problem or check_bounds({"request_rates[%d]" % index: rate},
                                          {"request_rates[%d]" % index: RATE_BOUNDS})
    if problem:
        module.fail_json(msg=problem)
    try:
        client = SGLangClient(params["url"], api_key=params["api_key"], timeout=params["request_timeout"],
                              validate_certs=params["validate_certs"], ca_path=params["ca_path"])
    except SGLangError as exc:
        module.fail_json(msg=str(exc))
    prompts = PROMPTS
    if params["prompts_path"]:
        try:
            prompts = load_prompts(params["prompts_path"])
        except (OSError, ValueError) as exc:
            module.fail_json(msg="prompts_path: %s" % exc)
    records = []
    try:
        result = run_benchmark(client, params, records, prompts, module.check_mode)
    except SGLangError as exc:
        module.fail_json(msg=str(exc))
    extra = {}
    if params["records_path"]:
        written = not module.check_mode
        if written:
            try:
                replace_file(params["records_path"],
                             "".join(json.dumps(record, sort_keys=True) + "\n" for record in records).encode("utf-8"),
                             0o644, module.atomic_move)
            except OSError as exc:
                module.fail_json(msg="cannot write records_path %s: %s" % (params["records_path"], exc), result=result)
        extra["records_file"] = {"path": params["records_path"], "written": written, "records": len(records)}
    if params["result_path"]:
        written = not module.check_mode
        if written:
            try:
                replace_file(params["result_path"], (json.dumps(result, indent=2, sort_keys=True) + "\n").encode("utf-8"),
                             0o644, module.atomic_move)
            except OSError as exc:
                module.fail_json(msg="cannot write result_path %s: %s" % (params["result_path"], exc), result=result)
        extra["result_file"] = {"path": params["result_path"], "written": written}
    if not result["passed"]:
        module.fail_json(msg=failure_message(result), changed=False, result=result, **extra)
    if module.check_mode:
        module.exit_json(changed=False, msg="check mode: the server answers; would run %s" % ", ".join(
            result["would_run"]), result=result, **extra)
    module.exit_json(changed=False, msg="all gates passed", result=result, **extra)


if __name__ == "__main__":
    main()

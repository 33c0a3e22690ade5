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
    A gateway that routes by prefix (smg's C(cache_aware), where a request whose text matches
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

import datetime
import json
import math
import random
import re
import secrets
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pro6000.inference.plugins.module_utils._files import replace_file
from ansible_collections.pro6000.inference.plugins.module_utils._sglang_client import (
    SERVER_ARGUMENT_SPEC,
    SGLangClient,
    POSITIVE,
    SGLangError,
    check_bounds,
    fetch_server_info,
    loads,
    model_cards,
    parse_stream,
    run_requests,
    speculative_settings,
    summarise,
    token_count,
    url_credentials,
)

SCHEMA = "pro6000.inference.sglang_bench/v1"

# Natural-language prompts (acceptance depends on content; random token ids mean nothing).
PROMPTS = (
    "Write a Python function that merges two sorted lists into one sorted list, and explain "
    "its time complexity.",
    "Explain how a hash table handles collisions, comparing separate chaining with open addressing.",
    "Describe, step by step, how to make a loaf of sourdough bread at home.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Summarise the causes and the consequences of the French Revolution for a high-school student.",
    "Write a SQL query that returns the ten customers with the highest total order value, and "
    "explain each clause.",
    "Explain the difference between TCP and UDP, and when a developer should choose each.",
    "Write a bash script that backs up a directory into a dated tar archive and keeps the last "
    "seven archives.",
)

METRIC_GENERATION_TOKENS = "sglang:generation_tokens_total"
METRIC_LINE_RE = re.compile(rb"^" + re.escape(METRIC_GENERATION_TOKENS.encode()) + rb"[^\n]*", re.M)

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


def prompt(index, prompts=PROMPTS):
    return prompts[index % len(prompts)]


class DistinctPrompts:
    """``prompts``, each one read with a tag of its own in front (8 random hex digits): requests
    share no prefix, so a prefix-routing gateway treats each as a new conversation."""

    def __init__(self, prompts):
        self.prompts = tuple(prompts)

    def __len__(self):
        return len(self.prompts)

    def __getitem__(self, index):
        return "[%s] %s" % (secrets.token_hex(4), self.prompts[index])


def load_prompts(path):
    """The prompts of a JSON Lines file (one {"prompt": str} per line), or ValueError naming the line."""
    found = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ValueError("%s line %d is not JSON: %s" % (path, number, exc))
            text = record.get("prompt") if isinstance(record, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise ValueError("%s line %d has no non-empty \"prompt\" string" % (path, number))
            found.append(text)
    if not found:
        raise ValueError("%s holds no prompt" % path)
    return tuple(found)


def prompt_mode(params, prompts):
    """What the result records about the prompts used."""
    return {"api": "chat (/v1/chat/completions), acceptance through native /generate without a template",
            "thinking": params["thinking"], "chat_template_kwargs": {"enable_thinking": params["thinking"]},
            "prompt_set": params["prompts_path"] or "builtin", "prompts": len(prompts),
            "distinct_prefix": isinstance(prompts, DistinctPrompts)}


class Deadline:
    """The runtime bound of the whole run, on the same clock as the stream stamps."""

    def __init__(self, seconds):
        self.at = time.perf_counter() + seconds

    def remaining(self):
        return self.at - time.perf_counter()

    def passed(self):
        return self.remaining() <= 0


def chat_payload(model, index, max_tokens, prompts=PROMPTS, thinking=False):
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt(index, prompts)}],
        # Explicit either way: Qwen3.6's template thinks unless told not to.
        "chat_template_kwargs": {"enable_thinking": thinking},
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        # Continuous usage gives the server's token count on every chunk: exact n_first.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def decode_method(results):
    """How the decode speeds of ``results`` got their first event's token count."""
    methods = set(r.decode_method for r in results if r.decode_tps is not None)
    return methods.pop() if len(methods) == 1 else ("mixed" if methods else None)


def parse_chats(client, captures, max_tokens, deadline):
    """The chat streams of ``captures`` parsed, each error naming the endpoint; a count beyond
    ``max_tokens`` (what was asked) is one, and parsing ends by the run's deadline."""
    results = [parse_stream(capture, max_tokens, deadline.at) for capture in captures]
    for result in results:
        if result.error is not None:
            result.error = "POST %s: %s" % (client.url("/v1/chat/completions"), result.error)
    return results


def stream_level(client, model, workers, per_worker, max_tokens, deadline, request_timeout, prompts=PROMPTS,
                 thinking=False):
    """``workers`` streams released together, each sending ``per_worker`` requests in turn."""
    captures, wall = run_requests(
        client, workers, per_worker,
        lambda index: ("POST", "/v1/chat/completions", chat_payload(model, index, max_tokens, prompts, thinking)),
        timeout=request_timeout, deadline=deadline.at)
    return parse_chats(client, captures, max_tokens, deadline), wall


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


def poisson_arrivals(rate, count, seed=0):
    """Send times (seconds after the first) of ``count`` requests arriving as a Poisson process
    of ``rate`` per second: the first at once, then exponential gaps of mean 1 / rate, as
    SGLang's bench_serving --request-rate draws them (get_request, np.random.exponential).
    Seeded, so every configuration of a sweep sees the same arrivals."""
    draw = random.Random(seed)
    offsets = [0.0]
    while len(offsets) < count:
        offsets.append(offsets[-1] + draw.expovariate(rate))
    return offsets


def open_loop_level(client, model, params, rate, deadline, prompts, objectives):
    """One open-loop level: O(open_loop_requests) streams sent at Poisson arrivals of ``rate``,
    each on its own connection, whether or not earlier ones have finished."""
    count = params["open_loop_requests"]
    offsets = poisson_arrivals(rate, count)
    captures, wall = run_requests(
        client, count, 1,
        lambda index: ("POST", "/v1/chat/completions",
                       chat_payload(model, index, params["max_tokens"], prompts, params["thinking"])),
        timeout=params["request_timeout"], deadline=deadline.at, arrivals=offsets)
    results = parse_chats(client, captures, params["max_tokens"], deadline)
    level = level_summary("open_loop", None, results, wall, params["max_tokens"], objectives)
    level.update(request_rate=rate, arrivals_s=round(offsets[-1], 4))
    return level, results


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


def read_generation_tokens(client, deadline):
    """Sum of sglang:generation_tokens_total over all label sets, or None without /metrics."""
    try:
        response = client.get("/metrics", deadline=deadline.at, retries=0)
    except SGLangError:
        return None
    if response.status != 200:
        return None
    total = None
    # Only the metric's own lines are looked at, never a list of every line of the page.
    for match in METRIC_LINE_RE.finditer(response.body):
        line = match.group(0).decode("utf-8", "replace").rstrip("\r")
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name == METRIC_GENERATION_TOKENS:
            try:
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                raise SGLangError("GET %s: malformed sample: %r" % (client.url("/metrics"), line[:200]))
            if not math.isfinite(total):
                raise SGLangError("GET %s: %s is not a finite number" % (client.url("/metrics"), METRIC_GENERATION_TOKENS))
    return total


def acceptance_answer(client, capture, max_tokens):
    """completion_tokens and spec_verify_ct of one /generate answer, or its error naming the
    endpoint; neither count may exceed ``max_tokens`` (what was asked)."""
    where = "POST %s" % client.url("/generate")
    if capture.failure():
        return {"error": "%s: %s" % (where, capture.failure())}
    try:
        body = loads(capture.body)
    except ValueError as exc:
        return {"error": "%s: the answer is not JSON: %s" % (where, exc)}
    if isinstance(body, list):
        body = body[0] if body else {}
    meta = (body.get("meta_info") or {}) if isinstance(body, dict) else None
    if not isinstance(meta, dict):
        # SGLang answers an object (a list of them for a batch) whose meta_info holds integer counts.
        return {"error": "%s: answer of an unexpected shape: %r" % (where, capture.body[:200])}
    try:
        # Each verify step commits at least one token: never more steps than tokens asked.
        return dict((name, token_count(meta.get(name), "meta_info." + name, max_tokens))
                    for name in ("completion_tokens", "spec_verify_ct"))
    except (TypeError, ValueError) as exc:
        return {"error": "%s: answer of an unexpected shape (%s): %r" % (where, exc, capture.body[:200])}


def measure_acceptance(client, model, params, deadline, prompts=PROMPTS):
    count = params["acceptance_requests"]
    workers = max(1, min(params["concurrency"], count))
    sampling = {"max_new_tokens": params["acceptance_max_tokens"], "temperature": 0,
                "ignore_eos": params["acceptance_ignore_eos"]}
    captures, wall = run_requests(
        client, workers, -(-count // workers),
        lambda index: ("POST", "/generate", {"text": prompt(index, prompts), "model": model,
                                             "sampling_params": sampling}),
        timeout=params["request_timeout"], deadline=deadline.at, total=count)
    answers = [acceptance_answer(client, capture, params["acceptance_max_tokens"]) for capture in captures]
    errors = [a["error"] for a in answers if "error" in a]
    counted = [a for a in answers if "error" not in a and a["completion_tokens"] and a["spec_verify_ct"]]
    tokens = sum(a["completion_tokens"] for a in counted)
    steps = sum(a["spec_verify_ct"] for a in counted)
    # SGLang's per-request spec_accept_length: completion_tokens / spec_verify_ct.
    ratios = [a["completion_tokens"] / float(a["spec_verify_ct"]) for a in counted]
    return {
        "value": (tokens - len(counted)) / float(steps) if steps else None,
        "method": "sum(completion_tokens - 1)/sum(spec_verify_ct) over /generate requests: tokens committed "
                  "by verify steps per verify step, the prefill's token excluded (token-weighted)",
        "per_request_mean": sum(ratios) / len(ratios) if ratios else None,
        "requests": len(answers),
        "with_spec_counts": len(counted),
        "errors": errors[:5],
        "completion_tokens": tokens,
        "prefill_tokens": len(counted),
        "spec_verify_ct": steps,
        "wall_s": round(wall, 4),
    }


def gate(name, value, floor, passed, detail):
    return {"name": name, "value": value, "floor": floor, "passed": passed, "detail": detail}


def floor_gate(name, value, floor, detail):
    if floor is None:
        return gate(name, value, None, None, detail + "; no floor set, recorded only")
    return gate(name, value, floor, value is not None and value >= floor, detail)


def run_benchmark(client, params, records=None, prompts=PROMPTS, check_mode=False):
    """Run every phase against ``client`` and return the result document (gates included);
    ``records`` (a list) receives one record per measured request; in check mode only the
    preflight reads, with what would run."""
    records = [] if records is None else records
    prompts = prompts if isinstance(prompts, DistinctPrompts) else DistinctPrompts(prompts)
    thinking = params["thinking"]
    objectives = (params["max_ttft_p99_s"], params["max_tpot_p99_s"], params["max_e2e_p99_s"])
    deadline = Deadline(params["timeout"])
    started = time.perf_counter()
    result = {
        "schema": SCHEMA,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "parameters": {key: params[key] for key in (
            "concurrency", "requests_per_worker", "single_stream_requests", "warmup_requests",
            "max_tokens", "acceptance_requests", "acceptance_max_tokens", "acceptance_ignore_eos",
            "expect_speculation",
            "timeout", "request_timeout", "flush_cache", "max_ttft_p99_s", "max_tpot_p99_s", "max_e2e_p99_s",
            "request_rates", "open_loop_requests")},
        "server": {"url": client.base_url},
        "prompt_mode": prompt_mode(params, prompts),
        "phases": [],
        "levels": [],
        "open_loop": [],
        "acceptance": None,
        "counters": None,
        "gates": [],
    }
    gates = result["gates"]
    try:
        health = client.get("/health", deadline=deadline.at)
        if health.status != 200:
            raise SGLangError("GET %s: HTTP %d: %s" % (client.url("/health"), health.status, health.text()))
        models = model_cards(client, deadline.at)
        info_path, info = fetch_server_info(client, deadline.at)
    except SGLangError as exc:
        gates.append(gate("preflight", str(exc), "server healthy and answering", False, "phase 0"))
        return finish(result, started)
    spec = speculative_settings(info)
    model = params["model"] or (models[0].get("id") if models else None)
    speculating = spec["algorithm"] is not None
    result["server"].update({"model": model, "version": info.get("version"), "server_info_path": info_path,
                             "speculative": spec, "speculating": speculating})
    result["phases"].append("preflight")
    if params["expect_speculation"]:
        gates.append(gate("speculation_active", spec["algorithm"], "a speculative algorithm", speculating,
                          "speculative_algorithm from %s" % info_path))
        if not speculating:
            return finish(result, started)

    planned = ["warmup", "flush", "concurrency_1", "concurrency_n"] + (["open_loop"] if params["request_rates"] else []) \
        + (["acceptance"] if speculating else [])
    if check_mode:
        # Flushing and generating change the server's cache and counters and load it: not in check mode.
        sent = {"warmup": params["warmup_requests"], "flush": 1 if params["flush_cache"] else 0,
                "concurrency_1": params["single_stream_requests"],
                "concurrency_n": params["concurrency"] * params["requests_per_worker"],
                "open_loop": len(params["request_rates"]) * params["open_loop_requests"],
                "acceptance": params["acceptance_requests"]}
        result.update(check_mode=True, would_run=planned, would_send=dict((p, sent[p]) for p in planned))
        return finish(result, started)
    counter_before = None
    for phase in planned:
        if deadline.passed():
            break
        if phase == "warmup" and params["warmup_requests"]:
            warm, _wall = stream_level(client, model, 1, params["warmup_requests"], min(32, params["max_tokens"]),
                                       deadline, params["request_timeout"], prompts, thinking)
            result["warmup"] = {"requests": len(warm), "successes": sum(1 for r in warm if r.ok)}
        elif phase == "flush" and params["flush_cache"]:
            try:
                result["flush_status"] = client.post("/flush_cache", deadline=deadline.at).status
            except SGLangError as exc:
                result["flush_status"] = str(exc)
            counter_before = read_generation_tokens(client, deadline)
        elif phase == "concurrency_1":
            results, wall = stream_level(client, model, 1, params["single_stream_requests"], params["max_tokens"],
                                         deadline, params["request_timeout"], prompts, thinking)
            result["levels"].append(level_summary(phase, 1, results, wall, params["max_tokens"], objectives))
            records.extend(request_records(phase, 1, results))
        elif phase == "concurrency_n":
            results, wall = stream_level(client, model, params["concurrency"], params["requests_per_worker"],
                                         params["max_tokens"], deadline, params["request_timeout"], prompts, thinking)
            result["levels"].append(level_summary(phase, params["concurrency"], results, wall, params["max_tokens"],
                                                  objectives))
            records.extend(request_records(phase, params["concurrency"], results))
            counter_after = read_generation_tokens(client, deadline) if counter_before is not None else None
            if counter_after is not None:
                client_tokens = sum(level["output_tokens"] for level in result["levels"])
                delta = counter_after - counter_before
                result["counters"] = {
                    "metric": METRIC_GENERATION_TOKENS, "delta": delta, "client_tokens": client_tokens,
                    "ratio": delta / client_tokens if client_tokens else None,
                }
        elif phase == "open_loop":
            for rate in params["request_rates"]:
                if deadline.passed():
                    break
                level, results = open_loop_level(client, model, params, rate, deadline, prompts, objectives)
                result["open_loop"].append(level)
                records.extend(dict(record, request_rate=rate) for record in request_records(phase, None, results))
        elif phase == "acceptance":
            result["acceptance"] = measure_acceptance(client, model, params, deadline, prompts)
            try:
                result["acceptance"]["server_avg_spec_accept_length"] = speculative_settings(
                    fetch_server_info(client, deadline.at)[1])["avg_spec_accept_length"]
            except SGLangError:
                result["acceptance"]["server_avg_spec_accept_length"] = None
        if deadline.passed():
            # Cut off by the runtime bound: the phase does not count as completed.
            break
        result["phases"].append(phase)

    completed = [p for p in planned if p in result["phases"]]
    if len(completed) == len(planned):
        detail = "all of %s within the %g s runtime bound" % (", ".join(planned), params["timeout"])
    else:
        detail = "completed %s of %s within the %g s runtime bound" % (
            ", ".join(completed) or "none", ", ".join(planned), params["timeout"])
    gates.append(gate("phases_completed", len(completed), len(planned), len(completed) == len(planned), detail))
    # Open-loop requests count like the others: a failed one is a failure, never dropped.
    levels = result["levels"] + result["open_loop"]
    requests = sum(level["requests"] for level in levels)
    successes = sum(level["successes"] for level in levels)
    first_errors = [e for level in levels for e in level["errors"]][:3]
    if first_errors:
        detail = "failed: %s" % "; ".join(first_errors)
    else:
        detail = "all streamed requests" if requests else "no measured request ran"
    gates.append(gate("requests_succeeded", successes, requests, successes == requests and requests > 0, detail))
    mismatches = [n for level in levels for n in level["length_mismatches"]]
    gates.append(gate("ignore_eos_lengths", successes - len(mismatches), successes, not mismatches,
                      "n_out must equal max_tokens=%d; got %s" % (params["max_tokens"], mismatches[:10])
                      if mismatches else "n_out == max_tokens=%d for every request" % params["max_tokens"]))
    by_phase = dict((level["phase"], level) for level in result["levels"])
    if "concurrency_1" in by_phase:
        decode = by_phase["concurrency_1"]["decode_tps"]
        gates.append(floor_gate("decode_tps_c1", decode["p50"] if decode else None, params["min_decode_tps"],
                                "median per-stream decode tok/s at concurrency 1"))
    if "concurrency_n" in by_phase:
        level = by_phase["concurrency_n"]
        gates.append(floor_gate("output_tps_c%d" % level["concurrency"], level["output_tps"],
                                params["min_output_tps"],
                                "aggregate output tok/s at concurrency %d" % level["concurrency"]))
        gates.extend(latency_gates(level, params))
    if speculating and "acceptance" in result["phases"]:
        value = result["acceptance"]["value"]
        floor = params["min_acceptance_length"]
        gates.append(gate("acceptance_length", value, floor,
                          value is not None and (floor is None or value >= floor),
                          result["acceptance"]["method"] if value is not None else
                          "the server speculates but /generate reported no spec_verify_ct"))
    return finish(result, started)


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

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark of sglang_bench: prompts, single-stream and concurrent levels, open-loop
rates, the speculative acceptance, and the run that gates them.
"""

from __future__ import annotations

import datetime
import json
import math
import random
import re
import secrets
import time

from ansible_collections.pro6000.inference.plugins.module_utils._sglang.client import fetch_server_info, model_cards, speculative_settings
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.errors import SGLangError
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.figures import (
    finish, floor_gate, gate, latency_gates, level_summary, request_records,
)
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.http import loads, run_requests
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.stream import parse_stream, token_count


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

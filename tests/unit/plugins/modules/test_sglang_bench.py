"""sglang_bench against the SGLang test double on loopback (tests/unit/plugins/conftest.py).

The client's own behaviours (deadlines, the /get_server_info alias, the API key header, stream
parsing) are tested in tests/unit/plugins/module_utils/_sglang/test_sglang_client.py; these tests cover
the module's wiring, phases and gates."""
import json
import re
import time

import pytest

from support import (DEEP_JSON, MEASURED_MEMORY_LIMIT, SERVER_SIDE_SLACK_S, Dribble, HostileServer, free_port,
                     http_answer, run_main, run_module_file, run_module_measured)

from ansible_collections.pro6000.inference.plugins.module_utils._sglang import bench
from ansible_collections.pro6000.inference.plugins.modules import sglang_bench

SMALL = {"max_tokens": 25, "acceptance_max_tokens": 261, "concurrency": 3, "requests_per_worker": 2,
         "single_stream_requests": 2, "warmup_requests": 1, "acceptance_requests": 3, "timeout": 30,
         "request_timeout": 10, "acceptance_ignore_eos": True}
# The error event serving_chat.py sends when generation raises (create_streaming_error_response).
CUDA_OOM = {"error": {"object": "error", "message": "CUDA OOM", "type": "BadRequestError", "param": None,
                      "code": 400}}


def run_module(args, capsys):
    return run_main(sglang_bench.main, args, capsys)


def gates(result):
    return {g["name"]: g for g in result["result"]["gates"]}


def test_healthy_speculating_server_passes_every_gate(server, capsys):
    failed, result = run_module(dict(SMALL, url=server.url, expect_speculation=True, min_decode_tps=1,
                                     min_output_tps=1, min_acceptance_length=4), capsys)
    assert not failed, result["msg"]
    assert result["changed"] is False
    doc = result["result"]
    assert doc["schema"] == "pro6000.inference.sglang_bench/v1" and doc["passed"] is True
    assert doc["phases"] == ["preflight", "warmup", "flush", "concurrency_1", "concurrency_n", "acceptance"]
    assert doc["server"]["model"] == "Qwen3.6-27B" and doc["server"]["speculative"]["algorithm"] == "DFLASH"
    c1, cn = doc["levels"]
    assert (c1["concurrency"], c1["requests"], c1["successes"]) == (1, 2, 2)
    assert (cn["concurrency"], cn["requests"], cn["successes"]) == (3, 6, 6)
    assert cn["output_tokens"] == 6 * 25 and cn["length_mismatches"] == []
    # the prefill's token, then 6 chunks of 4: the decode speed counts 24 tokens
    assert cn["tokens_per_chunk"]["p50"] == pytest.approx(25 / 7) and cn["decode_method"] == "per_event_counts"
    # 261 tokens: the prefill's and 65 verify steps of 4; SGLang's own per-request figure
    # counts the prefill's token too
    assert doc["acceptance"]["value"] == pytest.approx(4) and doc["acceptance"]["requests"] == 3
    assert doc["acceptance"]["per_request_mean"] == pytest.approx(261 / 65)
    assert doc["acceptance"]["server_avg_spec_accept_length"] == [4.0]
    assert doc["counters"]["delta"] == doc["counters"]["client_tokens"] == 8 * 25
    assert set(gates(result)) == {"speculation_active", "phases_completed", "requests_succeeded",
                                  "ignore_eos_lengths", "decode_tps_c1", "output_tps_c3", "acceptance_length"}
    # every streamed request asked for server-side counts, greedy, fixed length
    chat = [r["payload"] for r in server.app.requests if r["path"] == "/v1/chat/completions"]
    assert all(p["ignore_eos"] and p["temperature"] == 0 and p["stream_options"]["include_usage"] for p in chat)
    generate = [r["payload"]["sampling_params"] for r in server.app.requests if r["path"] == "/generate"]
    assert generate == [{"max_new_tokens": 261, "temperature": 0, "ignore_eos": True}] * 3


def test_floors_failing_name_gate_value_and_floor(server, capsys):
    failed, result = run_module(dict(SMALL, url=server.url, min_decode_tps=1e9, min_output_tps=1e9,
                                     min_acceptance_length=7.5), capsys)
    assert failed and result["changed"] is False
    assert "sglang_bench failed 3 gate(s)" in result["msg"]
    assert "decode_tps_c1: value " in result["msg"] and "floor 1000000000.000" in result["msg"]
    assert "output_tps_c3: value " in result["msg"]
    assert "acceptance_length: value 4.000, floor 7.500" in result["msg"]


def test_server_that_should_speculate_but_does_not_fails(start_double, capsys):
    server = start_double(speculative=False)
    failed, result = run_module(dict(SMALL, url=server.url, expect_speculation=True), capsys)
    assert failed
    assert "speculation_active: value None, floor a speculative algorithm" in result["msg"]
    assert not any(r["path"] == "/v1/chat/completions" for r in server.app.requests)


def test_speculating_server_without_verify_counts_fails(server, capsys):
    server.app.meta_info_without = {"spec_verify_ct"}
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert failed and "acceptance_length: value None" in result["msg"]
    assert "reported no spec_verify_ct" in result["msg"]


def test_no_speculation_skips_acceptance(start_double, capsys):
    server = start_double(speculative=False)
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert not failed, result["msg"]
    assert "acceptance" not in result["result"]["phases"] and result["result"]["acceptance"] is None
    assert not any(r["path"] == "/generate" for r in server.app.requests)


def test_short_completion_under_ignore_eos_fails(server, capsys):
    # Without ignore_eos every answer stops at its EOS, 16 to 255 tokens in (the double's text).
    server.app.dropped_fields = {"ignore_eos"}
    failed, result = run_module(dict(SMALL, url=server.url, max_tokens=256), capsys)
    assert failed
    assert "ignore_eos_lengths: value 0, floor 8 (n_out must equal max_tokens=256; got [" in result["msg"]


@pytest.mark.parametrize("fault, value, message", [
    ("errors", {"/v1/chat/completions": (500, "Internal server error: CUDA OOM")}, "HTTP 500"),
    ("stream_fault", (2, "event", CUDA_OOM), "error event: CUDA OOM"),
    ("stream_fault", (2, "close", None), "stream truncated"),
])
def test_failed_requests_are_counted_and_fail_the_run(server, capsys, fault, value, message):
    setattr(server.app, fault, value)
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert failed
    assert "requests_succeeded: value 0, floor 8" in result["msg"] and message in result["msg"]
    assert [level["failures"] for level in result["result"]["levels"]] == [2, 6]


def test_slow_server_is_cut_off_by_the_runtime_bound(server, capsys):
    server.app.stream_fault = (2, "pause", 20.0)
    start = time.monotonic()
    failed, result = run_module(dict(SMALL, url=server.url, timeout=1.0), capsys)
    # Far below the pause, so that only a bound that is not enforced fails, not a busy machine.
    assert time.monotonic() - start < 10
    assert failed
    assert ("phases_completed: value 0, floor 5 (completed none of warmup, flush, concurrency_1, "
            "concurrency_n, acceptance within the 1 s runtime bound)") in result["msg"]
    assert "requests_succeeded: value 0, floor 0 (no measured request ran)" in result["msg"]


def test_unhealthy_server_fails_preflight(start_double, capsys):
    server = start_double(env={"SGLANG_DOUBLE_STARTUP_S": "60"})
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert failed and "preflight: value GET http" in result["msg"] and "HTTP 503" in result["msg"]


def test_result_file_is_written_and_not_in_check_mode(server, capsys, tmp_path):
    path = tmp_path / "bench.json"
    failed, result = run_module(dict(SMALL, url=server.url, result_path=str(path), _ansible_check_mode=True),
                                capsys)
    assert not failed and result["result_file"] == {"path": str(path), "written": False}
    assert not path.exists()
    failed, result = run_module(dict(SMALL, url=server.url, result_path=str(path)), capsys)
    assert not failed and result["result_file"]["written"] is True
    assert json.loads(path.read_text())["schema"] == "pro6000.inference.sglang_bench/v1"
    assert result["changed"] is False


def test_result_file_is_written_when_gates_fail(server, capsys, tmp_path):
    path = tmp_path / "bench.json"
    failed, _result = run_module(dict(SMALL, url=server.url, result_path=str(path), min_decode_tps=1e9), capsys)
    assert failed and json.loads(path.read_text())["passed"] is False


def test_api_key_is_used_and_not_logged(start_double, capsys):
    # The double answers 401 to every request without the key but /health and /metrics.
    server = start_double("--api-key", "s3cret")
    failed, result = run_module(dict(SMALL, url=server.url, api_key="s3cret"), capsys)
    assert not failed, result["msg"]
    assert "s3cret" not in json.dumps(result)


@pytest.mark.parametrize("args, message", [
    ({"concurrency": 0}, "concurrency must be at least 1, got 0"),
    ({"url": "http://127.0.0.1:notaport"}, "url 'http://127.0.0.1:notaport' is not a valid URL"),
    ({"url": "http://127.0.0.1:99999"}, "url 'http://127.0.0.1:99999' is not a valid URL: Port out of range"),
    ({"url": "http://[::1"}, "url 'http://[::1' is not a valid URL: Invalid IPv6 URL"),
    ({"timeout": -1}, "timeout must be a positive number of seconds, got -1.0"),
    ({"timeout": 0}, "timeout must be a positive number of seconds, got 0.0"),
    ({"request_timeout": 0}, "request_timeout must be a positive number of seconds, got 0.0"),
    ({"min_decode_tps": -5}, "min_decode_tps must not be negative, got -5.0"),
])
def test_bad_options_stop_before_any_request(server, capsys, args, message):
    failed, result = run_module(dict(SMALL, **dict({"url": server.url}, **args)), capsys)
    assert failed and result["msg"].startswith(message)
    assert not server.app.requests


def test_a_server_that_never_answers_ends_the_module_within_its_bound(silent, tmp_path):
    # On the server's clock (first connection to last close), without the interpreter's start-up.
    result = run_module_file("sglang_bench", dict(SMALL, url=silent.url, timeout=2, request_timeout=1.5), tmp_path)
    assert result["failed"] and "preflight: value GET %s/health: " % silent.url in result["msg"]
    assert silent.app.connection_span() <= 2 + SERVER_SIDE_SLACK_S


def test_barrier_releases_all_workers_together(start_double, capsys):
    # With a 0.6 s stream, 3 workers x 2 requests take ~1.2 s when released together and 3.6 s
    # one at a time; the streams are long enough that a busy machine's scheduling delays of a
    # few tens of milliseconds do not count.
    server = start_double(env={"SGLANG_DOUBLE_PREFILL_S": "0.6"})
    failed, result = run_module(dict(SMALL, url=server.url, warmup_requests=0), capsys)
    assert not failed, result["msg"]
    level = result["result"]["levels"][1]
    assert level["achieved_concurrency"] > 2.5


# --- hostile servers and options (issue 20, rows 5, 6 and 7) ----------------------------------

@pytest.mark.parametrize("args, message", [
    ({"timeout": float("inf")}, "timeout must be a finite number, got inf"),
    ({"timeout": 1e300}, "timeout must be at most 86400 seconds, got 1e+300"),
    ({"request_timeout": "nan"}, "request_timeout must be a finite number, got nan"),
    ({"concurrency": 100000000}, "concurrency must be at most 256 workers, got 100000000"),
    ({"requests_per_worker": 10 ** 9}, "requests_per_worker must be at most 1000 requests, got 1000000000"),
    ({"max_tokens": 10 ** 7}, "max_tokens must be at most 65536 tokens, got 10000000"),
    ({"warmup_requests": 101}, "warmup_requests must be at most 100 requests, got 101"),
    ({"min_decode_tps": float("nan")}, "min_decode_tps must be a finite number, got nan"),
])
def test_unbounded_options_are_refused_before_any_request(server, capsys, args, message):
    failed, result = run_module(dict(SMALL, **dict({"url": server.url}, **args)), capsys)
    assert failed and result["msg"] == message
    assert not server.app.requests


@pytest.mark.parametrize("path, answer, message", [
    ("/server_info", [1, 2], "preflight: value GET {url}/server_info: HTTP 200: expected a JSON object, got array"),
    ("/v1/models", {"data": "Qwen"},
     "preflight: value GET {url}/v1/models: expected data to be a JSON array, got string"),
])
def test_json_of_another_shape_fails_the_preflight_naming_the_url(server, capsys, path, answer, message):
    server.app.answers[path] = answer
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert failed and message.format(url=server.url) in result["msg"]
    assert not any(r["method"] == "POST" for r in server.app.requests)


def test_streams_and_answers_of_another_shape_fail_their_requests(server, capsys):
    server.app.stream_fault = (0, "event", {"choices": {"delta": "x"}})
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert failed
    assert "requests_succeeded: value 0, floor 8" in result["msg"]
    assert "unexpected event ('str' object has no attribute 'get')" in result["msg"]


def test_a_metrics_page_with_a_malformed_sample_fails_naming_the_url(server, capsys):
    server.app.answers["/metrics"] = "sglang:generation_tokens_total{a=\"b\"} lots\n"
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert failed and result["msg"] == ("GET %s/metrics: malformed sample: "
                                        "'sglang:generation_tokens_total{a=\"b\"} lots'" % server.url)


def test_check_mode_sends_nothing_that_changes_the_server(server, capsys):
    failed, result = run_module(dict(SMALL, url=server.url, expect_speculation=True, _ansible_check_mode=True),
                                capsys)
    assert not failed, result["msg"]
    assert [(r["method"], r["path"]) for r in server.app.requests] == [
        ("GET", "/health"), ("GET", "/v1/models"), ("GET", "/server_info")]
    doc = result["result"]
    assert doc["check_mode"] is True and doc["phases"] == ["preflight"] and doc["levels"] == []
    assert doc["would_run"] == ["warmup", "flush", "concurrency_1", "concurrency_n", "acceptance"]
    assert doc["would_send"] == {"warmup": 1, "flush": 1, "concurrency_1": 2, "concurrency_n": 6, "acceptance": 3}
    assert result["msg"] == "check mode: the server answers; would run warmup, flush, concurrency_1, concurrency_n, " \
                            "acceptance"
    assert result["changed"] is False


def test_check_mode_still_reports_a_server_that_does_not_speculate(start_double, capsys):
    server = start_double(speculative=False)
    failed, result = run_module(dict(SMALL, url=server.url, expect_speculation=True, _ansible_check_mode=True),
                                capsys)
    assert failed and "speculation_active: value None" in result["msg"]
    assert all(r["method"] == "GET" for r in server.app.requests)


def test_credentials_in_the_url_are_not_echoed(start_double, capsys):
    server = start_double()
    failed, result = run_module(dict(SMALL, url=server.url.replace("//", "//alice:s3cret@")), capsys)
    assert not failed, result["msg"]
    assert result["result"]["server"]["url"] == server.url
    assert "s3cret" not in json.dumps(result) and "alice" not in json.dumps(result)
    server = start_double(env={"SGLANG_DOUBLE_STARTUP_S": "60"})
    failed, result = run_module(dict(SMALL, url=server.url.replace("//", "//alice:s3cret@")), capsys)
    assert failed and "preflight: value GET %s/health: HTTP 503" % server.url in result["msg"]
    assert "s3cret" not in json.dumps(result) and "alice" not in json.dumps(result)


def test_each_level_reports_tpot_e2e_and_request_throughput(server, capsys, tmp_path):
    records = tmp_path / "requests.jsonl"
    failed, result = run_module(dict(SMALL, url=server.url, records_path=str(records)), capsys)
    assert not failed, result["msg"]
    for level in result["result"]["levels"]:
        for key in ("ttft_s", "tpot_s", "e2e_s"):
            assert {"p50", "p95", "p99"} <= set(level[key]) and level[key]["count"] == level["successes"]
        # bench_serving's TPOT: (e2e - ttft) / (n_out - 1), never above the request's own latency
        assert 0 < level["tpot_s"]["max"] <= level["e2e_s"]["max"] / 24
        # wall_s is rounded to 0.1 ms: the throughput agrees within what that rounding moves.
        rounding = 0.00005 / level["wall_s"]
        assert level["request_throughput"] == pytest.approx(level["successes"] / level["wall_s"], rel=2 * rounding)
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) == 2 + 6 and result["records_file"] == {"path": str(records), "written": True, "records": 8}
    assert {line["phase"] for line in lines} == {"concurrency_1", "concurrency_n"}
    first = lines[0]
    assert first["ok"] and first["output_tokens"] == 25
    assert first["tpot_s"] == pytest.approx((first["e2e_s"] - first["ttft_s"]) / 24)


def test_latency_objectives_gate_the_design_concurrency(server, capsys):
    failed, result = run_module(dict(SMALL, url=server.url, max_ttft_p99_s=1e-9, max_tpot_p99_s=60), capsys)
    assert failed
    found = gates(result)
    assert found["ttft_p99_s"]["passed"] is False and found["ttft_p99_s"]["floor"] == 1e-9
    assert found["tpot_p99_s"]["passed"] is True
    assert "ttft_p99_s" in result["msg"] and "tpot_p99_s" not in result["msg"]
    assert result["result"]["parameters"]["max_ttft_p99_s"] == 1e-9
    # Goodput counts the requests that meet every objective: none meets a TTFT of 1 ns.
    assert all(level["goodput"] == 0 for level in result["result"]["levels"])
    failed, result = run_module(dict(SMALL, url=server.url, max_tpot_p99_s=60), capsys)
    assert not failed
    for level in result["result"]["levels"]:
        assert level["goodput"] == pytest.approx(level["request_throughput"])
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert all(level["goodput"] is None for level in result["result"]["levels"])
    failed, result = run_module(dict(SMALL, url=server.url, max_tpot_p99_s=0), capsys)
    assert failed and result["msg"] == "max_tpot_p99_s must be a positive number of seconds, got 0.0"


@pytest.mark.parametrize("thinking", [False, True])
def test_the_prompt_mode_is_explicit_and_recorded(server, capsys, thinking):
    failed, result = run_module(dict(SMALL, url=server.url, thinking=thinking), capsys)
    assert not failed, result["msg"]
    mode = result["result"]["prompt_mode"]
    assert mode["thinking"] is thinking and mode["prompt_set"] == "builtin" and mode["prompts"] == 8
    chat = [r["payload"] for r in server.app.requests if r["path"] == "/v1/chat/completions"]
    assert chat and all(p["chat_template_kwargs"] == {"enable_thinking": thinking} for p in chat)


def test_a_site_prompt_file_is_used_in_order(server, capsys, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "first site prompt"}\n\n{"prompt": "second site prompt", "id": 2}\n')
    failed, result = run_module(dict(SMALL, url=server.url, prompts_path=str(prompts)), capsys)
    assert not failed, result["msg"]
    assert result["result"]["prompt_mode"]["prompt_set"] == str(prompts)
    assert result["result"]["prompt_mode"]["prompts"] == 2
    sent = [r["payload"]["messages"][0]["content"] for r in server.app.requests
            if r["path"] == "/v1/chat/completions"]
    sent += [r["payload"]["text"] for r in server.app.requests if r["path"] == "/generate"]
    assert {text.split("] ", 1)[1] for text in sent} == {"first site prompt", "second site prompt"}


def test_no_two_requests_share_a_prefix(server, capsys):
    # Issue 37, item 4: smg's cache_aware pins a prompt it has seen (match above 0.5) to the
    # replica that took it first; a tag of its own in front of each makes every request new to it.
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert not failed, result["msg"]
    assert result["result"]["prompt_mode"]["distinct_prefix"] is True
    sent = [r["payload"]["messages"][0]["content"] for r in server.app.requests if r["path"] == "/v1/chat/completions"]
    sent += [r["payload"]["text"] for r in server.app.requests if r["path"] == "/generate"]
    assert len(sent) > len(sglang_bench.PROMPTS) and all(re.match(r"\[[0-9a-f]{8}\] \S", text) for text in sent)
    assert len({text[:10] for text in sent}) == len(sent)
    assert {text.split("] ", 1)[1] for text in sent} <= set(sglang_bench.PROMPTS)


@pytest.mark.parametrize("content, message", [
    ("not json\n", "line 1 is not JSON"),
    ('{"text": "x"}\n', 'line 1 has no non-empty "prompt" string'),
    ("\n", "holds no prompt"),
])
def test_a_bad_prompt_file_is_refused_before_any_request(server, capsys, tmp_path, content, message):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(content)
    failed, result = run_module(dict(SMALL, url=server.url, prompts_path=str(prompts)), capsys)
    assert failed and message in result["msg"] and result["msg"].startswith("prompts_path: ")
    assert not server.app.requests


def test_itl_is_reported_per_chunk_and_per_token(server, capsys):
    """25 tokens: the prefill's alone, then 6 chunks of 4. Per chunk, bench_serving's OpenAI
    backends: the 6 gaps after the first content chunk. Per token, its native backend: each gap
    over its 4 tokens, 24 values that sum to the same time."""
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert not failed, result["msg"]
    for level in result["result"]["levels"]:
        chunk, token = level["itl_s"], level["itl_token_s"]
        assert chunk["count"] == 6 * level["successes"] and token["count"] == 24 * level["successes"]
        assert token["mean"] == pytest.approx(chunk["mean"] / 4)
        assert {"p50", "p95", "p99"} <= set(chunk) and chunk["min"] >= 0
        # Every gap lies within its request's decode time.
        assert chunk["max"] <= level["e2e_s"]["max"] - level["ttft_s"]["min"]


def test_without_counts_per_event_itl_per_token_is_null(start_double, capsys):
    server = start_double(env={"SGLANG_DOUBLE_USAGE_STATS": "final"})
    failed, result = run_module(dict(SMALL, url=server.url), capsys)
    assert not failed, result["msg"]
    for level in result["result"]["levels"]:
        assert level["itl_s"]["count"] == 6 * level["successes"] and level["itl_token_s"] is None


# How late the first open-loop request of a level may reach the server (a loaded machine).
ARRIVAL_SLACK_S = 0.05


def test_open_loop_levels_send_at_poisson_arrivals(server, capsys, tmp_path):
    records = tmp_path / "requests.jsonl"
    failed, result = run_module(dict(SMALL, url=server.url, request_rates=[20, 400], open_loop_requests=6,
                                     max_e2e_p99_s=60, records_path=str(records)), capsys)
    assert not failed, result["msg"]
    doc = result["result"]
    assert doc["phases"] == ["preflight", "warmup", "flush", "concurrency_1", "concurrency_n", "open_loop",
                             "acceptance"]
    assert [level["request_rate"] for level in doc["open_loop"]] == [20, 400]
    chat = [r for r in server.app.requests if r["path"] == "/v1/chat/completions"]
    sent = 0
    for level, rate in zip(doc["open_loop"], (20, 400)):
        assert (level["phase"], level["concurrency"], level["requests"], level["successes"]) == ("open_loop", None, 6, 6)
        offsets = bench.poisson_arrivals(rate, 6)
        assert level["arrivals_s"] == pytest.approx(offsets[-1], abs=1e-4)
        # Each request reaches the server no earlier than its arrival after the first (less what
        # the first one may have been late), whatever the others do: a closed-loop burst of 6
        # would reach it all at once.
        arrived = sorted(r["t"] for r in chat[-12:][sent:sent + 6])
        sent += 6
        for index, at in enumerate(arrived):
            assert at - arrived[0] >= offsets[index] - ARRIVAL_SLACK_S
        assert level["goodput"] == pytest.approx(level["request_throughput"])
        assert level["itl_s"]["count"] == 6 * 6
    assert gates(result)["requests_succeeded"]["floor"] == 2 + 6 + 12
    assert gates(result)["e2e_p99_s"]["passed"] is True
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [line["request_rate"] for line in lines if line["phase"] == "open_loop"] == [20] * 6 + [400] * 6


def test_poisson_arrivals_have_the_asked_rate_and_are_reproducible():
    offsets = bench.poisson_arrivals(10.0, 2001)
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert offsets[0] == 0 and min(gaps) > 0
    # Mean gap 1/rate within 5 % over 2000 draws (the standard error is 2.2 %).
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.05)
    assert bench.poisson_arrivals(10.0, 2001) == offsets


def test_an_e2e_objective_gates_and_counts_in_goodput(server, capsys):
    failed, result = run_module(dict(SMALL, url=server.url, max_e2e_p99_s=1e-9), capsys)
    assert failed and "e2e_p99_s" in result["msg"] and gates(result)["e2e_p99_s"]["passed"] is False
    assert all(level["goodput"] == 0 for level in result["result"]["levels"])


@pytest.mark.parametrize("args, message", [
    ({"request_rates": [0]}, "request_rates[0] must be a positive number of requests per second, got 0.0"),
    ({"request_rates": [5, "inf"]}, "request_rates[1] must be a finite number, got inf"),
    ({"request_rates": [1e6]}, "request_rates[0] must be at most 10000 requests per second, got 1000000.0"),
    ({"open_loop_requests": 257}, "open_loop_requests must be at most 256 requests, got 257"),
    ({"max_e2e_p99_s": 0}, "max_e2e_p99_s must be a positive number of seconds, got 0.0"),
])
def test_bad_open_loop_options_stop_before_any_request(server, capsys, args, message):
    failed, result = run_module(dict(SMALL, url=server.url, **args), capsys)
    assert failed and result["msg"] == message
    assert not server.app.requests


def test_check_mode_counts_the_open_loop_requests(server, capsys):
    failed, result = run_module(dict(SMALL, url=server.url, request_rates=[1, 2], open_loop_requests=5,
                                     _ansible_check_mode=True), capsys)
    assert not failed, result["msg"]
    assert result["result"]["would_send"]["open_loop"] == 10
    assert "open_loop" in result["result"]["would_run"]


# --- hostile servers, round 2 (issue 36, finding 3) -------------------------------------------

HOSTILE = {"max_tokens": 25, "acceptance_max_tokens": 32, "concurrency": 1, "requests_per_worker": 1,
           "single_stream_requests": 1, "warmup_requests": 0, "acceptance_requests": 1, "flush_cache": False,
           "timeout": 30, "request_timeout": 10}


def preflight(speculative_algorithm=None):
    """The answers of a server that passes the preflight: healthy, one model, its server info."""
    return {"/health": http_answer(b""), "/v1/models": http_answer({"data": [{"id": "m"}]}),
            "/server_info": http_answer({"speculative_algorithm": speculative_algorithm})}


def chat_stream(*counts, extra=b""):
    """A whole SSE answer: a role-only delta, one content event per count (the server's
    cumulative completion_tokens), ``extra`` and [DONE]."""
    events = [{"choices": [{"delta": {"role": "assistant"}}]}] + [
        {"choices": [{"delta": {"content": "x"}}], "usage": {"completion_tokens": count, "prompt_tokens": 3}}
        for count in counts]
    body = b"".join(b"data: %s\n\n" % json.dumps(event).encode() for event in events) + extra + b"data: [DONE]\n\n"
    return http_answer(body, "text/event-stream")


@pytest.mark.parametrize("count", [10 ** 12, 10 ** 30])
def test_a_token_count_beyond_what_was_asked_fails_naming_the_endpoint(capsys, count):
    with HostileServer(dict(preflight(), **{"/v1/chat/completions": chat_stream(1, count)})) as hostile:
        failed, result = run_module(dict(HOSTILE, url=hostile.url), capsys)
    assert failed and "requests_succeeded: value 0, floor 2" in result["msg"]
    assert ("failed: POST %s/v1/chat/completions: unexpected event (usage.completion_tokens %d is more than the 25 "
            "tokens asked)" % (hostile.url, count)) in result["msg"]


@pytest.mark.parametrize("meta_info, message", [
    ({"completion_tokens": 10 ** 30, "spec_verify_ct": 3},
     "meta_info.completion_tokens %d is more than the 32 tokens asked" % 10 ** 30),
    ({"completion_tokens": 20, "spec_verify_ct": 10 ** 12},
     "meta_info.spec_verify_ct %d is more than the 32 tokens asked" % 10 ** 12),
])
def test_acceptance_counts_beyond_what_was_asked_fail_naming_the_endpoint(capsys, meta_info, message):
    answers = dict(preflight("DFLASH"), **{"/v1/chat/completions": chat_stream(1, 25),
                                           "/generate": http_answer({"text": "x", "meta_info": meta_info})})
    with HostileServer(answers) as hostile:
        failed, result = run_module(dict(HOSTILE, url=hostile.url), capsys)
    acceptance = result["result"]["acceptance"]
    assert failed and acceptance["value"] is None
    assert acceptance["errors"] == ["POST %s/generate: answer of an unexpected shape (%s): %r" % (
        hostile.url, message, http_answer({"text": "x", "meta_info": meta_info}).split(b"\r\n\r\n", 1)[1][:200])]


@pytest.mark.parametrize("where", ["/v1/models", "/v1/chat/completions", "/generate"])
def test_json_nested_too_deep_fails_naming_the_endpoint(capsys, where):
    deep = {"/v1/models": http_answer(DEEP_JSON),
            "/v1/chat/completions": chat_stream(1, 25, extra=b"data: %s\n\n" % DEEP_JSON),
            "/generate": http_answer(DEEP_JSON)}[where]
    answers = dict(preflight("DFLASH"), **{"/v1/chat/completions": chat_stream(1, 25),
                                           "/generate": http_answer({"meta_info": {"completion_tokens": 20,
                                                                                   "spec_verify_ct": 5}})})
    answers[where] = deep
    with HostileServer(answers) as hostile:
        failed, result = run_module(dict(HOSTILE, url=hostile.url), capsys)
    assert failed
    if where == "/v1/models":
        assert "preflight: value GET %s/v1/models: HTTP 200: body is not JSON (JSON nested too deep)" % (
            hostile.url) in result["msg"]
    elif where == "/generate":
        assert result["result"]["acceptance"]["errors"] == [
            "POST %s/generate: the answer is not JSON: JSON nested too deep" % hostile.url]
    else:
        assert "failed: POST %s/v1/chat/completions: malformed event: '[[[[" % hostile.url in result["msg"]


def test_sse_comments_one_byte_per_packet_keep_time_and_memory_bounded(tmp_path):
    refused = "http://127.0.0.1:%d" % free_port()
    _result, _err, baseline, _seconds = run_module_measured(
        "sglang_bench", dict(HOSTILE, url=refused, timeout=4), tmp_path, MEASURED_MEMORY_LIMIT, 60)
    # One comment line that never ends, one byte per packet as fast as they go (the more reads,
    # the longer re-joining the pending line took), for longer than the module's timeout.
    comments = Dribble(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n:", b" ping", 8,
                       spacing=0)
    with HostileServer(dict(preflight(), **{"/v1/chat/completions": comments})) as hostile:
        # Killed at 30 s (subprocess.TimeoutExpired): re-joining the pending line on every read took 84 s.
        result, err, peak, seconds = run_module_measured(
            "sglang_bench", dict(HOSTILE, url=hostile.url, timeout=4), tmp_path, MEASURED_MEMORY_LIMIT, 30)
    assert seconds <= 4 + 2
    # The dribble flowed for the whole 4 s, one byte a packet: over 200,000 bytes on a quiet
    # machine, 174,586 in a cold test run with three stages at a time (a bound of 200,000 failed it).
    assert hostile.sent > 100000
    # 4 MiB of slack for the interpreter and the allocator (Python 3.13 used 2.1 MiB of it); main
    # held 40 (bench) to 150 (probe) bytes per byte sent.
    assert peak - baseline <= 2 * hostile.sent + 4 * 1024 * 1024, (peak - baseline, hostile.sent)
    assert result is not None, err
    assert result["failed"] and ("failed: POST %s/v1/chat/completions: deadline reached while waiting for the answer"
                                 % hostile.url) in result["msg"]


def test_a_metrics_page_of_short_lines_keeps_memory_to_its_bytes(tmp_path):
    refused = "http://127.0.0.1:%d" % free_port()
    _result, _err, baseline, _seconds = run_module_measured(
        "sglang_bench", dict(HOSTILE, url=refused), tmp_path, MEASURED_MEMORY_LIMIT, 60)
    # 24 MB of comment lines, as Prometheus's text format allows: a list of every line cost ~20
    # times the page.
    page = http_answer(b"# x\n" * (6 * 1024 * 1024), "text/plain")
    answers = dict(preflight(), **{"/v1/chat/completions": chat_stream(1, 25), "/flush_cache": http_answer(b""),
                                   "/metrics": page})
    with HostileServer(answers) as hostile:
        result, err, peak, _seconds = run_module_measured(
            "sglang_bench", dict(HOSTILE, url=hostile.url, flush_cache=True), tmp_path, MEASURED_MEMORY_LIMIT, 60)
    assert result is not None, err
    assert "/metrics" in hostile.paths and result["result"]["counters"] is None
    # Held as bytes: what was read and the answer's body copied out of it.
    assert peak - baseline <= 3 * len(page) + 2 * 1024 * 1024, (peak - baseline, len(page))

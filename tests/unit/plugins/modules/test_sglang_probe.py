"""sglang_probe against the SGLang test double on loopback (tests/unit/plugins/conftest.py).

The client's own behaviours (deadlines, retries, the /get_server_info alias, the API key header)
are tested in tests/unit/plugins/module_utils/_sglang/test_sglang_client.py; these tests cover the
module's wiring and checks."""
import json
import re

import pytest

from support import (DEEP_JSON, MEASURED_MEMORY_LIMIT, SERVER_SIDE_SLACK_S, Dribble, HostileServer, free_port,
                     http_answer, run_main, run_module_file, run_module_measured)

from ansible_collections.pro6000.inference.plugins.modules import sglang_probe


def run_module(args, capsys):
    return run_main(sglang_probe.main, args, capsys)


@pytest.fixture(name="expected")
def fixture_expected(models):
    """What the default double serves, the model path written with a trailing slash."""
    target, drafter = models
    return {"model": str(target) + "/", "speculative_algorithm": "dflash", "speculative_num_draft_tokens": 16,
            "speculative_draft_model_path": str(drafter)}


def test_matching_server_returns_facts_and_no_change(server, expected, capsys):
    failed, result = run_module(dict(expected, url=server.url), capsys)
    assert not failed, result["msg"]
    assert result["changed"] is False and result["mismatches"] == []
    facts = result["server"]
    assert facts["server_info_path"] == "/server_info" and facts["version"] == "0.5.23"
    assert facts["models"] == ["Qwen3.6-27B"] and facts["max_model_len"] == 262144
    assert facts["speculative"]["algorithm"] == "DFLASH" and facts["speculative"]["num_draft_tokens"] == 16
    # No verify step yet: the scheduler's average is 0.
    assert facts["speculative"]["avg_spec_accept_length"] == [0.0]
    assert result["model_info"]["architectures"] == ["Qwen3_5ForConditionalGeneration"]


def test_every_mismatch_is_named(start_double, expected, capsys):
    server = start_double("--speculative-dflash-block-size", "8")
    failed, result = run_module(dict(expected, url=server.url, speculative_algorithm="DDTREE",
                                     speculative_ddtree_budget=15,
                                     speculative_draft_model_path="/srv/models/other"), capsys)
    assert failed and result["changed"] is False
    assert "speculative_algorithm: expected 'DDTREE', the server reports 'DFLASH'" in result["msg"]
    assert "speculative_num_draft_tokens: expected 16, the server reports 8" in result["msg"]
    assert "speculative_ddtree_budget: expected 15, the server reports None" in result["msg"]
    assert "speculative_draft_model_path: expected '/srv/models/other'" in result["msg"]
    assert [m["setting"] for m in result["mismatches"]] == [
        "speculative_algorithm", "speculative_num_draft_tokens", "speculative_ddtree_budget",
        "speculative_draft_model_path"]


def test_several_servers_are_checked_in_one_run_and_each_failure_named(server, start_double, expected, capsys):
    """A host's replicas, then its gateway: every one checked, every one that fails named."""
    wrong = start_double("--speculative-dflash-block-size", "8")
    down = "http://127.0.0.1:%d" % free_port()
    failed, result = run_module(dict(expected, servers=[{"url": server.url}, {"url": wrong.url, "name": "sglang-qwen-1"},
                                                        {"url": down}, {"url": server.url}]), capsys)
    assert failed and result["msg"].startswith("2 of 4 servers failed the check: ")
    assert ("sglang-qwen-1: The server at %s does not serve what was expected: speculative_num_draft_tokens"
            % wrong.url) in result["msg"]
    assert " | %s: " % down in result["msg"] and "ConnectionRefusedError" in result["msg"]
    assert [facts and facts["url"] for facts in result["servers"]] == [server.url, wrong.url, None, server.url]
    assert result["mismatches"] == [{"setting": "speculative_num_draft_tokens", "expected": 16, "actual": 8,
                                     "url": wrong.url}]

    failed, result = run_module(dict(expected, servers=[{"url": server.url}, {"url": server.url}]), capsys)
    assert not failed and len(result["servers"]) == 2 and result["server"]["url"] == server.url


def test_server_that_should_speculate_but_does_not_fails(start_double, capsys):
    server = start_double(speculative=False)
    failed, result = run_module({"url": server.url, "speculative_algorithm": "DFLASH"}, capsys)
    assert failed and "speculative_algorithm: expected 'DFLASH', the server reports 'NONE'" in result["msg"]


def test_expecting_no_speculation(start_double, capsys):
    server = start_double(speculative=False)
    failed, result = run_module({"url": server.url, "speculative_algorithm": "none"}, capsys)
    assert not failed, result["msg"]


def test_ddtree_fork_flag_counts_as_ddtree(start_double, capsys):
    server = start_double("--speculative-dflash-enable-ddtree", profile="fork-ddtree-flag")
    failed, result = run_module({"url": server.url, "speculative_algorithm": "DDTREE",
                                 "speculative_ddtree_budget": 15}, capsys)
    assert not failed, result["msg"]


def test_wrong_model_is_named(server, capsys):
    failed, result = run_module({"url": server.url, "model": "/srv/models/Llama"}, capsys)
    assert failed and "model: expected '/srv/models/Llama'" in result["msg"]


def test_served_model_name_matches(server, capsys):
    failed, result = run_module({"url": server.url, "model": "Qwen3.6-27B"}, capsys)
    assert not failed, result["msg"]


def test_waits_for_readiness_within_the_deadline(start_double, capsys):
    server = start_double(env={"SGLANG_DOUBLE_STARTUP_S": "0.6"})
    failed, result = run_module({"url": server.url, "wait_timeout": 10, "wait_interval": 0.1}, capsys)
    assert not failed, result["msg"]
    assert 0.3 <= result["server"]["waited_s"] < 5


def test_not_ready_by_the_deadline_fails(start_double, capsys):
    server = start_double(env={"SGLANG_DOUBLE_STARTUP_S": "60"})
    failed, result = run_module({"url": server.url, "wait_timeout": 0.4, "wait_interval": 0.1}, capsys)
    assert failed
    # The message gives the time waited: at least wait_timeout, more when the machine is busy.
    waited = re.search(r"/health did not answer HTTP 200 within (\d+\.\d) s", result["msg"])
    assert waited and 0.4 <= float(waited.group(1)) < 5
    assert "last answer: HTTP 503" in result["msg"]


@pytest.mark.parametrize("state", ["failed", "inactive"])
def test_a_failed_or_stopped_unit_ends_the_wait_at_once(start_double, capsys, monkeypatch, state):
    """`systemctl is-active` prints the unit's state (exit status 3 unless active): a unit that
    failed, or that is stopped and so will not start by itself, ends the wait."""
    server = start_double(env={"SGLANG_DOUBLE_STARTUP_S": "60"})
    asked = []

    def systemctl(self, args, **kwargs):
        asked.append(args)
        return 3, state + "\n", ""
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule.run_command", systemctl)
    failed, result = run_module({"url": server.url, "wait_timeout": 30, "wait_interval": 0.1,
                                 "unit": "sglang-qwen.service"}, capsys)
    assert failed
    assert "systemd reports sglang-qwen.service %s (HTTP 503" % state in result["msg"]
    assert asked == [["systemctl", "is-active", "sglang-qwen.service"]]


def test_a_unit_still_starting_is_waited_for(start_double, capsys, monkeypatch):
    server = start_double(env={"SGLANG_DOUBLE_STARTUP_S": "0.5"})
    # Starting (between automatic restarts too), then, where systemd cannot say, nothing.
    states = iter([(3, "activating\n", ""), (1, "", "Failed to connect to bus")])
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule.run_command",
                        lambda self, args, **kwargs: next(states, (0, "active\n", "")))
    failed, result = run_module({"url": server.url, "wait_timeout": 10, "wait_interval": 0.1,
                                 "unit": "sglang-qwen.service"}, capsys)
    assert not failed, result["msg"]


def test_the_unit_s_run_is_named_by_systemd_s_invocation_id(start_double, capsys, monkeypatch):
    """`systemctl show --property=InvocationID --value` prints the id of the unit's current run
    (systemd 252 in a lab container: a1041905b76d414788915dbd332d3a44), an empty line for a unit
    that is not running; without systemd (not the init system) it fails."""
    server = start_double()
    answers = {"is-active": (0, "active\n", ""), "show": (0, "a1041905b76d414788915dbd332d3a44\n", "")}
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule.run_command",
                        lambda self, args, **kwargs: answers[args[1]])
    failed, result = run_module({"url": server.url, "unit": "sglang-qwen-0.service"}, capsys)
    assert not failed, result["msg"]
    assert result["server"]["unit"] == "sglang-qwen-0.service"
    assert result["server"]["invocation"] == "a1041905b76d414788915dbd332d3a44"

    answers["show"] = (1, "", "System has not been booted with systemd as init system (PID 1).")
    failed, result = run_module({"url": server.url, "unit": "sglang-qwen-0.service"}, capsys)
    assert not failed and result["server"]["invocation"] is None

    failed, result = run_module({"url": server.url}, capsys)
    assert "invocation" not in result["server"]


def test_server_down_fails_with_the_reason(capsys):
    port = free_port()
    failed, result = run_module({"url": "http://127.0.0.1:%d" % port}, capsys)
    assert failed and "ConnectionRefusedError" in result["msg"]


@pytest.mark.parametrize("args, bound", [
    ({"timeout": 2}, 2),
    ({"timeout": 1, "wait_timeout": 1.5, "wait_interval": 0.2}, 2.5),
])
def test_a_server_that_never_answers_ends_the_module_within_its_bound(silent, tmp_path, args, bound):
    # Measured by the server, from the first connection to the last close: the interpreter's
    # start-up, which a loaded machine stretches, is not part of the module's bound.
    result = run_module_file("sglang_probe", dict(args, url=silent.url), tmp_path)
    assert result["failed"] and "%s/health did not answer HTTP 200 within" % silent.url in result["msg"]
    assert silent.app.connection_span() <= bound + SERVER_SIDE_SLACK_S


@pytest.mark.parametrize("args, message", [
    ({"url": "http://127.0.0.1:notaport"}, "url 'http://127.0.0.1:notaport' is not a valid URL"),
    ({"url": "http://127.0.0.1:99999"}, "url 'http://127.0.0.1:99999' is not a valid URL: Port out of range"),
    ({"url": "http://[::1"}, "url 'http://[::1' is not a valid URL: Invalid IPv6 URL"),
    ({"timeout": -1}, "timeout must be a positive number of seconds, got -1.0"),
    ({"timeout": 0}, "timeout must be a positive number of seconds, got 0.0"),
    ({"wait_interval": -1}, "wait_interval must be a positive number of seconds, got -1.0"),
    ({"wait_timeout": -1}, "wait_timeout must not be negative, got -1.0"),
])
def test_bad_options_are_named_before_any_request(server, capsys, args, message):
    failed, result = run_module(dict({"url": server.url}, **args), capsys)
    assert failed and result["msg"].startswith(message)
    assert not server.app.requests


def test_check_mode_behaves_the_same(server, expected, capsys):
    failed, result = run_module(dict(expected, url=server.url, _ansible_check_mode=True), capsys)
    assert not failed and result["changed"] is False


def test_api_key_is_used_and_not_logged(start_double, capsys):
    # The double answers 401 to every request without the key but /health.
    server = start_double("--api-key", "s3cret")
    failed, result = run_module({"url": server.url, "api_key": "s3cret"}, capsys)
    assert not failed, result["msg"]
    assert "s3cret" not in json.dumps(result)


# --- hostile servers and options (issue 20, rows 5 and 7) -------------------------------------

@pytest.mark.parametrize("args, message", [
    ({"timeout": float("inf")}, "timeout must be a finite number, got inf"),
    ({"timeout": "nan"}, "timeout must be a finite number, got nan"),
    ({"timeout": 1e300}, "timeout must be at most 3600 seconds, got 1e+300"),
    ({"wait_timeout": 1e300}, "wait_timeout must be at most 86400 seconds, got 1e+300"),
    ({"wait_timeout": "inf"}, "wait_timeout must be a finite number, got inf"),
    ({"wait_interval": 1e9}, "wait_interval must be at most 3600 seconds, got 1000000000.0"),
])
def test_unbounded_time_options_are_refused_before_any_request(server, capsys, args, message):
    failed, result = run_module(dict({"url": server.url}, **args), capsys)
    assert failed and result["msg"] == message
    assert not server.app.requests


@pytest.mark.parametrize("path, answer, message", [
    ("/server_info", [1, 2], "GET {url}/server_info: HTTP 200: expected a JSON object, got array"),
    ("/model_info", "text", "GET {url}/model_info: HTTP 200: expected a JSON object, got string"),
    ("/v1/models", {"data": {"id": "m"}}, "GET {url}/v1/models: expected data to be a JSON array, got object"),
])
def test_json_of_another_shape_fails_naming_the_url(server, capsys, path, answer, message):
    server.app.answers[path] = json.dumps(answer) if isinstance(answer, str) else answer
    failed, result = run_module({"url": server.url}, capsys)
    assert failed and result["msg"].startswith(message.format(url=server.url))


def test_a_chunk_size_that_is_not_hex_fails_naming_the_url(server, capsys):
    server.app.raw["/health"] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnope\r\n{}\r\n0\r\n\r\n"
    failed, result = run_module({"url": server.url}, capsys)
    assert failed
    assert result["msg"] == ("%s/health did not answer HTTP 200 within 0.0 s; last answer: GET %s/health: "
                             "malformed chunked body: chunk size b'nope' is not hexadecimal" % (server.url, server.url))


def test_credentials_in_the_url_are_not_echoed(server, expected, capsys):
    url = server.url.replace("//", "//alice:s3cret@")
    failed, result = run_module(dict(expected, url=url), capsys)
    assert not failed, result["msg"]
    assert result["server"]["url"] == server.url
    assert "s3cret" not in json.dumps(result) and "alice" not in json.dumps(result)
    down = "http://alice:s3cret@127.0.0.1:%d" % free_port()
    failed, result = run_module({"url": down}, capsys)
    assert failed and "ConnectionRefusedError" in result["msg"]
    assert "s3cret" not in json.dumps(result) and "alice" not in json.dumps(result)
    failed, result = run_module({"url": "http://alice:s3cret@127.0.0.1:notaport"}, capsys)
    assert failed and "s3cret" not in json.dumps(result)


# --- hostile servers, round 2 (issue 36, finding 3) -------------------------------------------

HEALTHY = http_answer(b"")


@pytest.mark.parametrize("path", ["/server_info", "/model_info", "/v1/models"])
def test_json_nested_too_deep_fails_naming_the_url(capsys, path):
    answers = {"/health": HEALTHY, "/server_info": http_answer({}), "/model_info": http_answer({}),
               "/v1/models": http_answer({"data": []}), path: http_answer(DEEP_JSON)}
    with HostileServer(answers) as hostile:
        failed, result = run_module({"url": hostile.url}, capsys)
    assert failed and result["msg"] == "GET %s%s: HTTP 200: body is not JSON (JSON nested too deep): %r" % (
        hostile.url, path, DEEP_JSON[:200])


def test_a_count_of_infinity_is_a_mismatch_not_a_traceback(capsys):
    answers = {"/health": HEALTHY, "/server_info": http_answer(b'{"speculative_num_draft_tokens": Infinity}'),
               "/model_info": http_answer({}), "/v1/models": http_answer({"data": []})}
    with HostileServer(answers) as hostile:
        failed, result = run_module({"url": hostile.url, "speculative_num_draft_tokens": 16}, capsys)
    assert failed and result["msg"] == ("The server at %s does not serve what was expected: speculative_num_draft_"
                                        "tokens: expected 16, the server reports inf" % hostile.url)


def test_one_byte_per_packet_keeps_memory_to_the_bytes_and_time_to_the_timeout(tmp_path):
    # The same module run against a server that refuses: what the interpreter and the module hold anyway.
    _result, _err, baseline, _seconds = run_module_measured(
        "sglang_probe", {"url": "http://127.0.0.1:%d" % free_port(), "timeout": 4}, tmp_path, MEASURED_MEMORY_LIMIT, 60)
    endless = Dribble(b"HTTP/1.1 200 OK\r\nContent-Length: 60000000\r\n\r\n", b"x", 8)
    with HostileServer({"/health": endless}) as hostile:
        result, err, peak, seconds = run_module_measured("sglang_probe", {"url": hostile.url, "timeout": 4}, tmp_path,
                                                         MEASURED_MEMORY_LIMIT, 60)
    # The answer is held as its bytes (twice while it is copied out), whatever the size of its reads;
    # a Python object per read costs about 120 bytes (the 694 MB).
    assert hostile.sent > 30000
    # 4 MiB of slack for the interpreter and the allocator (Python 3.13 used 2.1 MiB of it); main
    # held 40 (bench) to 150 (probe) bytes per byte sent.
    assert peak - baseline <= 2 * hostile.sent + 4 * 1024 * 1024, (peak - baseline, hostile.sent)
    assert seconds <= 4 + 2
    assert result is not None, err
    assert result["failed"] and result["msg"].startswith("%s/health did not answer HTTP 200 within " % hostile.url)
    assert result["msg"].endswith("GET %s/health: deadline reached while waiting for the answer" % hostile.url)

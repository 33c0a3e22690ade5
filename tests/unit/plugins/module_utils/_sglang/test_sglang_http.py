"""The request engine (module_utils/_sglang/http.py) against the SGLang test double on loopback
(tests/unit/plugins/conftest.py) and hostile servers: streams, deadlines, kept-alive connections,
chunked bodies and the limits on what a server can make the client hold."""
import json
import time

import pytest

from support import SERVER_SIDE_SLACK_S, Dribble, HostileServer, free_port, sglang_chat

from ansible_collections.pro6000.inference.plugins.module_utils._sglang import client as sglang_client
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import errors as sglang_errors
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import http as sglang_http
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import stream as sglang_stream


def stream(server, payload=None, **kwargs):
    """One streamed chat request through the request engine, parsed."""
    client = sglang_client.SGLangClient(server.url, retry_delay=0.01)
    captures, _wall = sglang_http.run_requests(client, 1, 1, lambda index: ("POST", "/v1/chat/completions", payload or sglang_chat()),
                                               **kwargs)
    assert len(captures) == 1
    return sglang_stream.parse_stream(captures[0])


def raw_get(server, answer):
    """GET /health from the double scripted to answer the bytes ``answer``: the answer or the error."""
    server.app.raw["/health"] = answer
    try:
        return sglang_client.SGLangClient(server.url, retries=0).get("/health", deadline=time.perf_counter() + 10)
    except sglang_errors.SGLangError as exc:
        return exc


def test_stream_over_http_with_every_benign_shape(server):
    result = stream(server, sglang_chat(40))
    assert result.ok, result.error
    assert result.status == 200 and result.n_out == 40 and result.n_first == 1 and result.content_chunks == 11
    assert result.t_send < result.t_first <= result.t_last <= result.t_end


def test_http_error_is_recorded(server):
    server.app.errors["/v1/chat/completions"] = (500, "Internal server error: scripted failure")
    result = stream(server)
    assert not result.ok and result.status == 500 and "HTTP 500" in result.error and "scripted failure" in result.error


def test_error_event_over_http(server):
    # What serving_chat.py sends when generation raises (create_streaming_error_response).
    server.app.stream_fault = (2, "event", {"error": {"object": "error", "message": "OOM", "type": "BadRequestError",
                                                      "param": None, "code": 400}})
    result = stream(server)
    assert not result.ok and "error event: OOM" in result.error


def test_truncated_chunked_stream(server):
    server.app.stream_fault = (3, "close", None)
    result = stream(server)
    assert not result.ok and "truncated" in result.error


def test_slow_server_stops_at_the_deadline(server):
    server.app.stream_fault = (2, "pause", 20.0)
    start = time.perf_counter()
    result = stream(server, deadline=start + 0.5)
    elapsed = time.perf_counter() - start
    assert not result.ok and result.error == "deadline reached while waiting for the answer"
    assert elapsed < 10


def test_silent_server_times_out(server):
    server.app.stream_fault = (2, "pause", 20.0)
    start = time.perf_counter()
    result = stream(server, timeout=0.3)
    assert not result.ok and result.error == "no data within 0.3 s (timed out)"
    assert time.perf_counter() - start < 10


def test_deadline_already_passed_sends_nothing(server):
    result = stream(server, deadline=time.perf_counter() - 1)
    assert not result.ok and "deadline" in result.error
    assert not server.app.requests


def test_one_kept_alive_connection_per_worker(server):
    captures, wall = sglang_http.run_requests(sglang_client.SGLangClient(server.url), 3, 2,
                                              lambda index: ("POST", "/v1/chat/completions", sglang_chat(8 + index)))
    results = dict((c.index, sglang_stream.parse_stream(c)) for c in captures)
    assert sorted(results) == [0, 1, 2, 3, 4, 5]
    assert all(r.ok and r.n_out == 8 + i for i, r in results.items())
    assert wall >= max(c.t_end for c in captures) - min(c.t_send for c in captures) - 1e-9
    ports = [r["client_port"] for r in server.app.requests]
    assert len(set(ports)) == 3 and all(ports.count(p) == 2 for p in ports)


def test_total_caps_the_requests_and_json_answers_decode(server):
    def generate(index):
        return "POST", "/generate", {"text": "t", "sampling_params": {"max_new_tokens": 13 * (index + 1),
                                                                      "ignore_eos": True}}
    captures, _wall = sglang_http.run_requests(sglang_client.SGLangClient(server.url), 2, 2, generate, total=3)
    assert sorted(c.index for c in captures) == [0, 1, 2]
    for capture in captures:
        assert capture.error is None and capture.status == 200
        assert json.loads(capture.body)["meta_info"]["completion_tokens"] == 13 * (capture.index + 1)


def test_connection_refused_is_recorded_not_raised():
    port = free_port()
    captures, _wall = sglang_http.run_requests(sglang_client.SGLangClient("http://127.0.0.1:%d" % port), 2, 1,
                                               lambda index: ("POST", "/v1/chat/completions", sglang_chat()))
    assert len(captures) == 2 and all("ConnectionRefusedError" in c.error for c in captures)


def test_dechunk_keeps_stamps_whatever_the_split():
    body = b"5\r\nhel\nl\r\n1;ext=1\r\n \r\nb\r\nworld\nagain\r\n0\r\n\r\n"
    for size in (1, 2, 3, 7, len(body)):
        capture = sglang_http.StreamCapture(0.0)
        for offset in range(0, len(body), size):
            capture.receive(float(offset), body[offset:offset + size])
        out, ends, complete = sglang_http._dechunk(capture.data, capture.line_ends)
        assert complete and out == b"hel\nl world\nagain"
        capture.data, capture.line_ends = out, ends
        # Each line end of the body carries the stamp of the read that brought it.
        assert [capture.stamp_at(out.index(b"\n", 4 * n)) for n in (0, 1)] == [
            float((body.index(text) + 1) // size * size) for text in (b"l\nl", b"d\n")]
    out, _ends, complete = sglang_http._dechunk(body[:-5], [])
    assert not complete and out == b"hel\nl world\nagain"


@pytest.mark.parametrize("size", [b"zz", b"-1", b"0x10", b"1_0", b""])
def test_a_chunk_size_that_is_not_hex_is_an_error_naming_the_url(server, size):
    answer = raw_get(server, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\nabc\r\n0\r\n\r\n" % size)
    assert isinstance(answer, sglang_errors.SGLangError)
    assert str(answer) == "GET %s/health: malformed chunked body: chunk size %r is not hexadecimal" % (server.url, size)


def test_an_endless_body_stops_at_the_answer_limit(server):
    def endless():
        yield b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
        while True:
            yield b"x" * 65536

    answer = raw_get(server, endless)
    assert str(answer).endswith("the answer is longer than %d bytes (the client's limit)" % sglang_http.RESPONSE_LIMIT)
    # What the kernel buffers between the two ends comes on top of what was read; 10 GB were not.
    assert server.app.raw_sent < sglang_http.RESPONSE_LIMIT + 32 * 1024 * 1024


def test_a_content_length_beyond_the_limit_is_refused_at_once(server):
    answer = raw_get(server, b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\nxxxx")
    assert str(answer) == ("GET %s/health: malformed response: Content-Length 10000000000 is outside 0 to %d "
                           "bytes (the client's limit)" % (server.url, sglang_http.RESPONSE_LIMIT))


def test_the_answers_of_one_call_are_capped_together(server, monkeypatch):
    client = sglang_client.SGLangClient(server.url)
    limit_bytes = int(2.5 * len(client.get("/server_info").body))  # room for two answers, not three
    monkeypatch.setattr(sglang_http, "RUN_LIMIT", limit_bytes)
    captures, _wall = sglang_http.run_requests(client, 2, 3, lambda index: ("GET", "/server_info", None),
                                               deadline=time.perf_counter() + 10)
    assert len(captures) == 6
    errors = [c.error for c in captures]
    limit = sglang_http.RUN_LIMIT_MESSAGE % limit_bytes
    assert errors.count(None) >= 1 and limit in errors
    assert all(e in (None, limit) for e in errors)


def test_a_deadline_passed_while_connecting_opens_no_more_connections(silent, monkeypatch):
    opened = []
    real_open = sglang_http.Connection.open

    def slow_open(self, timeout):
        # A connection that takes 50 ms (a remote host, a TLS handshake), made 1000 times.
        opened.append(self)
        time.sleep(0.05)
        return real_open(self, timeout)

    monkeypatch.setattr(sglang_http.Connection, "open", slow_open)
    client = sglang_client.SGLangClient(silent.url)
    captures, _wall = sglang_http.run_requests(client, 1000, 1, lambda index: ("GET", "/health", None),
                                               deadline=time.perf_counter() + 0.2)
    # About 0.2 / 0.05 connections before the deadline, then none: not one per worker.
    assert len(opened) <= 10 and len(captures) == 1000
    assert all(c.error.startswith("deadline reached") for c in captures)


def test_line_ends_one_per_packet_meet_the_cap_on_stamped_reads(monkeypatch):
    monkeypatch.setattr(sglang_http, "STAMP_LIMIT", 1000)
    newlines = Dribble(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", b"\n", 10)
    with HostileServer({"/v1/chat/completions": newlines}) as hostile:
        started = time.perf_counter()
        result = stream(hostile, deadline=started + 8)
    assert not result.ok and result.error == "the answer came in more than 1000 pieces with line ends (the client's limit)"
    assert time.perf_counter() - started < 8


def test_decoding_many_small_chunks_stops_at_the_deadline():
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * 5000000 + b"0\r\n\r\n"
    with HostileServer({"/health": answer}) as hostile:
        started = time.perf_counter()
        captures, _wall = sglang_http.run_requests(sglang_client.SGLangClient(hostile.url), 1, 1, lambda index: ("GET", "/health", None),
                                                   deadline=started + 1.5)
        elapsed = time.perf_counter() - started
    assert captures[0].error == "deadline reached while decoding the answer"
    assert elapsed < 1.5 + SERVER_SIDE_SLACK_S

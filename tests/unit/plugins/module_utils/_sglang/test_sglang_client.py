"""Tests of the HTTP/SSE client (module_utils/_sglang: http, stream, client) against the SGLang
test double on loopback (tests/unit/plugins/conftest.py), its streams and scripted faults."""
import http.client
import json
import socket
import ssl
import threading
import time

import pytest

from sglang.srt.entrypoints.http_server import sse  # the double's (tests/unit/plugins/conftest.py)
from support import DEEP_JSON, SERVER_SIDE_SLACK_S, Dribble, HostileServer, free_port

from ansible_collections.pro6000.inference.plugins.module_utils._sglang import client as sglang_client
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import errors as sglang_errors
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import figures as sglang_figures
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import http as sglang_http
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import stream as sglang_stream


def double_events(server, max_tokens, continuous_usage=True):
    """The events of the double's chat stream of ``max_tokens`` tokens as it sends them: the
    role-only delta, the prefill's token alone, chunks of 4 (one per verify step), the finish
    chunk, the usage chunk, [DONE]; with ``continuous_usage`` each content chunk has the usage."""
    connection = http.client.HTTPConnection(server.url[len("http://"):], timeout=30)
    options = {"include_usage": True, "continuous_usage_stats": continuous_usage}
    connection.request("POST", "/v1/chat/completions", json.dumps(dict(chat(max_tokens), stream_options=options)))
    body = connection.getresponse().read()
    connection.close()
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


def chat(max_tokens=32):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def stream(server, payload=None, **kwargs):
    """One streamed chat request through the request engine, parsed."""
    client = sglang_client.SGLangClient(server.url, retry_delay=0.01)
    captures, _wall = sglang_http.run_requests(client, 1, 1, lambda index: ("POST", "/v1/chat/completions", payload or chat()),
                                               **kwargs)
    assert len(captures) == 1
    return sglang_stream.parse_stream(captures[0])


def capture_of(events, t0=100.0, gap=0.5, t_send=99.0):
    """A StreamCapture whose i-th event arrived at t0 + i * gap (exact stamps for arithmetic)."""
    return body_capture([(t0 + i * gap, e) for i, e in enumerate(events)], t_send, t0 + len(events) * gap)


def body_capture(reads, t_send=0.0, t_end=None):
    """A decoded StreamCapture (status 200) whose body came in ``reads``, (stamp, bytes) each."""
    capture = sglang_http.StreamCapture(t_send)
    for stamp, data in reads:
        capture.receive(stamp, data)
    capture.status, capture.head_len, capture.complete = 200, 0, True
    capture.t_end = reads[-1][0] + 1.0 if t_end is None else t_end
    return sglang_http.decode_capture(capture)


# --- parsing, with exact stamps ---------------------------------------------------------------

def test_decode_speed_uses_server_counts_not_chunks(server):
    # role-only delta, the prefill's token, 8 chunks of 4 tokens 0.5 s apart, finish, usage, [DONE]
    events = double_events(server, 33)
    result = sglang_stream.parse_stream(capture_of(events))
    assert result.ok, result.error
    assert (result.n_out, result.n_first, result.content_chunks) == (33, 1, 9)
    # first content chunk is event 1 (t=100.5), last is event 9 (t=104.5): 32 tokens in 4 s
    assert result.t_first == 100.5 and result.t_last == 104.5
    assert result.decode_tps == pytest.approx(32 / 4.0)
    assert result.decode_method == "per_event_counts"
    assert result.ttft == pytest.approx(1.5)
    assert result.tokens_per_chunk == pytest.approx(33 / 9)
    assert result.finish_reason == "length"


def test_first_event_size_comes_from_its_own_count_when_every_event_has_one():
    # A server that streams 5 tokens in its first event: the count in that event says so.
    events = [sse({"choices": [{"delta": {"content": "x"}}], "usage": {"completion_tokens": n}})
              for n in (5, 9, 13)] + [b"data: [DONE]\n\n"]
    result = sglang_stream.parse_stream(capture_of(events))
    assert result.ok and result.n_first == 5 and result.decode_tps == pytest.approx(8 / 1.0)


def test_usage_only_at_the_end_takes_the_prefill_token_never_an_average_chunk(server):
    # 33 tokens in 9 content events, usage only in the closing chunk: the first event is the
    # prefill's single token. An average-chunk guess (33 / 9 = 3.67 tokens) would give
    # (33 - 3.67) / 4 = 7.33 tok/s instead of the true 32 / 4 = 8.
    events = double_events(server, 33, continuous_usage=False)
    result = sglang_stream.parse_stream(capture_of(events))
    assert result.ok and result.n_out == 33 and result.content_chunks == 9
    assert not result.counts_per_chunk and result.decode_method == "prefill_token"
    assert result.decode_tps == 8.0


def test_lines_split_across_reads_and_crlf_and_multiline_data():
    first = sse({"choices": [{"delta": {"content": "ab"}}], "usage": {"completion_tokens": 2}})
    body = (b": comment\r\n\r\n" + first.replace(b"\n", b"\r\n")
            + b'data: {"choices": [{"delta": {"content": "c"}}],\ndata: "usage": {"completion_tokens": 3}}\n\n'
            + b"data: [DONE]\n\n")
    reads = [body[i:i + 7] for i in range(0, len(body), 7)]
    result = sglang_stream.parse_stream(body_capture([(float(i), r) for i, r in enumerate(reads)]))
    assert result.ok, result.error
    assert (result.n_out, result.n_first, result.content_chunks) == (3, 2, 2)


def test_native_generate_events_count_new_tokens():
    events = [sse({"text": "a" * n, "meta_info": {"completion_tokens": n, "spec_verify_ct": n // 4, "prompt_tokens": 7}})
              for n in (4, 8, 12)]
    result = sglang_stream.parse_stream(capture_of(events + [b"data: [DONE]\n\n"]))
    assert result.ok and result.n_out == 12 and result.n_first == 4 and result.spec_verify_ct == 3
    assert result.decode_tps == pytest.approx(8 / 1.0)


def test_reasoning_content_is_content(server):
    # A reasoning parser's stream: the thinking comes as reasoning_content deltas, then content.
    events = double_events(server, 17)
    events[1:3] = [event.replace(b'"content"', b'"reasoning_content"') for event in events[1:3]]
    result = sglang_stream.parse_stream(capture_of(events))
    assert result.ok and result.t_first == 100.5 and result.content_chunks == 5


@pytest.mark.parametrize("event, message", [
    (b'data: {"error": {"message": "boom", "code": 500}}\n\n', "error event: boom"),
    (b'data: {"object": "error", "message": "bad request"}\n\n', "error event: bad request"),
    (b'data: {"choices": [\n\n', "malformed event"),
])
def test_error_events_fail_the_request(server, event, message):
    events = double_events(server, 8)
    result = sglang_stream.parse_stream(capture_of(events[:2] + [event] + events[2:]))
    assert not result.ok and message in result.error


def test_missing_done_is_a_truncated_stream(server):
    events = double_events(server, 8)[:-1]
    result = sglang_stream.parse_stream(capture_of(events))
    assert not result.ok and "truncated" in result.error


def test_stream_without_token_count_fails():
    events = [sse({"choices": [{"delta": {"content": "x"}}]}), b"data: [DONE]\n\n"]
    result = sglang_stream.parse_stream(capture_of(events))
    assert not result.ok and "no completion token count" in result.error


# --- the same shapes over real sockets ---------------------------------------------------------

def test_stream_over_http_with_every_benign_shape(server):
    result = stream(server, chat(40))
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
                                              lambda index: ("POST", "/v1/chat/completions", chat(8 + index)))
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
                                               lambda index: ("POST", "/v1/chat/completions", chat()))
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


def test_api_key_is_sent_as_bearer_token(start_double):
    server = start_double("--api-key", "s3cret")
    assert sglang_client.SGLangClient(server.url, api_key="s3cret").get("/server_info").status == 200
    assert server.app.requests[-1]["headers"]["authorization"] == "Bearer s3cret"
    assert sglang_client.SGLangClient(server.url).get("/server_info").status == 401


def test_get_json_names_url_and_status(server):
    client = sglang_client.SGLangClient(server.url)
    with pytest.raises(sglang_errors.SGLangError, match=r"GET http://127\.0\.0\.1:\d+/nope: HTTP 404"):
        client.get_json("/nope")


def test_server_info_falls_back_to_old_alias(server):
    server.app.drop_routes("/server_info")
    path, info = sglang_client.fetch_server_info(sglang_client.SGLangClient(server.url))
    assert path == "/get_server_info" and info["speculative_algorithm"] == "DFLASH"


def test_get_retries_transport_failures_a_bounded_number_of_times():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted = []

    def drop_connections():
        listener.settimeout(3)
        try:
            while True:
                conn, _address = listener.accept()
                accepted.append(1)
                conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=drop_connections, daemon=True)
    thread.start()
    client = sglang_client.SGLangClient("http://127.0.0.1:%d" % listener.getsockname()[1], retries=2, retry_delay=0.01)
    try:
        with pytest.raises(sglang_errors.SGLangError, match="closed the connection|Connection reset"):
            client.get("/health")
        # a POST is never retried
        with pytest.raises(sglang_errors.SGLangError):
            client.post("/flush_cache")
    finally:
        listener.close()
        thread.join(timeout=5)
    assert len(accepted) == 4


def test_connection_refused_is_an_error_naming_the_url():
    port = free_port()
    client = sglang_client.SGLangClient("http://127.0.0.1:%d" % port, retries=1, retry_delay=0.01)
    with pytest.raises(sglang_errors.SGLangError, match="http://127.0.0.1:%d/health: ConnectionRefusedError" % port):
        client.get("/health")


def test_tls_verification_is_on_by_default_and_can_be_turned_off(server):
    assert sglang_client.SGLangClient("https://example.invalid").ssl_context.verify_mode == ssl.CERT_REQUIRED
    relaxed = sglang_client.SGLangClient("https://example.invalid", validate_certs=False).ssl_context
    assert relaxed.verify_mode == ssl.CERT_NONE and not relaxed.check_hostname
    with pytest.raises(sglang_errors.SGLangError, match="TLS error"):
        sglang_client.SGLangClient(server.url.replace("http:", "https:"), retries=0).get("/health")


@pytest.mark.parametrize("url, message", [
    ("127.0.0.1:30000", "url must be http(s)://host[:port][/prefix], got '127.0.0.1:30000'"),
    ("http://127.0.0.1:notaport", "url 'http://127.0.0.1:notaport' is not a valid URL: Port could not be cast"),
    ("http://127.0.0.1:99999", "url 'http://127.0.0.1:99999' is not a valid URL: Port out of range"),
    ("http://127.0.0.1:0", "url 'http://127.0.0.1:0': the port must be between 1 and 65535"),
    ("http://[::1", "url 'http://[::1' is not a valid URL: Invalid IPv6 URL"),
    ("http://", "url must be http(s)://host[:port][/prefix], got 'http://'"),
])
def test_bad_url_is_rejected_naming_the_option(url, message):
    with pytest.raises(sglang_errors.SGLangError) as error:
        sglang_client.SGLangClient(url)
    assert str(error.value).startswith(message)


def test_ipv6_loopback_url_is_reached():
    # Nothing listens on the port: the point is that the URL parses and is tried.
    client = sglang_client.SGLangClient("http://[::1]:%d" % free_port(), retries=0)
    assert (client.host, client.netloc) == ("::1", "[::1]:%d" % client.port)
    with pytest.raises(sglang_errors.SGLangError, match=r"GET http://\[::1\]:\d+/health: ConnectionRefusedError"):
        client.get("/health")


def test_a_server_that_never_answers_is_cut_off_by_the_deadline_retries_included():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections in the kernel, never answers
    try:
        client = sglang_client.SGLangClient("http://127.0.0.1:%d" % listener.getsockname()[1], timeout=30, retries=5)
        start = time.perf_counter()
        with pytest.raises(sglang_errors.SGLangError, match="deadline reached while waiting for the answer"):
            client.get("/health", deadline=start + 0.5)
        assert time.perf_counter() - start < 1.5
    finally:
        listener.close()


# --- proxies -----------------------------------------------------------------------------------

def test_loopback_never_uses_a_proxy(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://proxy.example.invalid:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    for host in ("127.0.0.1", "localhost", "::1", "127.1.2.3"):
        assert sglang_client.proxy_for("http", host) is None
    assert sglang_client.proxy_for("http", "gpu01.example.invalid") == "http://proxy.example.invalid:3128"
    monkeypatch.setenv("no_proxy", "example.invalid")
    assert sglang_client.proxy_for("http", "gpu01.example.invalid") is None


def test_remote_host_goes_through_the_proxy(server, monkeypatch):
    # The double plays the proxy: the request line must carry the absolute URL (whose path the
    # double answers, as uvicorn does).
    monkeypatch.setenv("http_proxy", server.url.replace("http://", "http://user:pw@"))
    monkeypatch.delenv("no_proxy", raising=False)
    client = sglang_client.SGLangClient("http://gpu01.example.invalid:30000")
    assert client.get("/health", retries=0).status == 200
    request = server.app.requests[-1]
    assert request["target"] == "http://gpu01.example.invalid:30000/health"
    assert request["headers"]["proxy-authorization"] == "Basic dXNlcjpwdw=="


def test_https_through_a_proxy_asks_for_a_tunnel_and_names_a_refusal(monkeypatch):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    heads = []

    def refuse_tunnels():
        listener.settimeout(3)
        try:
            while True:
                conn, _address = listener.accept()
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                heads.append(head.decode())
                conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=refuse_tunnels, daemon=True)
    thread.start()
    monkeypatch.setenv("https_proxy", "http://user:pw@127.0.0.1:%d" % listener.getsockname()[1])
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        with pytest.raises(sglang_errors.SGLangError, match="the proxy refused the tunnel to gpu01.example.invalid:30000: "
                           "HTTP/1.1 407 Proxy Authentication Required"):
            sglang_client.SGLangClient("https://gpu01.example.invalid:30000", retries=0).get("/health")
    finally:
        listener.close()
        thread.join(timeout=5)
    assert len(heads) == 1
    assert heads[0].startswith("CONNECT gpu01.example.invalid:30000 HTTP/1.1\r\n")
    assert "Proxy-Authorization: Basic dXNlcjpwdw==\r\n" in heads[0]


# --- helpers -----------------------------------------------------------------------------------

def test_speculative_settings_normalise_ddtree_forms():
    assert sglang_client.speculative_settings({"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 15,
                                               "speculative_num_draft_tokens": 16})["algorithm"] == "DDTREE"
    fork = sglang_client.speculative_settings({"speculative_algorithm": "dflash", "speculative_dflash_enable_ddtree": True})
    assert fork["algorithm"] == "DDTREE"
    off = sglang_client.speculative_settings({"speculative_algorithm": None, "internal_states": [{}, {}]})
    assert off["algorithm"] is None and off["avg_spec_accept_length"] == []
    ranks = sglang_client.speculative_settings({"speculative_algorithm": "DFLASH",
                                                "internal_states": [{"avg_spec_accept_length": 6.0},
                                                                    {"avg_spec_accept_length": 7.0}]})
    assert ranks["avg_spec_accept_length"] == [6.0, 7.0]


def test_summarise_percentiles():
    summary = sglang_figures.summarise([5, 1, 3, 2, 4, None])
    assert summary["count"] == 5 and summary["min"] == 1 and summary["max"] == 5
    assert summary["p50"] == 3 and summary["p90"] == pytest.approx(4.6) and summary["mean"] == 3
    assert sglang_figures.summarise([]) is None


def test_response_json_error_names_status():
    with pytest.raises(sglang_errors.SGLangError, match="HTTP 200: body is not JSON"):
        sglang_client.Response(200, b"<html>").json()
    assert json.loads(sglang_client.Response(200, b'{"a": 1}').body) == {"a": 1}


# --- hostile servers (issue 20, row 5) and credentials in URLs (row 7) -------------------------

def raw_get(server, answer):
    """GET /health from the double scripted to answer the bytes ``answer``: the answer or the error."""
    server.app.raw["/health"] = answer
    try:
        return sglang_client.SGLangClient(server.url, retries=0).get("/health", deadline=time.perf_counter() + 10)
    except sglang_errors.SGLangError as exc:
        return exc


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


def test_an_event_beyond_the_event_limit_fails_the_stream():
    long_event = b"data: " + b"x" * (sglang_http.EVENT_LIMIT + 1) + b"\n\n"
    result = sglang_stream.parse_stream(capture_of([long_event, b"data: [DONE]\n\n"]))
    assert not result.ok and result.error == "a server-sent event is longer than %d bytes (the client's limit)" % (
        sglang_http.EVENT_LIMIT)
    endless_line = [b"data: " + b"x" * 700000, b"x" * 700000]
    result = sglang_stream.parse_stream(capture_of(endless_line))
    assert not result.ok and "a server-sent event is longer than" in result.error


@pytest.mark.parametrize("event, message", [
    ({"choices": {"delta": "x"}}, "unexpected event ('str' object has no attribute 'get')"),
    ({"choices": [{"delta": ["content"]}]}, "unexpected event ('list' object has no attribute 'get')"),
    ({"usage": [1, 2]}, "unexpected event ('list' object has no attribute 'get')"),
    ({"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": "12"}},
     "unexpected event (usage.completion_tokens '12' is not a count)"),
    ({"meta_info": {"completion_tokens": 3, "prompt_tokens": [1]}},
     "unexpected event (meta_info.prompt_tokens [1] is not a count)"),
    ([1, 2], "unexpected event: '[1, 2]'"),
])
def test_events_of_another_shape_fail_the_stream_not_the_parser(event, message):
    result = sglang_stream.parse_stream(capture_of([sse(event), b"data: [DONE]\n\n"]))
    assert not result.ok and result.error.startswith(message)


@pytest.mark.parametrize("path, value, message", [
    ("/server_info", [1, 2], "expected a JSON object, got array: b'[1, 2]'"),
    ("/server_info", "text", "expected a JSON object, got string"),
    ("/v1/models", {"data": {"id": "m"}}, "expected data to be a JSON array, got object"),
])
def test_json_of_another_shape_is_an_error_naming_the_url(server, path, value, message):
    server.app.answers[path] = json.dumps(value) if isinstance(value, str) else value
    client = sglang_client.SGLangClient(server.url)
    with pytest.raises(sglang_errors.SGLangError) as error:
        sglang_client.fetch_server_info(client) if path == "/server_info" else sglang_client.model_cards(client)
    assert str(error.value).startswith("GET %s%s: " % (server.url, path)) and message in str(error.value)


def test_credentials_in_the_url_are_never_echoed(server):
    port = free_port()
    client = sglang_client.SGLangClient("http://alice:s3cret@127.0.0.1:%d/prefix" % port, retries=0)
    assert client.base_url == "http://127.0.0.1:%d/prefix" % port
    assert sglang_client.redact("see http://alice:p@ss@h:1/x?q=a@b") == "see http://h:1/x?q=a@b"
    with pytest.raises(sglang_errors.SGLangError) as error:
        client.get("/health")
    assert "s3cret" not in str(error.value) and "alice" not in str(error.value)
    assert str(error.value).startswith("GET http://127.0.0.1:%d/prefix/health: ConnectionRefusedError" % port)
    for bad in ("http://alice:s3cret@127.0.0.1:notaport", "ftp://alice:s3cret@h/", "http://alice:s3cret@:0"):
        with pytest.raises(sglang_errors.SGLangError) as error:
            sglang_client.SGLangClient(bad)
        assert "s3cret" not in str(error.value) and "alice" not in str(error.value)
    # The server is reached with the credentials left out of the request too (use api_key).
    ok = sglang_client.SGLangClient(server.url.replace("//", "//alice:s3cret@")).get("/health")
    assert ok.status == 200 and "s3cret" not in json.dumps(server.app.requests)


def test_a_proxy_url_with_credentials_is_not_echoed(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://bob:pr0xy@proxy.invalid:notaport")
    with pytest.raises(sglang_errors.SGLangError) as error:
        sglang_client.SGLangClient("http://server.invalid:30000")
    assert "pr0xy" not in str(error.value) and "the http_proxy environment variable" in str(error.value)


@pytest.mark.parametrize("value, message", [
    (float("inf"), "timeout must be a finite number, got inf"),
    (float("nan"), "timeout must be a finite number, got nan"),
    (1e300, "timeout must be at most 3600 seconds, got 1e+300"),
    (0.0, "timeout must be a positive number of seconds, got 0.0"),
    (None, None),
    (3600.0, None),
])
def test_bounds_refuse_non_finite_and_huge_values(value, message):
    bounds = {"timeout": (sglang_client.POSITIVE, 3600, "seconds"), "count": (1, 10, "requests")}
    assert sglang_client.check_bounds({"timeout": value, "count": 5}, bounds) == message
    assert sglang_client.check_bounds({"timeout": 1.0, "count": 0}, bounds) == "count must be at least 1, got 0"
    assert sglang_client.check_bounds({"timeout": 1.0, "count": 11}, bounds) == "count must be at most 10 requests, got 11"


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


# --- hostile servers, round 2 (issue 36, finding 3) -------------------------------------------

def test_json_nested_too_deep_is_an_error_not_a_recursion():
    with pytest.raises(sglang_errors.SGLangError) as error:
        sglang_client.Response(200, DEEP_JSON, "GET http://h/server_info").json(dict)
    assert str(error.value) == "GET http://h/server_info: HTTP 200: body is not JSON (JSON nested too deep): %r" % (
        DEEP_JSON[:200])
    result = sglang_stream.parse_stream(capture_of([b"data: " + DEEP_JSON + b"\n\n", b"data: [DONE]\n\n"]))
    assert not result.ok and result.error == "malformed event: %r" % DEEP_JSON.decode()[:200]


@pytest.mark.parametrize("count", [10 ** 12, 10 ** 30])
def test_a_token_count_beyond_what_was_asked_fails_the_stream(count):
    events = [sse({"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": n}}) for n in (1, count)]
    result = sglang_stream.parse_stream(capture_of(events + [b"data: [DONE]\n\n"]), max_tokens=25)
    assert not result.ok and result.error.startswith(
        "unexpected event (usage.completion_tokens %d is more than the 25 tokens asked)" % count)
    # Unasked counts (prompt tokens, verify steps) are bounded too, far beyond any context length.
    events = [sse({"meta_info": {"completion_tokens": 3, "prompt_tokens": count}}), b"data: [DONE]\n\n"]
    result = sglang_stream.parse_stream(capture_of(events))
    assert not result.ok and "meta_info.prompt_tokens %d is more than the %d the client takes" % (
        count, sglang_stream.COUNT_LIMIT) in result.error


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


def test_parsing_many_small_events_stops_at_the_deadline():
    capture = body_capture([(1.0, b'data: {"a": 1}\n\n' * 3000000)])
    started = time.perf_counter()
    result = sglang_stream.parse_stream(capture, deadline=started + 0.2)
    assert result.error == "deadline reached while decoding the answer"
    assert time.perf_counter() - started < 0.2 + SERVER_SIDE_SLACK_S

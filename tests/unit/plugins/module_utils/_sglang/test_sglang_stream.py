"""Stream decoding (module_utils/_sglang/stream.py): the SGLang test double's events
(tests/unit/plugins/conftest.py) and hand-made captures, parsed into results; what is malformed or
too large fails the stream, not the parser."""
import http.client
import json
import time

import pytest

from sglang.srt.entrypoints.http_server import sse  # the double's (tests/unit/plugins/conftest.py)
from support import DEEP_JSON, SERVER_SIDE_SLACK_S, sglang_chat

from ansible_collections.pro6000.inference.plugins.module_utils._sglang import client as sglang_client
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import errors as sglang_errors
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import http as sglang_http
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import stream as sglang_stream


def double_events(server, max_tokens, continuous_usage=True):
    """The events of the double's chat stream of ``max_tokens`` tokens as it sends them: the
    role-only delta, the prefill's token alone, chunks of 4 (one per verify step), the finish
    chunk, the usage chunk, [DONE]; with ``continuous_usage`` each content chunk has the usage."""
    connection = http.client.HTTPConnection(server.url[len("http://"):], timeout=30)
    options = {"include_usage": True, "continuous_usage_stats": continuous_usage}
    connection.request("POST", "/v1/chat/completions", json.dumps(dict(sglang_chat(max_tokens), stream_options=options)))
    body = connection.getresponse().read()
    connection.close()
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


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


def test_parsing_many_small_events_stops_at_the_deadline():
    capture = body_capture([(1.0, b'data: {"a": 1}\n\n' * 3000000)])
    started = time.perf_counter()
    result = sglang_stream.parse_stream(capture, deadline=started + 0.2)
    assert result.error == "deadline reached while decoding the answer"
    assert time.perf_counter() - started < 0.2 + SERVER_SIDE_SLACK_S

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streamed answers: server-sent events decoded from a finished capture into a StreamResult
(tokens, their times, the figures of one request).
"""

from __future__ import annotations

import re
import time

from ansible_collections.pro6000.inference.plugins.module_utils._sglang.errors import SGLangError
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.http import DEADLINE_CHECK_EVERY, DECODE_DEADLINE_MESSAGE, EVENT_LIMIT, loads


# How a stream's decode speed got its first event's token count.
DECODE_COUNTS_PER_EVENT = "per_event_counts"
DECODE_PREFILL_TOKEN = "prefill_token"


class StreamResult:
    """A parsed stream: token counts from the server, timing from the client's stamps."""

    __slots__ = ("ok", "error", "status", "t_send", "t_end", "t_first", "t_last", "n_out",
                 "n_first", "counts_per_chunk", "content_chunks", "prompt_tokens",
                 "finish_reason", "done", "spec_verify_ct", "chunk_stamps", "chunk_counts")

    def __init__(self):
        self.ok = False
        self.error = None
        self.status = None
        self.t_send = self.t_end = self.t_first = self.t_last = None
        self.n_out = None
        self.n_first = None
        self.counts_per_chunk = True
        self.content_chunks = 0
        self.prompt_tokens = None
        self.finish_reason = None
        self.done = False
        self.spec_verify_ct = None
        # Stamp and cumulative server count (None where the event had none) of each content event.
        self.chunk_stamps = []
        self.chunk_counts = []

    @property
    def ttft(self):
        return None if self.t_first is None else self.t_first - self.t_send

    @property
    def e2e(self):
        return self.t_end - self.t_send

    @property
    def decode_method(self):
        return DECODE_COUNTS_PER_EVENT if self.counts_per_chunk else DECODE_PREFILL_TOKEN

    @property
    def decode_tps(self):
        """(n_out - n_first) / (t_last - t_first): independent of how tokens are split into chunks.

        n_first is the count the first content event carried when every event carries the
        server's cumulative count; otherwise it is 1, the token the prefill committed, which
        SGLang streams alone as soon as a request holds it (``len(req.output_ids) == 1`` in the
        scheduler's ``stream_output_generation``).
        """
        if self.n_out is None or self.content_chunks < 2 or self.t_last <= self.t_first:
            return None
        n_first = self.n_first if self.counts_per_chunk else 1
        return (self.n_out - n_first) / (self.t_last - self.t_first)

    @property
    def tokens_per_chunk(self):
        if not self.n_out or not self.content_chunks:
            return None
        return self.n_out / float(self.content_chunks)

    def itl_gaps(self):
        """Inter-token latency per chunk: the gap before each content event after the first, as
        SGLang's bench_serving collects it for the OpenAI backends (``output.itl.append(timestamp
        - most_recent_timestamp)`` per chunk with content, python/sglang/benchmark/serving.py)."""
        stamps = self.chunk_stamps
        return [later - earlier for earlier, later in zip(stamps, stamps[1:])]

    def itl_token_gaps(self):
        """Inter-token latency per token: each gap spread over the k tokens its event brought
        (gap / k, k times), as bench_serving's native backend does (``adjust_itl``) and SGLang's
        own ``inter_token_latency_seconds`` histogram; None without the server's count per event."""
        if not self.counts_per_chunk or any(count is None for count in self.chunk_counts):
            return None
        found = []
        for index in range(1, len(self.chunk_stamps)):
            tokens = self.chunk_counts[index] - self.chunk_counts[index - 1]
            if tokens > 0:
                found.extend([(self.chunk_stamps[index] - self.chunk_stamps[index - 1]) / tokens] * tokens)
        return found


# A data line of an event ("data:" and its value, up to the line end) and a blank line, which
# ends an event: found by the regular expression engine, so that comments, other fields and
# blank lines cost no Python step however many a server sends.
SSE_DATA_LINE_RE = re.compile(rb"^data:([^\n]*)(\n?)", re.M)
SSE_BLANK_LINE_RE = re.compile(rb"\n\r?\n")


def iter_sse_events(capture, deadline=None):
    """Yield (stamp, data string) per SSE event of a decoded capture; comment lines are skipped.

    Each event carries the stamp of the read that completed its last data line. An event longer
    than EVENT_LIMIT raises SGLangError (no SGLang event comes near it), and so does the
    deadline passing. One pass over the body, never joining it again, whatever its reads were.
    """
    body = capture.data
    data_lines = []
    size = 0
    stamp = None
    line_end = 0  # where the last data line ended
    for number, match in enumerate(SSE_DATA_LINE_RE.finditer(body), 1):
        if data_lines and SSE_BLANK_LINE_RE.search(body, line_end, match.start()):
            yield stamp, b"\n".join(data_lines).decode("utf-8", "replace")
            data_lines = []
            size = 0
        if deadline is not None and not number % DEADLINE_CHECK_EVERY and time.perf_counter() >= deadline:
            raise SGLangError(DECODE_DEADLINE_MESSAGE)
        value = match.group(1)
        if value.endswith(b"\r"):
            value = value[:-1]
        size += len(value)
        if size > EVENT_LIMIT:
            raise SGLangError("a server-sent event is longer than %d bytes (the client's limit)" % EVENT_LIMIT)
        data_lines.append(value[1:] if value.startswith(b" ") else value)
        line_end = match.end() - 1 if match.group(2) else match.end()
        stamp = capture.stamp_at(line_end) if match.group(2) else capture.last_stamp
    if data_lines:
        yield stamp, b"\n".join(data_lines).decode("utf-8", "replace")


def _error_text(event):
    error = event.get("error")
    if error is None and event.get("object") == "error":
        error = event
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def parse_stream(capture, max_tokens=None, deadline=None):
    """Turn a StreamCapture into a StreamResult (OpenAI chunks and native /generate events).

    Content chunks are those with text (``delta.content``, ``delta.reasoning_content``,
    ``text``); role-only deltas, finish-only and usage-only chunks are not content. Token
    counts come from the server: ``usage.completion_tokens`` or ``meta_info.completion_tokens``,
    never more than ``max_tokens`` (what was asked) when given, nor more than COUNT_LIMIT.
    Parsing stops at the first error and at ``deadline``.
    """
    result = StreamResult()
    result.status = capture.status
    result.t_send = capture.t_send
    result.t_end = capture.t_end
    error = capture.failure()
    try:
        event_error = _read_events(capture, result, max_tokens, deadline)
    except SGLangError as exc:
        event_error = str(exc)
    error = error or event_error
    if not result.counts_per_chunk:
        result.n_first = None
    if error is None and not result.done:
        error = "stream truncated: ended without data: [DONE]"
    if error is None and result.n_out is None:
        error = "the server reported no completion token count"
    result.error = error
    result.ok = error is None
    return result


# The most a server may report for a count it was not asked to bound (prompt tokens, verify steps):
# far beyond any context length, far below what would overflow a float or fill the memory.
COUNT_LIMIT = 2 ** 31 - 1


def token_count(value, name, most=None):
    """A count the server reports: an integer (not a boolean) from 0 to ``most`` (COUNT_LIMIT by
    default) or None; TypeError otherwise, ValueError naming the bound beyond it."""
    if value is None:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError("%s %r is not a count" % (name, value))
    most = COUNT_LIMIT if most is None else most
    if value > most:
        raise ValueError("%s %d is more than the %d %s" % (
            name, value, most, "tokens asked" if most < COUNT_LIMIT else "the client takes"))
    return value


def _read_events(capture, result, max_tokens=None, deadline=None):
    """Fold the events of ``capture`` into ``result`` up to the first error, which it returns."""
    previous_count = 0
    count_at_last_content = None
    for stamp, data in iter_sse_events(capture, deadline):
        try:
            event_error, previous_count, count_at_last_content = _read_event(
                data, stamp, result, previous_count, count_at_last_content, max_tokens)
        except (AttributeError, TypeError, ValueError) as exc:
            # A field of another JSON type than SGLang sends (a list for an object, text for a
            # count), or a count beyond what was asked.
            event_error = "unexpected event (%s): %r" % (exc, data[:200])
        if event_error is not None:
            return event_error
    return None


def _read_event(data, stamp, result, previous_count, count_at_last_content, max_tokens=None):
    """One event into ``result``: (its error or None, previous count, count at the last content)."""
    if data == "[DONE]":
        result.done = True
        return None, previous_count, count_at_last_content
    try:
        event = loads(data)
    except ValueError:
        return "malformed event: %r" % data[:200], previous_count, count_at_last_content
    if not isinstance(event, dict):
        return "unexpected event: %r" % data[:200], previous_count, count_at_last_content
    event_error = _error_text(event)
    if event_error is not None:
        return "error event: %s" % event_error, previous_count, count_at_last_content
    has_content = False
    count = None
    choices = event.get("choices")
    if choices:
        for choice in choices:
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or choice.get("text"):
                has_content = True
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
    usage = event.get("usage")
    if usage:
        count = token_count(usage.get("completion_tokens"), "usage.completion_tokens", max_tokens)
        result.prompt_tokens = token_count(usage.get("prompt_tokens", result.prompt_tokens), "usage.prompt_tokens")
    meta = event.get("meta_info")
    if meta:
        count = token_count(meta.get("completion_tokens", count), "meta_info.completion_tokens", max_tokens)
        result.prompt_tokens = token_count(meta.get("prompt_tokens", result.prompt_tokens),
                                           "meta_info.prompt_tokens")
        result.spec_verify_ct = token_count(meta.get("spec_verify_ct", result.spec_verify_ct),
                                            "meta_info.spec_verify_ct")
        finish = meta.get("finish_reason")
        if isinstance(finish, dict):
            finish = finish.get("type")
        if finish:
            result.finish_reason = finish
        # Native events repeat the whole text; new tokens are what marks a content chunk.
        if count is not None and count > previous_count:
            has_content = True
    if has_content:
        if result.t_first is None:
            result.t_first = stamp
        result.t_last = stamp
        result.chunk_stamps.append(stamp)
        result.chunk_counts.append(count)
        result.content_chunks += 1
        if count is None or count == count_at_last_content:
            result.counts_per_chunk = False
        count_at_last_content = count
        if result.content_chunks == 1:
            result.n_first = count
    if count is not None:
        previous_count = count
        result.n_out = count
    return None, previous_count, count_at_last_content

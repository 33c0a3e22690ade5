# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HTTP/1.1 engine of the SGLang client, on the standard library only.

Shared by the ``sglang_probe`` and ``sglang_bench`` modules. One HTTP/1.1 engine carries every
request, a health check as much as 64 concurrent streams: one selector over one keep-alive
connection per worker, ``time.perf_counter()`` stamped on every read while requests run and all
parsing done after they have ended, so that the client adds as little as possible to what it
measures. Every request runs against a deadline on the same clock, so that a module's time
options bound its whole run, retries included.

Whatever a server sends, a request ends in a result or an SGLangError naming the URL (never its
credentials): answers are capped (RESPONSE_LIMIT each, RUN_LIMIT for all answers of one
run_requests call, EVENT_LIMIT for one server-sent event), malformed framing, JSON nested too deep
and JSON of an unexpected shape are errors, not exceptions of the parser. Memory stays within a
fixed multiple of those caps however the server splits its answer into packets (an answer is one
buffer, not one object per read), and decoding after the run is linear and stops at the deadline.
"""

from __future__ import annotations

import array
import bisect
import json
import re
import selectors
import socket
import ssl
import time

from ansible_collections.pro6000.inference.plugins.module_utils._sglang.errors import SGLangError


READ_SIZE = 65536
# How often the request engine looks for connections that stopped sending (seconds).
IDLE_CHECK_S = 0.05
CHUNKED_END = b"\r\n0\r\n\r\n"
HEAD_LIMIT = 65536
# One answer (headers and body), all answers of one run_requests call, one SSE event: the
# answers are kept until their requests end (parsing waits), so a server must not be able to
# fill the memory. A stream of 65536 tokens, one event per token with usage, is about 30 MiB.
RESPONSE_LIMIT = 64 * 1024 * 1024
RUN_LIMIT = 1024 * 1024 * 1024
EVENT_LIMIT = 1024 * 1024
# Reads that bring a line end are stamped (16 bytes each): the only reads whose time an event can
# carry. A server sending one newline per packet would otherwise cost 16 bytes per byte; SGLang's
# events are hundreds of bytes, so one stamp per 64 bytes of the caps is far more than it needs.
STAMP_LIMIT = RESPONSE_LIMIT // 64
RUN_STAMP_LIMIT = RUN_LIMIT // 64
RUN_LIMIT_MESSAGE = "the answers of this call are longer than %d bytes in all (the client's limit)"
RUN_STAMP_MESSAGE = "the answers of this call came in more than %d pieces with line ends in all (the client's limit)"
# Decoding after the run looks at the clock once per this many chunks or events.
DEADLINE_CHECK_EVERY = 4096
DECODE_DEADLINE_MESSAGE = "deadline reached while decoding the answer"
HEX_SIZE_RE = re.compile(rb"^[0-9A-Fa-f]{1,15}$")


class StreamCapture:
    """What arrived for one request: its bytes, and the perf_counter stamps of the reads.

    While the request runs ``data`` holds the raw bytes off the socket, ``line_ends`` the offset
    in ``data`` where each read that brought a line end ended and ``line_stamps`` its stamp,
    ``last_stamp`` the stamp of the last read; afterwards ``decode_capture`` leaves the body in
    ``data`` (``line_ends`` then count from ``stamp_base`` bytes before it) and sets ``status``
    and ``error`` (transport failures only); ``failure()`` adds an HTTP error status.
    """

    __slots__ = ("index", "t_send", "t_end", "status", "data", "line_ends", "line_stamps", "last_stamp",
                 "stamp_base", "error", "head_len", "chunked", "complete")

    def __init__(self, t_send, index=None):
        self.index = index
        self.t_send = t_send
        self.t_end = None
        self.status = None
        self.data = bytearray()
        self.line_ends = array.array("q")
        self.line_stamps = array.array("d")
        self.last_stamp = None
        self.stamp_base = 0
        self.error = None
        self.head_len = None
        self.chunked = False
        self.complete = False

    def receive(self, stamp, data):
        """Keep one read: its bytes, and its stamp where it brought a line end."""
        self.data += data
        if b"\n" in data:
            self.line_ends.append(len(self.data))
            self.line_stamps.append(stamp)
        self.last_stamp = stamp

    def stamp_at(self, offset):
        """The stamp of the read that brought the byte at ``offset`` of ``data`` (a line end)."""
        index = bisect.bisect_right(self.line_ends, offset + self.stamp_base)
        return self.line_stamps[index] if index < len(self.line_stamps) else self.last_stamp

    @property
    def body(self):
        return bytes(self.data)

    def failure(self):
        """Why this request failed (transport or HTTP status other than 200), or None."""
        if self.error is None and self.status != 200:
            return "HTTP %s: %s" % (self.status, self.body[:300].decode("utf-8", "replace").strip())
        return self.error


def loads(text):
    """json.loads, with JSON nested too deep for the parser a ValueError like any malformed JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep")


def json_type(kind):
    """The JSON name of a Python type that json.loads returns."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        kind, "number" if kind in (int, float) else kind.__name__)


def remaining(deadline, timeout):
    """Seconds a step may wait: ``timeout``, shortened to what is left before ``deadline``."""
    if deadline is None:
        return timeout
    return min(timeout, deadline - time.perf_counter())


class Connection:
    """One persistent HTTP connection (keep-alive), used by one worker at a time."""

    def __init__(self, client):
        self.client = client
        self.sock = None

    def open(self, timeout):
        """Connect now (proxy tunnel and TLS handshake included) and return the socket."""
        if self.sock is not None:
            return self.sock
        client = self.client
        address = client.proxy[:2] if client.proxy else (client.host, client.port)
        sock = socket.create_connection(address, timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if client.proxy and client.scheme == "https":
                _tunnel(sock, client)
            if client.ssl_context is not None:
                sock = client.ssl_context.wrap_socket(sock, server_hostname=client.host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        return sock

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def request_bytes(self, method, path, payload=None):
        """The bytes of one HTTP/1.1 request."""
        client = self.client
        target = client.prefix + path
        headers = dict(client.headers)
        if client.proxy and client.scheme == "http":
            # A plain-HTTP proxy wants the absolute URL and its credentials on every request.
            target = "%s://%s:%d%s" % (client.scheme, client.host, client.port, target)
            headers.update(client.proxy[2])
        body = json.dumps(payload).encode("utf-8") if payload is not None else b""
        headers["Host"] = client.netloc
        headers["Accept"] = "text/event-stream, application/json"
        headers["Content-Length"] = str(len(body))
        if payload is not None:
            headers["Content-Type"] = "application/json"
        head = "%s %s HTTP/1.1\r\n%s\r\n" % (method, target, "".join("%s: %s\r\n" % item for item in headers.items()))
        return head.encode("latin-1") + body


def _tunnel(sock, client):
    """Ask an HTTP proxy for a tunnel to the server (CONNECT), as https through a proxy needs."""
    authority = "%s:%d" % (client.host, client.port)
    if ":" in client.host:
        authority = "[%s]:%d" % (client.host, client.port)
    headers = dict(client.proxy[2], Host=authority)
    sock.sendall(("CONNECT %s HTTP/1.1\r\n%s\r\n" % (
        authority, "".join("%s: %s\r\n" % item for item in headers.items()))).encode("latin-1"))
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = sock.recv(4096)
        if not data:
            raise ConnectionError("the proxy closed the connection during CONNECT")
        answer += data
        if len(answer) > HEAD_LIMIT:
            raise ConnectionError("the proxy's answer to CONNECT is too long")
    status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    if status_line.split(" ")[1:2] != ["200"]:
        raise ConnectionError("the proxy refused the tunnel to %s: %s" % (authority, status_line))


def _describe(exc, timeout):
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "no data within %.1f s (timed out)" % timeout
    if isinstance(exc, ssl.SSLError):
        return "TLS error: %s" % exc
    return "%s: %s" % (type(exc).__name__, exc)


class _Exchange:
    """Engine state of one request in flight on one worker's connection."""

    __slots__ = ("worker", "connection", "sock", "capture", "remaining", "tail", "close", "last_io", "received",
                 "head_scanned")

    def __init__(self, worker, connection, capture):
        self.worker = worker
        self.connection = connection
        self.sock = None
        self.capture = capture
        self.remaining = None
        self.tail = b""
        self.close = False
        self.last_io = capture.t_send
        self.received = 0
        self.head_scanned = 0  # bytes of the head already searched for its end


def _read_head(exchange):
    """Once the status line and headers are in, note how the body ends; True when it has."""
    capture = exchange.capture
    raw = capture.data
    # Only what came since the last search (and 3 bytes before it), however small the reads.
    end = raw.find(b"\r\n\r\n", max(0, exchange.head_scanned - 3))
    exchange.head_scanned = len(raw)
    if end < 0:
        if len(raw) > HEAD_LIMIT:
            raise ValueError("response headers longer than %d bytes" % HEAD_LIMIT)
        return False
    lines = bytes(raw[:end]).decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ", 2)[:2]
    capture.status = int(status)
    capture.head_len = end + 4
    headers = dict((name.strip().lower(), value.strip()) for name, _sep, value in
                   (line.partition(":") for line in lines[1:]))
    body_tail = bytes(raw[max(end + 4, len(raw) - 7):])  # where a chunked body's end would be
    exchange.close = version == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        capture.chunked = True
        exchange.tail = (b"\r\n" + body_tail)[-7:]
        return exchange.tail == CHUNKED_END
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length < 0 or length > RESPONSE_LIMIT:
            raise ValueError("Content-Length %d is outside 0 to %d bytes (the client's limit)" % (length, RESPONSE_LIMIT))
        exchange.remaining = length - (len(raw) - end - 4)
        return exchange.remaining <= 0
    exchange.close = True  # the body ends when the server closes the connection
    return False


def _dechunk(data, ends, deadline=None, base=0):
    """Undo chunked transfer coding: (body, ``ends`` (offsets counted from ``base`` bytes before
    ``data``) as offsets in the body, complete). SGLangError for a malformed chunk size or the
    deadline passed. Linear in the chunks and the stamps, whatever their sizes."""
    body = bytearray()
    mapped = array.array("q")
    index, count = 0, len(ends)
    pos, size, steps, complete = 0, len(data), 0, False
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            break
        size_field = bytes(data[pos:end]).split(b";", 1)[0].strip()
        if not HEX_SIZE_RE.match(size_field):
            # int(x, 16) would also take "-1", "0x10" and "1_0"; HTTP/1.1 allows hex digits only.
            raise SGLangError("malformed chunked body: chunk size %r is not hexadecimal" % size_field[:40])
        length = int(size_field, 16)
        if not length:
            complete = True
            break
        start = end + 2
        stop = min(start + length, size)
        # A read that ended in this chunk's framing or data: what the body held at that byte.
        while index < count and ends[index] - base <= stop:
            mapped.append(len(body) + max(0, ends[index] - base - start))
            index += 1
            steps += 1
            if deadline is not None and not steps % DEADLINE_CHECK_EVERY and time.perf_counter() >= deadline:
                raise SGLangError(DECODE_DEADLINE_MESSAGE)
        body += data[start:stop]
        pos = stop + 2  # the CRLF after the chunk's data
        steps += 1
        if deadline is not None and not steps % DEADLINE_CHECK_EVERY and time.perf_counter() >= deadline:
            raise SGLangError(DECODE_DEADLINE_MESSAGE)
    mapped.extend(array.array("q", [len(body)]) * (count - index))
    return body, mapped, complete


def decode_capture(capture, deadline=None):
    """Turn the raw bytes of a finished request into its body (stamps kept), status and error;
    decoding stops with an error at ``deadline``."""
    data = capture.data
    if capture.head_len is None:
        capture.data = bytearray()
        capture.line_ends, capture.line_stamps = array.array("q"), array.array("d")
        if capture.error is None:
            capture.error = "server closed the connection without a response"
        return capture
    # The body starts head_len bytes into what was read: the stamps' offsets count from there.
    capture.stamp_base = capture.head_len
    del data[:capture.head_len]
    if capture.chunked:
        try:
            data, capture.line_ends, ended = _dechunk(data, capture.line_ends, deadline, capture.head_len)
            capture.stamp_base = 0
        except SGLangError as exc:
            data, ended = bytearray(), False
            capture.error = capture.error or str(exc)
        capture.complete = capture.complete and ended
    capture.data = data
    if capture.error is None and not capture.complete:
        capture.error = "stream truncated: connection closed mid-response"
    return capture


def run_requests(client, workers, per_worker, request_for, timeout=None, deadline=None, total=None, arrivals=None):
    """Send ``workers`` x ``per_worker`` requests from this one thread and capture the answers.

    Each worker has its own keep-alive connection, opened before the first request, and sends
    its requests one after another; all first requests go out together. ``request_for(index)``
    gives (method, path, payload) for request ``index`` (worker + round x workers). One
    selector serves every connection: a read costs one recv and one perf_counter stamp, and
    all parsing waits until everything has finished, so the client stays out of the way of
    what it measures. ``timeout`` bounds silence on a connection (the client's by default);
    ``deadline`` (perf_counter) bounds the whole run, connecting included. ``total`` caps the
    number of requests below workers x per_worker. ``arrivals`` (open loop) gives each worker's
    send time in seconds after the start: worker i sends its one request then, whether or not
    the others have finished (give one worker per request). Failures are recorded in the
    captures, never raised.

    Returns (decoded captures in completion order, wall seconds from the first send to the
    last completion).
    """
    timeout = client.timeout if timeout is None else timeout
    perf_counter = time.perf_counter
    selector = selectors.DefaultSelector()
    connections = [client.connection() for _worker in range(workers)]
    rounds = [0] * workers
    ready = list(range(workers - 1, -1, -1)) if arrivals is None else []  # next request can go out
    finished = []
    active = {}

    def finish(exchange, now, error=None):
        capture = exchange.capture
        capture.t_end = now
        if error is not None:
            capture.error = error
        if exchange.sock is not None:
            selector.unregister(exchange.sock)
            del active[exchange.sock]
        if error is not None or exchange.close or not capture.complete:
            exchange.connection.close()
        finished.append(capture)
        ready.append(exchange.worker)

    def send(exchange, index):
        method, path, payload = request_for(index)
        if exchange.worker in open_failures:
            raise SGLangError(open_failures.pop(exchange.worker))
        while True:
            wait = remaining(deadline, timeout)
            if wait <= 0:
                raise SGLangError("deadline reached before the request was sent")
            reused = exchange.connection.sock is not None
            try:
                sock = exchange.connection.open(wait)
                data = exchange.connection.request_bytes(method, path, payload)
                sock.settimeout(wait)
                exchange.capture.t_send = exchange.last_io = perf_counter()
                sock.sendall(data)
                sock.setblocking(False)
                return sock
            except (OSError, ValueError) as exc:
                exchange.connection.close()
                # A kept-alive connection the server closed meanwhile gets one new connection.
                if not reused:
                    raise SGLangError(_describe(exc, wait))

    open_failures = {}  # worker -> why the connection opened up front failed
    for worker, connection in enumerate(connections):
        wait = remaining(deadline, timeout)
        if wait <= 0:
            # However many workers there are, none connects after the deadline.
            open_failures[worker] = "deadline reached before the connection was opened"
            continue
        try:
            connection.open(wait)
        except (OSError, ValueError) as exc:
            connection.close()
            open_failures[worker] = _describe(exc, wait)
    received = [0, 0]  # bytes and stamped reads of every answer of this call, against the run's caps
    start = perf_counter()
    next_check = start + IDLE_CHECK_S
    # (due time, worker) of the open-loop requests not sent yet, earliest last.
    due = sorted(((start + offset, worker) for worker, offset in enumerate(arrivals or ())), reverse=True)
    try:
        while True:
            now = perf_counter()
            # Past the deadline every request still due is released, to be refused as unsent.
            while due and (due[-1][0] <= now or (deadline is not None and now >= deadline)):
                ready.append(due.pop()[1])
            while ready:
                worker = ready.pop()
                if rounds[worker] >= per_worker:
                    continue
                index = worker + rounds[worker] * workers
                rounds[worker] += 1
                if total is not None and index >= total:
                    continue
                exchange = _Exchange(worker, connections[worker], StreamCapture(perf_counter(), index))
                if deadline is not None and exchange.capture.t_send >= deadline:
                    finish(exchange, exchange.capture.t_send, "deadline reached before the request was sent")
                    continue
                if received[0] > RUN_LIMIT or received[1] > RUN_STAMP_LIMIT:
                    finish(exchange, exchange.capture.t_send, RUN_LIMIT_MESSAGE % RUN_LIMIT if received[0] > RUN_LIMIT
                           else RUN_STAMP_MESSAGE % RUN_STAMP_LIMIT)
                    continue
                try:
                    exchange.sock = send(exchange, index)
                except SGLangError as exc:
                    finish(exchange, perf_counter(), str(exc))
                    continue
                active[exchange.sock] = exchange
                selector.register(exchange.sock, selectors.EVENT_READ, exchange)
            if not active and not due:
                break
            wait = IDLE_CHECK_S if deadline is None else max(0.0, min(IDLE_CHECK_S, deadline - perf_counter()))
            if due:
                wait = max(0.0, min(wait, due[-1][0] - perf_counter()))
            if not active:
                time.sleep(wait)
            for key, _events in (selector.select(wait) if active else ()):
                exchange = key.data
                sock = exchange.sock
                if active.get(sock) is not exchange:
                    continue  # ended by an earlier event of this round
                try:
                    data = sock.recv(READ_SIZE)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except OSError as exc:
                    finish(exchange, perf_counter(), _describe(exc, timeout))
                    continue
                now = perf_counter()
                capture = exchange.capture
                if not data:
                    capture.complete = capture.head_len is not None and exchange.close \
                        and not capture.chunked and exchange.remaining is None
                    finish(exchange, now)
                    continue
                stamps = len(capture.line_ends)
                capture.receive(now, data)
                exchange.last_io = now
                while getattr(sock, "pending", None) and sock.pending():
                    more = sock.recv(READ_SIZE)
                    capture.receive(now, more)
                    data += more
                exchange.received += len(data)
                received[0] += len(data)
                received[1] += len(capture.line_ends) - stamps
                if exchange.received > RESPONSE_LIMIT:
                    finish(exchange, now, "the answer is longer than %d bytes (the client's limit)" % RESPONSE_LIMIT)
                    continue
                if len(capture.line_ends) > STAMP_LIMIT:
                    finish(exchange, now, "the answer came in more than %d pieces with line ends (the client's "
                                          "limit)" % STAMP_LIMIT)
                    continue
                if received[0] > RUN_LIMIT or received[1] > RUN_STAMP_LIMIT:
                    message = RUN_LIMIT_MESSAGE % RUN_LIMIT if received[0] > RUN_LIMIT \
                        else RUN_STAMP_MESSAGE % RUN_STAMP_LIMIT
                    for other in list(active.values()):
                        finish(other, now, message)
                    continue
                if capture.head_len is None:
                    try:
                        done = _read_head(exchange)
                    except (ValueError, IndexError) as exc:
                        finish(exchange, now, "malformed response: %s" % exc)
                        continue
                elif capture.chunked:
                    exchange.tail = (exchange.tail + data)[-7:]
                    done = exchange.tail == CHUNKED_END
                elif exchange.remaining is not None:
                    exchange.remaining -= len(data)
                    done = exchange.remaining <= 0
                else:
                    done = False
                if done:
                    capture.complete = True
                    finish(exchange, now)
            now = perf_counter()
            if deadline is not None and now >= deadline:
                # Requests not sent yet are recorded as failed by the loop above.
                for exchange in list(active.values()):
                    finish(exchange, now, "deadline reached while waiting for the answer")
            elif now >= next_check:
                next_check = now + IDLE_CHECK_S
                for exchange in list(active.values()):
                    if now - exchange.last_io > timeout:
                        finish(exchange, now, "no data within %.1f s (timed out)" % timeout)
    finally:
        for exchange in list(active.values()):
            selector.unregister(exchange.sock)
        selector.close()
        for connection in connections:
            connection.close()
    wall = (max(c.t_end for c in finished) - start) if finished else 0.0
    return [decode_capture(capture, deadline) for capture in finished], wall

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP and server-sent-events client for SGLang servers, on the standard library only.

Shared by the ``sglang_probe`` and ``sglang_bench`` modules. One HTTP/1.1 engine carries every
request, a health check as much as 64 concurrent streams: one selector over one keep-alive
connection per worker, ``time.perf_counter()`` stamped on every read while requests run and all
parsing done after they have ended, so that the client adds as little as possible to what it
measures. Every request runs against a deadline on the same clock, so that a module's time
options bound its whole run, retries included.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import selectors
import socket
import ssl
import time
import urllib.parse
import urllib.request

USER_AGENT = "pro6000.inference-sglang-client/1"
# The options of the doc fragment pro6000.inference.sglang_server, shared by the modules.
SERVER_ARGUMENT_SPEC = dict(
    url=dict(type="str", default="http://127.0.0.1:30000"),
    api_key=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", default=True),
    ca_path=dict(type="path"),
)
READ_SIZE = 65536
# How often the request engine looks for connections that stopped sending (seconds).
IDLE_CHECK_S = 0.05
CHUNKED_END = b"\r\n0\r\n\r\n"
HEAD_LIMIT = 65536


class SGLangError(Exception):
    """A request could not be completed (transport failure, timeout, bad URL)."""


class Response:
    """A complete, non-streamed HTTP response."""

    def __init__(self, status, body):
        self.status = status
        self.body = body

    @property
    def ok(self):
        return 200 <= self.status < 300

    def json(self):
        """Decode the body as JSON; raise SGLangError naming the status when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise SGLangError("HTTP %d: body is not JSON (%s): %r" % (self.status, exc, self.body[:200]))

    def text(self, limit=300):
        return self.body[:limit].decode("utf-8", "replace").strip()


class StreamCapture:
    """What arrived for one request: reads with their perf_counter stamps.

    While the request runs ``reads`` holds the raw bytes off the socket; afterwards
    ``decode_capture`` turns them into the body's pieces (still stamped) and sets ``status``
    and ``error`` (transport failures only); ``failure()`` adds an HTTP error status.
    """

    __slots__ = ("index", "t_send", "t_end", "status", "reads", "error", "head_len", "chunked", "complete")

    def __init__(self, t_send, index=None):
        self.index = index
        self.t_send = t_send
        self.t_end = None
        self.status = None
        self.reads = []
        self.error = None
        self.head_len = None
        self.chunked = False
        self.complete = False

    @property
    def body(self):
        return b"".join(piece for _stamp, piece in self.reads)

    def failure(self):
        """Why this request failed (transport or HTTP status other than 200), or None."""
        if self.error is None and self.status != 200:
            return "HTTP %s: %s" % (self.status, self.body[:300].decode("utf-8", "replace").strip())
        return self.error


def is_loopback(host):
    """True for localhost names and loopback addresses (IPv4 and IPv6)."""
    if host is None:
        return False
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_for(scheme, host):
    """The proxy URL to use for scheme://host, honouring *_proxy and no_proxy; never for loopback."""
    if is_loopback(host):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme)
    if not proxy or urllib.request.proxy_bypass_environment(host, proxies):
        return None
    return proxy


def split_url(url, option):
    """(scheme, host, port, path) of an http(s) URL; SGLangError naming ``option`` otherwise."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise SGLangError("%s %r is not a valid URL: %s" % (option, url, exc))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SGLangError("%s must be http(s)://host[:port][/prefix], got %r" % (option, url))
    if port == 0:
        raise SGLangError("%s %r: the port must be between 1 and 65535" % (option, url))
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), parts


def check_positive(params, *names):
    """The first of ``names`` whose value is not a positive number, as an error message."""
    for name in names:
        if not params[name] > 0:
            return "%s must be a positive number of seconds, got %r" % (name, params[name])
    return None


def remaining(deadline, timeout):
    """Seconds a step may wait: ``timeout``, shortened to what is left before ``deadline``."""
    if deadline is None:
        return timeout
    return min(timeout, deadline - time.perf_counter())


class SGLangClient:
    """Connection settings for one SGLang server; ``connection()`` opens one per worker.

    ``timeout`` bounds silence on a connection (connect, TLS, each wait for data); deadlines,
    ``time.perf_counter()`` values given per call, bound whole requests and their retries.
    """

    def __init__(self, base_url, api_key=None, timeout=30.0, validate_certs=True, ca_path=None,
                 retries=2, retry_delay=0.5):
        self.scheme, self.host, self.port, parts = split_url(base_url, "url")
        self.base_url = base_url.rstrip("/")
        self.prefix = parts.path.rstrip("/")
        self.netloc = parts.netloc.rsplit("@", 1)[-1]
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.retry_delay = float(retry_delay)
        self.headers = {"User-Agent": USER_AGENT}
        if api_key:
            self.headers["Authorization"] = "Bearer %s" % api_key
        self.ssl_context = None
        if self.scheme == "https":
            self.ssl_context = ssl.create_default_context(cafile=ca_path or None)
            if not validate_certs:
                self.ssl_context.check_hostname = False
                self.ssl_context.verify_mode = ssl.CERT_NONE
        self.proxy = None
        proxy = proxy_for(self.scheme, self.host)
        if proxy:
            scheme, host, port, parts = split_url(proxy, "the %s_proxy environment variable" % self.scheme)
            credentials = {}
            if parts.username:
                token = "%s:%s" % (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
                credentials["Proxy-Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
            self.proxy = (host, port, credentials)

    def url(self, path):
        return self.base_url + path

    def connection(self):
        return Connection(self)

    def request(self, method, path, payload=None, deadline=None, retries=0):
        """One request, read whole; transport failures are retried ``retries`` times while the
        deadline allows. Any HTTP status returns a Response; a transport failure raises."""
        attempt = 0
        while True:
            captures, _wall = run_requests(self, 1, 1, lambda index: (method, path, payload), deadline=deadline)
            capture = captures[0]
            if capture.error is None:
                return Response(capture.status, capture.body)
            wait = self.retry_delay * (attempt + 1)
            if attempt >= retries or (deadline is not None and time.perf_counter() + wait >= deadline):
                raise SGLangError("%s %s: %s" % (method, self.url(path), capture.error))
            attempt += 1
            time.sleep(wait)

    def get(self, path, deadline=None, retries=None):
        """GET with bounded retries on transport failures (GET is idempotent); any status returns."""
        return self.request("GET", path, deadline=deadline, retries=self.retries if retries is None else retries)

    def post(self, path, payload=None, deadline=None):
        """POST a JSON payload once (no retry: the server may have acted on it)."""
        return self.request("POST", path, payload=payload, deadline=deadline)

    def get_json(self, path, deadline=None):
        """GET and decode JSON; raise SGLangError naming the URL for a non-2xx status."""
        response = self.get(path, deadline=deadline)
        if not response.ok:
            raise SGLangError("GET %s: HTTP %d: %s" % (self.url(path), response.status, response.text()))
        return response.json()


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

    __slots__ = ("worker", "connection", "sock", "capture", "remaining", "tail", "close", "last_io")

    def __init__(self, worker, connection, capture):
        self.worker = worker
        self.connection = connection
        self.sock = None
        self.capture = capture
        self.remaining = None
        self.tail = b""
        self.close = False
        self.last_io = capture.t_send


def _read_head(exchange):
    """Once the status line and headers are in, note how the body ends; True when it has."""
    capture = exchange.capture
    raw = b"".join(piece for _stamp, piece in capture.reads)
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        if len(raw) > HEAD_LIMIT:
            raise ValueError("response headers longer than %d bytes" % HEAD_LIMIT)
        return False
    lines = raw[:end].decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ", 2)[:2]
    capture.status = int(status)
    capture.head_len = end + 4
    headers = dict((name.strip().lower(), value.strip()) for name, _sep, value in
                   (line.partition(":") for line in lines[1:]))
    body = raw[end + 4:]
    exchange.close = version == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        capture.chunked = True
        exchange.tail = (b"\r\n" + body)[-7:]
        return exchange.tail == CHUNKED_END
    if "content-length" in headers:
        exchange.remaining = int(headers["content-length"]) - len(body)
        return exchange.remaining <= 0
    exchange.close = True  # the body ends when the server closes the connection
    return False


def _dechunk(pieces):
    """Undo chunked transfer coding, keeping each piece's stamp; returns (pieces, complete)."""
    out = []
    need = 0  # data bytes left in the current chunk
    skip = 0  # CRLF bytes left after a chunk's data
    pending = b""
    for stamp, data in pieces:
        if pending:
            data = pending + data
            pending = b""
        pos = 0
        size = len(data)
        while pos < size:
            if need:
                piece = data[pos:pos + need]
                out.append((stamp, piece))
                need -= len(piece)
                pos += len(piece)
                if not need:
                    skip = 2
            elif skip:
                step = min(skip, size - pos)
                skip -= step
                pos += step
            else:
                end = data.find(b"\r\n", pos)
                if end < 0:
                    pending = data[pos:]
                    break
                length = int(data[pos:end].split(b";", 1)[0], 16)
                pos = end + 2
                if not length:
                    return out, True
                need = length
    return out, False


def decode_capture(capture):
    """Turn the raw reads of a finished request into stamped body pieces, status and error."""
    raw = capture.reads
    if capture.head_len is None:
        capture.reads = []
        if capture.error is None:
            capture.error = "server closed the connection without a response"
        return capture
    body = []
    skip = capture.head_len
    for stamp, data in raw:
        if skip >= len(data):
            skip -= len(data)
            continue
        body.append((stamp, data[skip:] if skip else data))
        skip = 0
    if capture.chunked:
        body, ended = _dechunk(body)
        capture.complete = capture.complete and ended
    capture.reads = body
    if capture.error is None and not capture.complete:
        capture.error = "stream truncated: connection closed mid-response"
    return capture


def run_requests(client, workers, per_worker, request_for, timeout=None, deadline=None, total=None):
    """Send ``workers`` x ``per_worker`` requests from this one thread and capture the answers.

    Each worker has its own keep-alive connection, opened before the first request, and sends
    its requests one after another; all first requests go out together. ``request_for(index)``
    gives (method, path, payload) for request ``index`` (worker + round x workers). One
    selector serves every connection: a read costs one recv and one perf_counter stamp, and
    all parsing waits until everything has finished, so the client stays out of the way of
    what it measures. ``timeout`` bounds silence on a connection (the client's by default);
    ``deadline`` (perf_counter) bounds the whole run, connecting included. ``total`` caps the
    number of requests below workers x per_worker. Failures are recorded in the captures,
    never raised.

    Returns (decoded captures in completion order, wall seconds from the first send to the
    last completion).
    """
    timeout = client.timeout if timeout is None else timeout
    perf_counter = time.perf_counter
    selector = selectors.DefaultSelector()
    connections = [client.connection() for _worker in range(workers)]
    rounds = [0] * workers
    ready = list(range(workers - 1, -1, -1))  # workers whose next request can go out
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
            failure, wait = open_failures.pop(exchange.worker)
            raise SGLangError(_describe(failure, wait))
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

    open_failures = {}  # worker -> (exception, seconds allowed) of the connection opened up front
    for worker, connection in enumerate(connections):
        wait = max(remaining(deadline, timeout), 0.001)
        try:
            connection.open(wait)
        except (OSError, ValueError) as exc:
            connection.close()
            open_failures[worker] = (exc, wait)
    start = perf_counter()
    next_check = start + IDLE_CHECK_S
    try:
        while True:
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
                try:
                    exchange.sock = send(exchange, index)
                except SGLangError as exc:
                    finish(exchange, perf_counter(), str(exc))
                    continue
                active[exchange.sock] = exchange
                selector.register(exchange.sock, selectors.EVENT_READ, exchange)
            if not active:
                break
            wait = IDLE_CHECK_S if deadline is None else max(0.0, min(IDLE_CHECK_S, deadline - perf_counter()))
            for key, _events in selector.select(wait):
                exchange = key.data
                sock = exchange.sock
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
                capture.reads.append((now, data))
                exchange.last_io = now
                while getattr(sock, "pending", None) and sock.pending():
                    more = sock.recv(READ_SIZE)
                    capture.reads.append((now, more))
                    data += more
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
    return [decode_capture(capture) for capture in finished], wall


# How a stream's decode speed got its first event's token count.
DECODE_COUNTS_PER_EVENT = "per_event_counts"
DECODE_PREFILL_TOKEN = "prefill_token"


class StreamResult:
    """A parsed stream: token counts from the server, timing from the client's stamps."""

    __slots__ = ("ok", "error", "status", "t_send", "t_end", "t_first", "t_last", "n_out",
                 "n_first", "counts_per_chunk", "content_chunks", "prompt_tokens",
                 "finish_reason", "done", "spec_verify_ct")

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


def iter_sse_events(reads):
    """Yield (stamp, data string) per SSE event from stamped reads; comment lines are skipped.

    Each event carries the stamp of the read that completed its last data line.
    """
    pending = b""
    data_lines = []
    stamp = None
    for t, chunk in reads:
        if pending:
            chunk = pending + chunk
        lines = chunk.split(b"\n")
        pending = lines.pop()
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data_lines:
                    yield stamp, b"\n".join(data_lines).decode("utf-8", "replace")
                    data_lines = []
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                data_lines.append(value[1:] if value.startswith(b" ") else value)
                stamp = t
            # ":" comments and event:/id:/retry: fields carry nothing the benchmark needs.
    if pending.startswith(b"data:"):
        value = pending[5:]
        data_lines.append(value[1:] if value.startswith(b" ") else value)
        stamp = reads[-1][0]
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


def parse_stream(capture):
    """Turn a StreamCapture into a StreamResult (OpenAI chunks and native /generate events).

    Content chunks are those with text (``delta.content``, ``delta.reasoning_content``,
    ``text``); role-only deltas, finish-only and usage-only chunks are not content. Token
    counts come from the server: ``usage.completion_tokens`` or ``meta_info.completion_tokens``.
    """
    result = StreamResult()
    result.status = capture.status
    result.t_send = capture.t_send
    result.t_end = capture.t_end
    error = capture.failure()
    previous_count = 0
    count_at_last_content = None
    for stamp, data in iter_sse_events(capture.reads):
        if data == "[DONE]":
            result.done = True
            continue
        try:
            event = json.loads(data)
        except ValueError:
            error = error or "malformed event: %r" % data[:200]
            continue
        if not isinstance(event, dict):
            error = error or "unexpected event: %r" % data[:200]
            continue
        event_error = _error_text(event)
        if event_error is not None:
            error = error or "error event: %s" % event_error
            continue
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
            count = usage.get("completion_tokens")
            result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        meta = event.get("meta_info")
        if meta:
            count = meta.get("completion_tokens", count)
            result.prompt_tokens = meta.get("prompt_tokens", result.prompt_tokens)
            result.spec_verify_ct = meta.get("spec_verify_ct", result.spec_verify_ct)
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
            result.content_chunks += 1
            if count is None or count == count_at_last_content:
                result.counts_per_chunk = False
            count_at_last_content = count
            if result.content_chunks == 1:
                result.n_first = count
        if count is not None:
            previous_count = count
            result.n_out = count
    if not result.counts_per_chunk:
        result.n_first = None
    if error is None and not result.done:
        error = "stream truncated: ended without data: [DONE]"
    if error is None and result.n_out is None:
        error = "the server reported no completion token count"
    result.error = error
    result.ok = error is None
    return result


def fetch_server_info(client, deadline=None):
    """GET /server_info, falling back to the deprecated /get_server_info; returns (path, info)."""
    path = "/server_info"
    response = client.get(path, deadline=deadline)
    if response.status in (404, 405):
        path = "/get_server_info"
        response = client.get(path, deadline=deadline)
    if not response.ok:
        raise SGLangError("GET %s: HTTP %d: %s" % (client.url(path), response.status, response.text()))
    return path, response.json()


def _first(info, *names):
    for name in names:
        value = info.get(name)
        if value is not None:
            return value
    return None


def speculative_settings(server_info):
    """The speculative decoding setup a server reports, normalised across releases and forks.

    DDTree appears either as algorithm DDTREE (SGLang pull request 29907) or as DFLASH with
    ``speculative_dflash_enable_ddtree`` (a fork); both are reported as ``DDTREE``.
    """
    algorithm = server_info.get("speculative_algorithm")
    algorithm = str(algorithm).upper() if algorithm not in (None, "", "NONE", "None") else None
    if algorithm == "DFLASH" and server_info.get("speculative_dflash_enable_ddtree"):
        algorithm = "DDTREE"
    states = server_info.get("internal_states")
    if isinstance(states, dict):
        states = [states]
    accept = [s.get("avg_spec_accept_length") for s in states or [] if isinstance(s, dict)]
    return {
        "algorithm": algorithm,
        "num_draft_tokens": _first(server_info, "speculative_num_draft_tokens", "speculative_dflash_block_size"),
        "ddtree_budget": _first(server_info, "speculative_ddtree_budget", "speculative_dflash_ddtree_budget"),
        "draft_model_path": server_info.get("speculative_draft_model_path"),
        "avg_spec_accept_length": [a for a in accept if a is not None],
    }


def normalise_path(value):
    """Compare model paths without caring about trailing slashes or ``./`` segments."""
    if value is None:
        return None
    value = str(value)
    return os.path.normpath(value) if "/" in value else value


def summarise(values):
    """min, p50, p90, p95, p99, max and mean of a list of numbers (None when empty)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    last = len(values) - 1

    def pick(q):
        # Linear interpolation between closest ranks, as numpy's default percentile.
        pos = q * last
        low = int(pos)
        high = min(low + 1, last)
        return values[low] + (values[high] - values[low]) * (pos - low)

    return {
        "count": len(values),
        "min": values[0],
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "max": values[-1],
        "mean": sum(values) / len(values),
    }

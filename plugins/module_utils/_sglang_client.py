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

Whatever a server sends, a request ends in a result or an SGLangError naming the URL (never its
credentials): answers are capped (RESPONSE_LIMIT each, RUN_LIMIT for all answers of one
run_requests call, EVENT_LIMIT for one server-sent event), malformed framing, JSON nested too deep
and JSON of an unexpected shape are errors, not exceptions of the parser. Memory stays within a
fixed multiple of those caps however the server splits its answer into packets (an answer is one
buffer, not one object per read), and decoding after the run is linear and stops at the deadline.
"""

from __future__ import annotations

import array
import base64
import bisect
import ipaddress
import json
import math
import os
import re
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
# The user:password@ part of a URL, wherever a URL is quoted.
CREDENTIALS_RE = re.compile(r"(?<=//)[^/?#\s]*@")


class SGLangError(Exception):
    """A request could not be completed (transport failure, timeout, bad URL)."""


class Response:
    """A complete, non-streamed HTTP response to ``request`` ("GET http://host/path")."""

    def __init__(self, status, body, request="response"):
        self.status = status
        self.body = body
        self.request = request

    @property
    def ok(self):
        return 200 <= self.status < 300

    def json(self, expect=None):
        """Decode the body as JSON (of type ``expect`` when given); SGLangError naming the request
        and the status when it is not JSON or not of that type."""
        try:
            value = loads(self.body)
        except ValueError as exc:
            raise SGLangError("%s: HTTP %d: body is not JSON (%s): %r" % (self.request, self.status, exc,
                                                                          self.body[:200]))
        if expect is not None and not isinstance(value, expect):
            raise SGLangError("%s: HTTP %d: expected a JSON %s, got %s: %r" % (
                self.request, self.status, json_type(expect), json_type(type(value)), self.body[:200]))
        return value

    def text(self, limit=300):
        return self.body[:limit].decode("utf-8", "replace").strip()


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


def redact(text):
    """Text with the credentials of every URL in it left out (http://user:pw@host -> http://host)."""
    return CREDENTIALS_RE.sub("", text)


def url_credentials(url):
    """The user:password and the password of a URL, for AnsibleModule.no_log_values: the module's
    result repeats its options (invocation), where they must not appear either."""
    match = CREDENTIALS_RE.search(url or "")
    if not match:
        return set()
    userinfo = match.group(0)[:-1]
    return set(value for value in (userinfo, userinfo.partition(":")[2]) if value)


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
        raise SGLangError("%s %r is not a valid URL: %s" % (option, redact(url), redact(str(exc))))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SGLangError("%s must be http(s)://host[:port][/prefix], got %r" % (option, redact(url)))
    if port == 0:
        raise SGLangError("%s %r: the port must be between 1 and 65535" % (option, redact(url)))
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), parts


POSITIVE = "positive"


def check_bounds(params, bounds):
    """The first option outside its bounds, as an error message; None when all are within.

    ``bounds`` maps an option to (least, most, unit): ``least`` is a number or POSITIVE (more
    than 0), ``most`` a number or None. Unset options pass; inf and nan never do (a socket
    timeout of inf raises, a deadline of nan never comes), so every time option bounds the run.
    """
    for name, (least, most, unit) in bounds.items():
        value = params.get(name)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            return "%s must be a finite number, got %r" % (name, value)
        if least == POSITIVE:
            if not value > 0:
                return "%s must be a positive number of %s, got %r" % (name, unit, value)
        elif value < least:
            return ("%s must not be negative, got %r" % (name, value) if least == 0
                    else "%s must be at least %r, got %r" % (name, least, value))
        if most is not None and value > most:
            return "%s must be at most %r %s, got %r" % (name, most, unit, value)
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
        # What messages and results name: the URL without its credentials.
        self.base_url = redact(base_url).rstrip("/")
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
                return Response(capture.status, capture.body, "%s %s" % (method, self.url(path)))
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
        """GET and decode a JSON object; raise SGLangError naming the URL for a non-2xx status
        or an answer that is not a JSON object."""
        response = self.get(path, deadline=deadline)
        if not response.ok:
            raise SGLangError("GET %s: HTTP %d: %s" % (self.url(path), response.status, response.text()))
        return response.json(dict)


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


def fetch_server_info(client, deadline=None):
    """GET /server_info, falling back to the deprecated /get_server_info; returns (path, info)."""
    path = "/server_info"
    response = client.get(path, deadline=deadline)
    if response.status in (404, 405):
        path = "/get_server_info"
        response = client.get(path, deadline=deadline)
    if not response.ok:
        raise SGLangError("GET %s: HTTP %d: %s" % (client.url(path), response.status, response.text()))
    return path, response.json(dict)


def model_cards(client, deadline=None):
    """The model cards (JSON objects) that GET /v1/models lists under ``data``."""
    cards = client.get_json("/v1/models", deadline=deadline).get("data") or []
    if not isinstance(cards, list):
        raise SGLangError("GET %s: expected data to be a JSON array, got %s" % (
            client.url("/v1/models"), json_type(type(cards))))
    return [card for card in cards if isinstance(card, dict)]


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

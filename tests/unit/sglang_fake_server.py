"""A scriptable SGLang-shaped HTTP server on loopback for the sglang_* unit tests.

Each test sets what the endpoints answer (field names and SSE shapes as SGLang sends them) and
injects failures: HTTP errors, error events, truncated streams, slow answers, missing endpoints.
It runs in threads of the test process and is shut down by the fixture that started it.
"""
import http.server
import json
import socket
import threading
import time

import pytest

from ansible.module_utils.testing import patch_module_args

SERVER_INFO = {
    "version": "0.5.23",
    "model_path": "/srv/models/Qwen3.6-27B",
    "speculative_algorithm": "DFLASH",
    "speculative_num_draft_tokens": 16,
    "speculative_draft_model_path": "/srv/models/Qwen3.6-27B-DFlash",
    "attention_backend": "flashinfer",
    "page_size": 1,
    "internal_states": [{"avg_spec_accept_length": 6.5, "last_gen_throughput": 100.0}],
}

# Longest a scripted pause may last, so that a test can never hang on its own server.
MAX_PAUSE_S = 30.0
# What a time bound measured by the server (first request in, last connection closed by the
# client) may exceed the module's bound by: the client checks its deadline every 0.05 s
# (IDLE_CHECK_S), then two processes (the module and this server's thread) must each be woken
# once more to close and to see the close. With two busy loops on a 2-core machine each wake-up
# waits behind them for a CFS slice (sched_latency is 12-24 ms there), a few slices at worst;
# 0.5 s is ten times the deadline check interval and several times that, far below any bound
# that would be broken by a deadline not enforced (each test's server waits MAX_PAUSE_S).
SERVER_SIDE_SLACK_S = 0.5


def sse(obj):
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chat_events(max_tokens, per_chunk=4, continuous_usage=True, comments=True, reasoning=False,
                model="Qwen3.6-27B", pause=0.0):
    """An OpenAI chat stream shaped as SGLang's serving_chat.py sends it: the role-only delta and
    the prefill's token alone (SGLang streams a request as soon as it holds one output token),
    then one chunk of ``per_chunk`` tokens per verify step (``pause`` seconds apart), each with
    the cumulative usage when ``continuous_usage``; a finish chunk with an empty delta; a
    usage-only chunk with empty choices; [DONE]."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model}
    events = []
    if comments:
        events.append(b": keep-alive\n\n")
    role_only = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    events.append(sse(dict(base, choices=[role_only])))
    sent = 0
    while sent < max_tokens:
        k = min(per_chunk if sent else 1, max_tokens - sent)
        sent += k
        field = "reasoning_content" if reasoning and sent <= max_tokens // 2 else "content"
        chunk = dict(base, choices=[{"index": 0, "delta": {field: "tok " * k}, "finish_reason": None}])
        if continuous_usage:
            chunk["usage"] = {"prompt_tokens": 20, "completion_tokens": sent, "total_tokens": 20 + sent}
        if pause and sent > k:
            events.append(("pause", pause))
        events.append(sse(chunk))
        if comments and sent == 1:
            events.append(b":ping\n\n")
    events.append(sse(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "length"}])))
    usage = {"prompt_tokens": 20, "completion_tokens": sent, "total_tokens": 20 + sent}
    events.append(sse(dict(base, choices=[], usage=usage)))
    events.append(b"data: [DONE]\n\n")
    return events


class Scenario:
    """What the fake server answers; tests change the attributes."""

    def __init__(self):
        self.health_status = 200
        self.healthy_after = 0.0  # seconds after start during which /health answers 503
        self.server_info = dict(SERVER_INFO)
        self.server_info_alias_only = False
        self.model_info = {"model_path": "/srv/models/Qwen3.6-27B", "is_generation": True,
                           "architectures": ["Qwen3_5ForConditionalGeneration"]}
        self.models = [{"id": "Qwen3.6-27B", "object": "model", "root": "/srv/models/Qwen3.6-27B",
                        "max_model_len": 262144}]
        self.metrics = None
        self.tokens_per_chunk = 4
        self.accept_length = 6.5  # /generate (completion_tokens - 1) / spec_verify_ct
        self.generate_has_spec = True
        self.chat_status = 200
        self.chat_stream = None  # function(payload) -> list of bytes / ("pause", s) / "close"
        self.pause_before_answer = 0.0
        self.silent_paths = set()  # GET paths that take the request and never answer
        self.generated_tokens = 0
        self.lock = threading.Lock()
        self.requests = []
        self.hangups = []  # time.monotonic() when the client closed a connection to a silent path

    def enable_metrics(self):
        self.metrics = lambda: (
            "# TYPE sglang:generation_tokens_total counter\n"
            'sglang:generation_tokens_total{model_name="Qwen3.6-27B"} %d\n' % self.generated_tokens)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    @property
    def scenario(self):
        return self.server.scenario

    def _json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status, text, content_type="text/plain"):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self, payload=None):
        self.scenario.requests.append({"method": self.command, "path": self.path, "t": time.monotonic(),
                                       "client_port": self.client_address[1],
                                       "headers": dict(self.headers), "payload": payload})

    def do_GET(self):
        self._record()
        sc = self.scenario
        if sc.pause_before_answer:
            time.sleep(min(sc.pause_before_answer, MAX_PAUSE_S))
        if self.path in sc.silent_paths:
            # Answer nothing; note when the client gives up and closes the connection.
            self.connection.settimeout(MAX_PAUSE_S)
            try:
                while self.connection.recv(4096):
                    pass
                sc.hangups.append(time.monotonic())
            except OSError:
                pass
            self.close_connection = True
            return
        if self.path == "/health":
            starting = time.monotonic() - self.server.started < sc.healthy_after
            self._text(503 if starting else sc.health_status, "")
        elif self.path == "/server_info" and not sc.server_info_alias_only:
            self._json(200, sc.server_info)
        elif self.path == "/get_server_info":
            self._json(200, sc.server_info)
        elif self.path in ("/model_info", "/get_model_info"):
            self._json(200, sc.model_info)
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": sc.models})
        elif self.path == "/metrics" and sc.metrics is not None:
            self._text(200, sc.metrics())
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length) or b"null")
        self._record(payload)
        sc = self.scenario
        if self.path == "/flush_cache":
            self._text(200, "Cache flushed.")
        elif self.path == "/generate":
            tokens = payload["sampling_params"]["max_new_tokens"]
            meta = {"prompt_tokens": 20, "completion_tokens": tokens, "finish_reason": {"type": "length"}}
            if sc.generate_has_spec:
                # The prefill commits the first token; verify steps commit the rest.
                meta["spec_verify_ct"] = int(round((tokens - 1) / sc.accept_length))
            self._json(200, {"text": "tok " * tokens, "meta_info": meta})
        elif self.path == "/v1/chat/completions":
            self._chat(payload)
        else:
            self._json(404, {"detail": "Not Found"})

    def _chat(self, payload):
        sc = self.scenario
        if sc.chat_status != 200:
            self._json(sc.chat_status, {"object": "error", "message": "scripted failure",
                                        "code": sc.chat_status})
            return
        if sc.chat_stream is not None:
            events = sc.chat_stream(payload)
        else:
            # Paced like a server's decode steps, so that chunks arrive at distinct times.
            events = chat_events(payload["max_tokens"], per_chunk=sc.tokens_per_chunk, pause=0.002)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for item in events:
            if item == "close":
                # Truncated stream: drop the connection without the terminating chunk.
                self.wfile.flush()
                self.close_connection = True
                return
            if isinstance(item, tuple):
                time.sleep(min(item[1], MAX_PAUSE_S))
                continue
            self.wfile.write(b"%x\r\n%s\r\n" % (len(item), item))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        if sc.chat_stream is None:
            with sc.lock:
                sc.generated_tokens += payload["max_tokens"]


class FakeSGLang(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.scenario = Scenario()
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def handle_error(self, request, client_address):
        # Clients that hang up mid-stream (deadline and timeout tests) are expected here.
        pass

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=5)


class _RawListener:
    """A loopback TCP listener that hands each connection to ``_serve`` in a thread of its own,
    until the listener is closed; ``_accepted`` is called first with the connection's time."""

    def __init__(self, backlog):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(backlog)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self):
        while True:
            try:
                connection, _address = self.listener.accept()
            except OSError:
                return  # the listener was closed
            self._accepted(time.monotonic())
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _accepted(self, when):
        pass

    def _serve(self, connection):
        raise NotImplementedError

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.listener.close()


class SilentServer(_RawListener):
    """Takes every connection and the request on it and never answers; stamps (time.monotonic())
    when each connection came in and when the client closed it, so that a test measures a
    module's time bound on the server's clock, without the interpreter's start-up."""

    def __init__(self):
        super().__init__(64)
        self.accepted = []
        self.closed = []

    def _accepted(self, when):
        self.accepted.append(when)

    def _serve(self, connection):
        connection.settimeout(MAX_PAUSE_S)
        try:
            while connection.recv(4096):
                pass
            self.closed.append(time.monotonic())
        except OSError:
            pass
        finally:
            connection.close()

    def span(self):
        """Seconds from the first connection to the last close, once every connection is closed."""
        deadline = time.monotonic() + 5
        while len(self.closed) < len(self.accepted) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.accepted and len(self.closed) == len(self.accepted), "a connection was left open"
        return max(self.closed) - min(self.accepted)


class RawServer(_RawListener):
    """A hostile HTTP/1.1 server for the limits of the client: it reads each request's head and
    answers ``answer`` as raw bytes (malformed framing is the point), or, when ``answer`` is a
    callable, writes what ``answer()`` yields until the client hangs up (an endless body).
    ``sent`` counts the bytes written."""

    def __init__(self, answer):
        super().__init__(16)
        self.answer = answer
        self.sent = 0

    def _serve(self, connection):
        connection.settimeout(MAX_PAUSE_S)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                data = connection.recv(4096)
                if not data:
                    return
                head += data
            pieces = self.answer() if callable(self.answer) else [self.answer]
            for piece in pieces:
                connection.sendall(piece)
                self.sent += len(piece)
        except OSError:
            pass  # the client hung up: what an endless body waits for
        finally:
            connection.close()


def run_main(main, args, capsys):
    """Run a module's main() and return (failed, result) from the JSON it prints."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            main()
    result = json.loads(capsys.readouterr().out)
    return exit_info.value.code != 0, result

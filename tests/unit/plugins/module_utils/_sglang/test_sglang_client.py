"""The SGLang client (module_utils/_sglang/client.py) against the SGLang test double on loopback
(tests/unit/plugins/conftest.py): keys, retries, TLS, proxies, URLs without their credentials,
the server's info and speculative settings, the modules' option bounds."""
import json
import socket
import ssl
import threading
import time

import pytest

from support import free_port

from ansible_collections.pro6000.inference.plugins.module_utils._sglang import client as sglang_client
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import errors as sglang_errors


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


def test_response_json_error_names_status():
    with pytest.raises(sglang_errors.SGLangError, match="HTTP 200: body is not JSON"):
        sglang_client.Response(200, b"<html>").json()
    assert json.loads(sglang_client.Response(200, b'{"a": 1}').body) == {"a": 1}


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

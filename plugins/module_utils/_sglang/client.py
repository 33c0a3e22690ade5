# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One SGLang server as the sglang_probe and sglang_bench modules see it: its URL (credentials
never named), proxies, TLS, the options the modules share, and the requests that read its
health, server info, models and speculative settings.
"""

from __future__ import annotations

import base64
import ipaddress
import math
import os
import re
import ssl
import time
import urllib.parse
import urllib.request

from ansible_collections.pro6000.inference.plugins.module_utils._sglang.errors import SGLangError
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.http import Connection, json_type, loads, run_requests


USER_AGENT = "pro6000.inference-sglang-client/1"
# The options of the doc fragment pro6000.inference.sglang_server, shared by the modules.
SERVER_ARGUMENT_SPEC = dict(
    url=dict(type="str", default="http://127.0.0.1:30000"),
    api_key=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", default=True),
    ca_path=dict(type="path"),
)
# The user:password@ part of a URL, wherever a URL is quoted.
CREDENTIALS_RE = re.compile(r"(?<=//)[^/?#\s]*@")


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

"""The gateway command line role sglang_service renders (filter sglang_gateway_argv with the
role's defaults and the lab's values), checked against the REAL parser of the smg release the
role pins (PyPI wheel, installed once into a cached virtual environment), and the role's
launcher run with that release: the API key from its file guards the gateway and is no word of
its command line. Every command line is parsed by one interpreter that imported smg's parser
once (tests/oracle/oracle.py, WarmInterpreter).

A failure to build the environment fails these tests: they never skip.
"""
import hashlib
import http.server
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "collections"), str(REPO / "tests" / "oracle")]
import oracle  # noqa: E402
from ansible_collections.pro6000.inference.plugins.filter.sglang_gateway_argv import sglang_gateway_argv  # noqa: E402
from ansible_collections.pro6000.inference.plugins.filter.sglang_replica_plan import sglang_replica_plan  # noqa: E402

DEFAULTS = yaml.safe_load((REPO / "roles" / "sglang_service" / "defaults" / "main.yml").read_text())
VERSION = DEFAULTS["sglang_service_gateway_version"]
LAUNCHER = REPO / "roles" / "sglang_service" / "files" / "smg_launch.py"
KEY = "gateway-test-key-0123456789"
PARSE = "import sys, json; from smg.launch_router import parse_router_args; parse_router_args(json.loads(sys.argv[1]))"


@pytest.fixture(scope="module")
def smg_python():
    """The interpreter of a virtual environment holding smg==VERSION (built on first use)."""
    base = os.environ.get("PRO6000_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pro6000")
    venv = pathlib.Path(base) / "smg-oracle" / ("smg-%s-%s" % (VERSION, hashlib.sha256(VERSION.encode()).hexdigest()[:8]))
    python = venv / "bin" / "python"
    if not (venv / "complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "smg==%s" % VERSION], check=True)
        (venv / "complete").write_text(VERSION)
    return str(python)


@pytest.fixture(scope="module")
def smg_parser(smg_python):
    """The pinned release's interpreter with smg's parser imported, for every command line here."""
    parser = oracle.WarmInterpreter(smg_python, ["smg.launch_router"])
    yield parser
    parser.close()


def gateway(port=30000, metrics_port=29000, metrics_host="127.0.0.1"):
    gpus = [{"uuid": "GPU-%d" % i, "pci_bus_id": "00000000:%02X:00.0" % (i + 1)} for i in range(4)]
    layout = {"tensor_parallel_size": 1, "gateway": "auto", "unit_name": "sglang-qwen", "host": "127.0.0.1",
              "port": port, "replica_port": DEFAULTS["sglang_service_replica_port"],
              "gateway_metrics_port": metrics_port, "enable_metrics": True, "metrics_host": metrics_host}
    return sglang_replica_plan(gpus, layout, {"argv": []})["gateway"]


def settings(manifest, **override):
    found = {"discovery_file": str(manifest), "shutdown_grace": DEFAULTS["sglang_service_drain_timeout"],
             "extra_args": DEFAULTS["sglang_service_gateway_extra_args"]}
    for key in ("policy", "health_check_interval", "health_check_timeout", "health_failure_threshold", "retries",
                "cb_failure_threshold", "cb_timeout", "request_timeout"):
        found[key] = DEFAULTS["sglang_service_gateway_" + key]
    found["replica_health_check_timeout"] = DEFAULTS["sglang_service_health_check_timeout"]
    found.update(override)
    return found


def parse(smg_parser, argv):
    return smg_parser.run(PARSE, [json.dumps(argv)])


def test_the_rendered_gateway_command_line_is_accepted_by_the_pinned_release(smg_parser, tmp_path):
    argv = sglang_gateway_argv(gateway(), settings(tmp_path / "workers.json"))
    done = parse(smg_parser, argv + ["--api-key", KEY])  # the launcher adds the key this way
    assert done.returncode == 0, done.stderr


# What the release's parser makes of the metrics listener's address (smg's RouterArgs field).
PROMETHEUS_HOST = ("import sys, json; from smg.launch_router import parse_router_args; "
                   "print(json.dumps(parse_router_args(json.loads(sys.argv[1])).prometheus_host))")


@pytest.mark.parametrize("metrics_host", ["127.0.0.1", "0.0.0.0"])
def test_the_metrics_listener_binds_where_the_scrapers_reach_it(smg_parser, tmp_path, metrics_host):
    # 0.0.0.0: common_metrics_scrapers names a scraper on another host (filter metrics_listen_address).
    argv = sglang_gateway_argv(gateway(metrics_host=metrics_host), settings(tmp_path / "workers.json"))
    done = smg_parser.run(PROMETHEUS_HOST, [json.dumps(argv)])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == metrics_host


@pytest.mark.parametrize("policy", ["cache_aware", "round_robin", "power_of_two", "least_load"])
def test_every_policy_the_role_offers_is_one_the_release_has(smg_parser, tmp_path, policy):
    done = parse(smg_parser, sglang_gateway_argv(gateway(), settings(tmp_path / "w.json", policy=policy)))
    assert done.returncode == 0, done.stderr


def test_the_parser_refuses_what_the_release_lacks(smg_parser, tmp_path):
    # sglang-router's name of the startup interval: not a flag of smg, so the oracle says so.
    done = parse(smg_parser, sglang_gateway_argv(gateway(), settings(
        tmp_path / "w.json", extra_args=["--worker-startup-check-interval-secs", "1"])))
    assert done.returncode == 2 and "unrecognized arguments" in done.stderr


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def status(url, key=None, body=None):
    headers = {"Authorization": "Bearer " + key} if key else {}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    request = urllib.request.Request(url, headers=headers, data=data)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except urllib.error.URLError:
        return 0  # not listening yet


class Worker(http.server.BaseHTTPRequestHandler):
    """A replica as smg sees one (the endpoints smg 1.13.0 calls when it registers a worker and
    forwards a chat), recording the Authorization header of every request it gets. With `key`
    set it refuses a request without that bearer as SGLang 0.5.23's --api-key middleware does
    (python/sglang/srt/utils/auth.py, decide_request_auth): paths starting with /health, /ready
    or /metrics stay open to its probes and Prometheus."""
    seen = []
    key = None

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Worker.seen.append((self.path, self.headers.get("Authorization")))
        if (Worker.key and not self.path.startswith(("/health", "/ready", "/metrics"))
                and self.headers.get("Authorization") != "Bearer " + Worker.key):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/metrics"):
            data = b"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 0\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path.startswith("/v1/chat/completions"):
            body = {"id": "c", "object": "chat.completion", "model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
        elif self.path.startswith("/v1/models"):
            body = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "test"}]}
        else:
            body = {"model_path": "m", "tokenizer_path": "m", "is_generation": True}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def worker():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Worker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Worker.seen = []
    Worker.key = None
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()


# Probes of doubles that answer at once: often, within the filter's rules.
QUICK_PROBES = {"health_check_interval": 1, "health_check_timeout": 1, "replica_health_check_timeout": None}


def launch(smg_python, tmp_path, workers, api_key=None, control_plane_key=None, probes=None):
    """The role's launcher as its unit runs it: the inference key from its file, the control-plane
    key on standard input (StandardInput=file:); `probes` the health-check settings (default
    QUICK_PROBES)."""
    (tmp_path / "workers.json").write_text(json.dumps({"version": 1, "workers": [{"url": url} for url in workers]}))
    environment = dict(os.environ)
    if api_key:
        (tmp_path / "api-key").write_text(api_key + "\n")
        environment["SMG_API_KEY_FILE"] = str(tmp_path / "api-key")
    (tmp_path / "control-plane-key").write_text((control_plane_key or "") + "\n")
    port, metrics = free_port(), free_port()
    argv = sglang_gateway_argv(gateway(port, metrics), settings(tmp_path / "workers.json", shutdown_grace=0,
                                                                **(QUICK_PROBES if probes is None else probes)))
    with open(tmp_path / "control-plane-key", "rb") as stdin, open(tmp_path / "log", "wb") as log:
        server = subprocess.Popen([smg_python, str(LAUNCHER)] + argv, env=environment, stdin=stdin,
                                  stdout=log, stderr=subprocess.STDOUT)
    return server, "http://127.0.0.1:%d" % port


def wait_until_routed(server, url):
    deadline = time.monotonic() + 60
    while status(url + "/readiness") != 200:
        assert server.poll() is None and time.monotonic() < deadline, "the gateway did not start or route"
        time.sleep(0.5)


def stop(server):
    server.terminate()
    server.wait(timeout=60)


CONTROL_KEY = "control-plane-test-key-0123456789"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def test_the_launcher_takes_the_keys_from_their_files_and_keeps_them_out_of_argv(smg_python, tmp_path, worker):
    server, url = launch(smg_python, tmp_path, [worker], api_key=KEY, control_plane_key=CONTROL_KEY)
    try:
        wait_until_routed(server, url)
        cmdline = pathlib.Path("/proc/%d/cmdline" % server.pid).read_bytes()
        assert KEY.encode() not in cmdline and CONTROL_KEY.encode() not in cmdline
        # Standard input was the key's file: the gateway keeps no descriptor of it.
        assert os.readlink("/proc/%d/fd/0" % server.pid) == os.devnull
        assert status(url + "/v1/chat/completions", KEY, CHAT) == 200
        assert status(url + "/v1/chat/completions", None, CHAT) == 401
        # The replicas get the inference key, never the control-plane key.
        assert ("/v1/chat/completions", "Bearer " + KEY) in Worker.seen
        assert all(seen != "Bearer " + CONTROL_KEY for _path, seen in Worker.seen)
    finally:
        stop(server)


@pytest.mark.parametrize("api_key", [KEY, None], ids=["inference-key", "no-inference-key"])
def test_only_the_control_plane_key_opens_the_control_plane(smg_python, tmp_path, worker, api_key):
    """issue 36: with --api-key alone, smg 1.13.0 let the inference key (or, without one, anyone)
    register a worker of its own and remove the real ones."""
    server, url = launch(smg_python, tmp_path, [worker], api_key=api_key, control_plane_key=CONTROL_KEY)
    try:
        wait_until_routed(server, url)
        intruder = {"url": "http://127.0.0.1:9"}
        for path, body in (("/workers", None), ("/workers", intruder), ("/flush_cache", {}), ("/get_loads", None)):
            assert status(url + path, None, body) == 401, path
            assert status(url + path, KEY, body) == 401, path
        assert status(url + "/workers", CONTROL_KEY) == 200
        assert status(url + "/v1/chat/completions", api_key, CHAT) == 200
    finally:
        stop(server)


def test_the_launcher_refuses_to_start_without_a_control_plane_key(smg_python, tmp_path):
    server, _url = launch(smg_python, tmp_path, [], api_key=KEY)
    assert server.wait(timeout=60) == 2
    assert "no control-plane key" in (tmp_path / "log").read_text()


# Reads smg 1.13.0 serves without any auth layer (model_gateway/src/server.rs, build_app:
# public_routes), by how each is answered:
# - forwarded to a replica with the client's own headers (routers/http/router.rs,
#   proxy_get_request): the replica's --api-key middleware refuses an anonymous one;
FORWARDED_READS = ("/get_server_info", "/get_model_info")
# - answered by smg itself or from a replica path SGLang never guards: /v1/models from smg's
#   registry (routers/router_manager.rs, get_models), /engine_metrics from smg's own scrape of
#   the replicas' /metrics (worker/manager.rs, get_engine_metrics), /health_generate forwarded
#   to the replicas' /health_generate, which SGLang leaves open (decide_request_auth); and the
#   probes. No flag of smg 1.13.0 guards them: the role bounds who reaches them by IPAddressAllow=.
ANONYMOUS_READS = ("/health", "/liveness", "/readiness", "/health_generate", "/engine_metrics", "/v1/models")


def test_with_an_inference_key_the_forwarded_reads_refuse_anonymous_clients(smg_python, tmp_path, worker):
    """issue 36: where sglang_service_api_key is set, a read the gateway forwards answers 401 to
    an anonymous client (the replica refuses the client's own header) and 200 with the key."""
    Worker.key = KEY
    server, url = launch(smg_python, tmp_path, [worker], api_key=KEY, control_plane_key=CONTROL_KEY)
    try:
        wait_until_routed(server, url)
        for path in FORWARDED_READS:
            assert status(url + path) == 401, path
            assert status(url + path, "not-" + KEY) == 401, path
            assert status(url + path, KEY) == 200, path
        assert status(url + "/v1/chat/completions", None, CHAT) == 401
    finally:
        stop(server)


def test_the_reads_smg_answers_to_anyone_are_exactly_the_documented_ones(smg_python, tmp_path, worker):
    """The residue the role documents (README, "What listens where") and bounds by the gateway
    unit's IPAddressAllow=: should a release of smg guard more, or fewer, routes, this says so."""
    Worker.key = KEY
    server, url = launch(smg_python, tmp_path, [worker], api_key=KEY, control_plane_key=CONTROL_KEY)
    try:
        wait_until_routed(server, url)
        assert {path: status(url + path) for path in ANONYMOUS_READS + FORWARDED_READS} == dict(
            [(path, 200) for path in ANONYMOUS_READS] + [(path, 401) for path in FORWARDED_READS])
    finally:
        stop(server)


# ---- health probes of loaded replicas (issue 38, item 3) ------------------------------------

DOUBLE = REPO / "tests" / "fixtures" / "sglang_double" / "python"
# The SGLang double's opt-in busy scheduler: under load its /health answers after this long, as
# SGLang's health_generate does when its 1-token generate waits behind the scheduler.
HEALTH_DELAY_UNDER_LOAD = 10
UNDER_LOAD_ANSWERED = "Health check under load answered"


def workers_seen(url):
    """{url: is_healthy} of the gateway's /workers (the control plane's key)."""
    request = urllib.request.Request(url + "/workers", headers={"Authorization": "Bearer " + CONTROL_KEY})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return {worker["url"]: worker["is_healthy"] for worker in json.load(answer)["workers"]}


@pytest.fixture
def loaded_replicas(tmp_path):
    """Two SGLang doubles as the role's units start them (SGLANG_HEALTH_CHECK_TIMEOUT from the
    role's default) whose /health takes HEALTH_DELAY_UNDER_LOAD seconds while they generate;
    `load()` starts back-to-back generations on each until the test ends. Yields (urls, logs, load)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                   "max_position_embeddings": 32768}))
    environment = dict(os.environ, PYTHONPATH=str(DOUBLE), SGLANG_DOUBLE_STARTUP_S="0.2",
                       SGLANG_DOUBLE_HEALTH_DELAY_UNDER_LOAD=str(HEALTH_DELAY_UNDER_LOAD),
                       SGLANG_HEALTH_CHECK_TIMEOUT=str(DEFAULTS["sglang_service_health_check_timeout"]))
    servers, urls, logs = [], [], []
    stopped = threading.Event()
    for index in range(2):
        port = free_port()
        logs.append(tmp_path / ("replica-%d.log" % index))
        with open(logs[-1], "wb") as log:
            servers.append(subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", str(model),
                                             "--port", str(port)], env=environment, stdout=log,
                                            stderr=subprocess.STDOUT))
        urls.append("http://127.0.0.1:%d" % port)

    def generate_until_stopped(url):
        # About 10 s each at the double's 20 ms a token.
        body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}).encode()
        while not stopped.is_set():
            request = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    answer.read()
            except OSError:
                time.sleep(0.1)  # the double is going away at the end of the test

    def load():
        for url in urls:
            threading.Thread(target=generate_until_stopped, args=(url,), daemon=True).start()

    try:
        deadline = time.monotonic() + 30
        for url in urls:
            while status(url + "/health") != 200:
                assert time.monotonic() < deadline, "the double did not start"
                time.sleep(0.2)
        yield urls, logs, load
    finally:
        stopped.set()
        for server in servers:
            server.terminate()
            server.wait(timeout=30)


def probes_answered(log):
    return log.read_text().count(UNDER_LOAD_ANSWERED)


def watch(smg_python, tmp_path, loaded_replicas, probes, until):
    """Starts the gateway with `probes` in front of the loaded replicas, then reads /workers once
    a second until `until(seconds, logs, readings)`; returns the readings as [(seconds, {url: is_healthy})]."""
    urls, logs, load = loaded_replicas
    server, url = launch(smg_python, tmp_path, urls, control_plane_key=CONTROL_KEY, probes=probes)
    readings = []
    try:
        wait_until_routed(server, url)
        load()
        started = time.monotonic()
        while not until(time.monotonic() - started, logs, readings):
            readings.append((round(time.monotonic() - started), workers_seen(url)))
            time.sleep(1)
    finally:
        stop(server)
    return readings


def test_the_rendered_probes_keep_every_loaded_replica(smg_python, tmp_path, loaded_replicas):
    """With the role's defaults (the gateway waits longer than SGLANG_HEALTH_CHECK_TIMEOUT and
    probes no more often than it waits), a replica whose /health takes 10 s under load stays in
    the gateway through two probes of each replica, which failed ones would have dropped it after
    (health_failure_threshold)."""
    threshold = DEFAULTS["sglang_service_gateway_health_failure_threshold"]
    window = (threshold + 1) * DEFAULTS["sglang_service_gateway_health_check_interval"] + 2 * HEALTH_DELAY_UNDER_LOAD
    readings = watch(smg_python, tmp_path, loaded_replicas, {},
                     lambda seconds, logs, _readings: seconds > window or min(map(probes_answered, logs)) >= threshold)
    urls = loaded_replicas[0]
    assert min(map(probes_answered, loaded_replicas[1])) >= threshold, "the gateway did not probe each replica twice"
    dropped = [(seconds, seen) for seconds, seen in readings if seen != {url: True for url in urls}]
    assert not dropped, dropped


def test_smgs_default_probe_timeout_drops_a_loaded_replica(smg_python, tmp_path, loaded_replicas):
    """What the role rendered before: smg's default 5 s probe timeout (no --health-check-timeout-secs)
    every 5 s. The same loaded replicas leave the gateway: the check above can fail."""
    everyone = {url: True for url in loaded_replicas[0]}
    readings = watch(smg_python, tmp_path, loaded_replicas,
                     {"health_check_interval": 5, "health_check_timeout": None, "replica_health_check_timeout": None},
                     lambda seconds, _logs, readings: seconds > 60 or any(seen != everyone for _s, seen in readings))
    assert any(seen != everyone for _seconds, seen in readings), readings

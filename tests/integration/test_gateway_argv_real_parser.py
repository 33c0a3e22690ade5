"""The gateway command line role sglang_service renders (filter sglang_gateway_argv with the
role's defaults and the lab's values), checked against the REAL parser of the smg release the
role pins (PyPI wheel, installed once into a cached virtual environment), and the role's
launcher run with that release: the API key from its file guards the gateway and is no word of
its command line. Every command line is parsed by one interpreter that imported smg's parser
once (tests/oracle/oracle.py, WarmInterpreter).

A failure to build the environment fails these tests: they never skip.
"""
import hashlib
import json
import os
import pathlib
import socket
import subprocess
import sys
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


def gateway(port=30000, metrics_port=29000):
    gpus = [{"uuid": "GPU-%d" % i, "pci_bus_id": "00000000:%02X:00.0" % (i + 1)} for i in range(4)]
    layout = {"tensor_parallel_size": 1, "gateway": "auto", "unit_name": "sglang-qwen", "host": "127.0.0.1",
              "port": port, "replica_port": DEFAULTS["sglang_service_replica_port"],
              "gateway_metrics_port": metrics_port, "enable_metrics": True}
    return sglang_replica_plan(gpus, layout, {"argv": []})["gateway"]


def settings(manifest, **override):
    found = {"discovery_file": str(manifest), "shutdown_grace": DEFAULTS["sglang_service_drain_timeout"],
             "extra_args": DEFAULTS["sglang_service_gateway_extra_args"]}
    for key in ("policy", "health_check_interval", "health_failure_threshold", "retries", "cb_failure_threshold",
                "cb_timeout", "request_timeout"):
        found[key] = DEFAULTS["sglang_service_gateway_" + key]
    found.update(override)
    return found


def parse(smg_parser, argv):
    return smg_parser.run(PARSE, [json.dumps(argv)])


def test_the_rendered_gateway_command_line_is_accepted_by_the_pinned_release(smg_parser, tmp_path):
    argv = sglang_gateway_argv(gateway(), settings(tmp_path / "workers.json"))
    done = parse(smg_parser, argv + ["--api-key", KEY])  # the launcher adds the key this way
    assert done.returncode == 0, done.stderr


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


def status(url, key=None):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except urllib.error.URLError:
        return 0  # not listening yet


def test_the_launcher_takes_the_key_from_its_file_and_keeps_it_out_of_argv(smg_python, tmp_path):
    (tmp_path / "api-key").write_text(KEY + "\n")
    (tmp_path / "workers.json").write_text(json.dumps({"version": 1, "workers": []}))
    port, metrics = free_port(), free_port()
    argv = sglang_gateway_argv(gateway(port, metrics), settings(tmp_path / "workers.json", shutdown_grace=0))
    server = subprocess.Popen([smg_python, str(LAUNCHER)] + argv, env=dict(os.environ, SMG_API_KEY_FILE=str(tmp_path / "api-key")),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while status("http://127.0.0.1:%d/health" % port) != 200:
            assert server.poll() is None and time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.5)
        assert status("http://127.0.0.1:%d/workers" % port) == 401
        assert status("http://127.0.0.1:%d/workers" % port, KEY) == 200
        cmdline = pathlib.Path("/proc/%d/cmdline" % server.pid).read_bytes()
        assert KEY.encode() not in cmdline
    finally:
        server.terminate()
        server.wait(timeout=60)

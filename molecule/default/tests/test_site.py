"""The whole site on one host: the unit runs the wanted DDTree flags from the build it pinned,
the server serves them, and the smoke gate passed with speculation on."""
import json

import pytest


@pytest.fixture(scope="module")
def sglang_fact(host):
    return json.loads(host.file("/etc/ansible/facts.d/sglang.fact").content_string)


def test_driver_and_toolkit_are_the_pinned_ones(host):
    assert host.package("nvidia-driver-pinning-590.48.01").is_installed
    assert "release 13.1" in host.check_output("/usr/local/cuda/bin/nvcc --version")


def test_unit_runs_the_wanted_speculative_flags(host, sglang_fact):
    unit = host.service("sglang-qwen")
    assert unit.is_running and unit.is_enabled
    argv = host.check_output("tr '\\0' ' ' </proc/$(systemctl show -p MainPID --value sglang-qwen)/cmdline").split()
    assert argv[0] == sglang_fact["python"]
    flags = dict(zip(argv, argv[1:]))
    assert flags["--speculative-algorithm"] == "DDTREE"
    assert flags["--speculative-num-draft-tokens"] == "16"
    assert flags["--speculative-ddtree-budget"] == "15"
    assert flags["--page-size"] == "1"
    assert flags["--host"] == "127.0.0.1"
    assert all(flag in sglang_fact["options"] for flag in argv if flag.startswith("--"))


def test_server_listens_on_loopback_and_reports_ddtree(host):
    assert host.socket("tcp://127.0.0.1:30000").is_listening
    assert not host.socket("tcp://0.0.0.0:30000").is_listening
    info = json.loads(host.check_output("curl -sf http://127.0.0.1:30000/server_info"))
    assert info["speculative_algorithm"] == "DDTREE"
    assert info["speculative_num_draft_tokens"] == 16


def test_smoke_gate_passed_with_speculation(host):
    result = json.loads(host.file("/var/lib/pro6000/smoke/bench.json").content_string)
    assert result["passed"] is True
    gates = dict((gate["name"], gate) for gate in result["gates"])
    assert gates["acceptance_length"]["passed"] and gates["acceptance_length"]["value"] >= 8
    assert gates["decode_tps_c1"]["passed"] and gates["decode_tps_c1"]["floor"] == 250

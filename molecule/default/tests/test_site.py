"""The whole site on one host with four simulated GPUs: one replica per GPU runs the wanted DDTree
flags from the build it pinned, behind the gateway on the host's port, and the smoke gate passed
over every replica and the gateway with speculation on."""
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "shared" / "verify"))
from gateway_api import assert_only_the_control_plane_key_opens_the_workers, control_plane_key  # noqa: E402


@pytest.fixture(scope="module")
def sglang_fact(host):
    return json.loads(host.file("/etc/ansible/facts.d/sglang.fact").content_string)


def test_driver_and_toolkit_are_the_pinned_ones(host):
    # The role's default: R620, the long-term branch (ubuntu2404 has its exact pinning package).
    assert host.package("nvidia-driver-pinning-620.70.10").is_installed
    assert "release 13.1" in host.check_output("/usr/local/cuda/bin/nvcc --version")


REPLICAS = ["sglang-qwen-%d" % index for index in range(4)]


@pytest.mark.parametrize("index", range(4))
def test_each_replica_runs_the_wanted_flags_on_its_own_gpu(host, sglang_fact, index):
    name = REPLICAS[index]
    unit = host.service(name)
    assert unit.is_running and unit.is_enabled
    argv = host.check_output("tr '\\0' ' ' </proc/$(systemctl show -p MainPID --value %s)/cmdline", name).split()
    assert argv[0] == sglang_fact["python"]
    flags = dict(zip(argv, argv[1:]))
    assert flags["--speculative-algorithm"] == "DDTREE"
    assert flags["--speculative-num-draft-tokens"] == "16"
    assert flags["--speculative-ddtree-budget"] == "15"
    assert flags["--page-size"] == "1"
    assert (flags["--host"], flags["--port"]) == ("127.0.0.1", str(30001 + index))
    assert all(flag in sglang_fact["options"] for flag in argv if flag.startswith("--"))
    environment = host.check_output("systemctl show -p Environment --value %s", name).split()
    # The lab rebooted into the loaded driver (through the double): each replica owns the GPU at
    # its PCI position, by UUID, as nvidia-smi lists them.
    uuids = [line.split(", ")[1] for line in sorted(
        host.check_output("nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader").splitlines())]
    assert "CUDA_VISIBLE_DEVICES=%s" % uuids[index] in environment and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in environment


def test_the_gateway_answers_on_the_host_port_and_routes_to_every_replica(host):
    assert host.service("sglang-qwen-gateway").is_running
    assert host.socket("tcp://127.0.0.1:30000").is_listening
    assert not host.socket("tcp://0.0.0.0:30000").is_listening
    workers = json.loads(host.check_output("curl -sf -H 'Authorization: Bearer %s' http://127.0.0.1:30000/workers",
                                           control_plane_key(host)))["workers"]
    assert sorted((w["url"], w["is_healthy"]) for w in workers) == [
        ("http://127.0.0.1:%d" % (30001 + index), True) for index in range(4)]
    info = json.loads(host.check_output("curl -sf http://127.0.0.1:30000/get_server_info"))
    assert info["speculative_algorithm"] == "DDTREE" and info["speculative_num_draft_tokens"] == 16


# issue 36: the inference key (or no key) registered a worker of its own at the gateway.
def test_only_the_control_plane_key_opens_the_gateways_workers(host):
    assert_only_the_control_plane_key_opens_the_workers(host)


def test_requests_through_the_gateway_reached_every_replica(host):
    # Each double's own counter, not the client's view.
    for index in range(4):
        metrics = host.check_output("curl -sf http://127.0.0.1:%s/metrics", str(30001 + index))
        assert sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("sglang:num_requests_total")) > 0


def test_smoke_gate_passed_with_speculation(host):
    result = json.loads(host.file("/var/lib/pro6000/smoke/bench.json").content_string)
    assert result["passed"] is True
    gates = dict((gate["name"], gate) for gate in result["gates"])
    assert gates["acceptance_length"]["passed"] and gates["acceptance_length"]["value"] >= 8
    assert gates["decode_tps_c1"]["passed"] and gates["decode_tps_c1"]["floor"] == 250

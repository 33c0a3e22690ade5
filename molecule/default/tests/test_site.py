"""The whole site on one host with four simulated GPUs: one replica per GPU runs the wanted DDTree
flags from the build it pinned, behind the gateway on the host's port, and the smoke gate passed
over every replica and the gateway with speculation on."""
import json

import pytest


@pytest.fixture(scope="module")
def sglang_fact(host):
    return json.loads(host.file("/etc/ansible/facts.d/sglang.fact").content_string)


def test_driver_and_toolkit_are_the_pinned_ones(host):
    assert host.package("nvidia-driver-pinning-590.48.01").is_installed
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


CONTROL_PLANE_KEY_FILE = "/etc/sglang-qwen-gateway/control-plane-key"
# The lab serves without an inference key: the gateway forwards whatever key a client sends.
INFERENCE_KEY = "an-inference-client-key"


def control_plane_key(host):
    """Read as root, as the role and the smoke gate read it."""
    return host.file(CONTROL_PLANE_KEY_FILE).content_string.strip()


def status(host, url, key=None, body=None):
    """The HTTP status curl gets; -H and -d only where given."""
    command = "curl -s -o /dev/null -w '%%{http_code}' %s" % url
    if key:
        command += " -H 'Authorization: Bearer %s'" % key
    if body is not None:
        command += " -H 'Content-Type: application/json' -d '%s'" % json.dumps(body)
    return host.check_output(command)


# issue 36: the inference key (or no key) registered a worker of its own at the gateway.
def test_only_the_control_plane_key_opens_the_gateways_workers(host):
    gateway = "http://127.0.0.1:30000"
    assert status(host, gateway + "/workers", None, {"url": "http://127.0.0.1:9"}) == "401"
    assert status(host, gateway + "/workers", INFERENCE_KEY, {"url": "http://127.0.0.1:9"}) == "401"
    assert status(host, gateway + "/flush_cache", INFERENCE_KEY, {}) == "401"
    assert status(host, gateway + "/workers", control_plane_key(host)) == "200"
    # smg routes by model: the id it lists.
    chat = {"model": json.loads(host.check_output("curl -sf %s/v1/models", gateway))["data"][0]["id"], "max_tokens": 4,
            "messages": [{"role": "user", "content": "hello"}]}
    assert status(host, gateway + "/v1/chat/completions", INFERENCE_KEY, chat) == "200"


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

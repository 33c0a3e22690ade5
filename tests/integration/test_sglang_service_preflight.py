"""Role sglang_service refuses unit and argument inputs before anything changes, naming the
variable and why (issue 36, finding 4): the whole role, run by real ansible-playbook on localhost
in check mode, stops at its first check ("Check the variables", on the controller, before the
command line is rendered or the host is read for drift); one playbook run for every case.
The host: SGLang 0.5.23's real parser fact (tests/fixtures/sglang_parser) as ansible_local.sglang,
and a sysfs tree with four NVIDIA PCI devices that module nvidia_gpu_facts reads (positions 0-3,
as before a driver is loaded)."""
import json
import pathlib

import pytest
from support import run_cases

REPO = pathlib.Path(__file__).resolve().parents[2]
FIRST_CHECK = "Check the variables"

# (case, role variables, None when accepted, else what the failure message must contain)
CASES = [
    ("accepted", {}, None),
    ("newline in extra_args", {"sglang_service_extra_args": ["--log-level", "info\nExecStartPre=/bin/sh -c id"]},
     'sglang_service_extra_args = ["--log-level", "info\\nExecStartPre=/bin/sh -c id"]: must not hold a newline'),
    ("newline in the gateway's extra_args", {"sglang_service_gateway_extra_args": ["--log-level", "a\nb"]},
     "sglang_service_gateway_extra_args = "),
    ("newline in the model path", {"sglang_service_model_path": "/srv/models/a\nUser=root"},
     'sglang_service_model_path = "/srv/models/a\\nUser=root": must not hold a newline'),
    ("newline in the host", {"sglang_service_host": "127.0.0.1\nIPAddressAllow=any"},
     "sglang_service_host = \"127.0.0.1\\nIPAddressAllow=any\": must not hold a newline"),
    ("replica port past 65535", {"sglang_service_replica_port": 65536},
     "sglang_service_replica_port = 65536: must be a TCP port, 1 to 65535"),
    ("last replica past 65535", {"sglang_service_replica_port": 65534},
     "sglang_service_replica_port + the last GPU's position = 65537: must be a TCP port"),
    ("negative port", {"sglang_service_port": -1}, "sglang_service_port = -1: must be a TCP port"),
    ("GPU -1", {"sglang_service_gpus": [-1]}, "sglang_service_gpus = [-1]: every entry must be"),
    ("GPU true", {"sglang_service_gpus": [True]}, "sglang_service_gpus = [true]: every entry must be"),
    ("tensor parallel 0", {"sglang_service_tensor_parallel_size": 0},
     "sglang_service_tensor_parallel_size = 0: must be an integer of at least 1"),
    ("unit name climbing", {"sglang_service_unit_name": "../../etc/x", "sglang_service_config_dir": "/etc/sglang-x"},
     'sglang_service_unit_name = "../../etc/x": must be a plain systemd unit name'),
    # issue 36: the gateway answers /health_generate, /engine_metrics and /v1/models without a key
    # (smg 1.13.0 guards no public route): off loopback, its allow-list must name the clients.
    ("public host, allow-list naming the clients",
     {"sglang_service_host": "0.0.0.0", "sglang_service_api_key": "k" * 32, "sglang_service_ip_address_allow": ["10.1.2.0/24"]},
     None),
    ("public host, allow-list of everyone", {"sglang_service_host": "0.0.0.0", "sglang_service_api_key": "k" * 32,
                                             "sglang_service_ip_address_allow": ["10.1.2.0/24", "any"]},
     'sglang_service_ip_address_allow = ["10.1.2.0/24", "any"]: must name the clients'),
    ("public host, allow-list of every IPv6 address", {"sglang_service_host": "::", "sglang_service_api_key": "k" * 32,
                                                       "sglang_service_ip_address_allow": ["::/0"]},
     'sglang_service_ip_address_allow = ["::/0"]: must name the clients'),
    ("public host, allow-list of loopback alone", {"sglang_service_host": "0.0.0.0", "sglang_service_api_key": "k" * 32},
     'sglang_service_ip_address_allow = ["localhost"]: must name the clients'),
    # issue 37: a scraper on another host (common_metrics_scrapers) takes the replicas off
    # loopback, where SGLang's /metrics answers without a key and its API only with one.
    ("scraper on another host, with a key", {"common_metrics_scrapers": ["10.0.0.5"], "sglang_service_api_key": "k" * 32},
     None),
    ("scraper on another host, without a key", {"common_metrics_scrapers": ["127.0.0.1", "10.0.0.5"]},
     'sglang_service_api_key = "": must be set: common_metrics_scrapers 127.0.0.1, 10.0.0.5 names a scraper beyond'
     ' loopback, so every replica binds 0.0.0.0'),
    ("scraper on another host, replicas without metrics",
     {"common_metrics_scrapers": ["10.0.0.5"], "sglang_service_enable_metrics": False}, None),
    ("scrapers of everyone", {"common_metrics_scrapers": ["0.0.0.0/0"], "sglang_service_api_key": "k" * 32},
     'common_metrics_scrapers = ["0.0.0.0/0"]: must name the monitoring hosts'),
    ("scraper by name", {"common_metrics_scrapers": ["monitoring.example"], "sglang_service_api_key": "k" * 32},
     "'monitoring.example' (common_metrics_scrapers) are neither IP addresses nor networks"),
    # The role's earlier rules moved with the check from module host_state to the controller.
    ("negative context length", {"sglang_service_context_length": -1},
     "sglang_service_context_length = -1: must be 0 (the model's own) or a positive number of tokens"),
]

# The role's defaults of the variables the cases set.
DEFAULTS = {
    "sglang_service_extra_args": [], "sglang_service_gateway_extra_args": [],
    "sglang_service_model_path": "/srv/models/Qwen3.6-27B", "sglang_service_host": "127.0.0.1",
    "sglang_service_port": 30000, "sglang_service_replica_port": 30001, "sglang_service_gpus": [],
    "sglang_service_tensor_parallel_size": 1, "sglang_service_unit_name": "sglang-qwen",
    "sglang_service_config_dir": "/etc/sglang-qwen", "sglang_service_context_length": 0, "sglang_service_api_key": "",
    "sglang_service_ip_address_allow": ["localhost"], "sglang_service_enable_metrics": True,
    "common_metrics_scrapers": ["127.0.0.1"],
}


def _host(root):
    """Four NVIDIA GPUs on the PCI bus (vendor 0x10de, class 0x0302), no driver loaded."""
    for position in range(4):
        device = root / "sys" / "bus" / "pci" / "devices" / ("0000:0%d:00.0" % (position + 1))
        device.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x2bb5"), ("class", "0x030200")):
            (device / name).write_text(value + "\n")
    (root / "proc").mkdir()
    fact = json.loads((REPO / "tests" / "fixtures" / "sglang_parser" / "sglang-0.5.23.json").read_text())
    fact.update({"python": "/opt/sglang/current/bin/python", "source": "pypi"})
    (root / "facts.d").mkdir()
    (root / "facts.d" / "sglang.fact").write_text(json.dumps(fact))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-service-preflight")
    _host(root)
    play_vars = {"sglang_service_speculative_algorithm": "dflash", "sglang_service_model_path": "/srv/models/Qwen3.6-27B",
                 "sglang_service_draft_model_path": "/srv/models/Qwen3.6-27B-DFlash",
                 "sglang_service_gpu_proc_path": str(root / "proc"), "sglang_service_gpu_sys_path": str(root / "sys")}
    return run_cases(root, [(name, "sglang_service", variables) for name, variables, _expected in CASES], DEFAULTS,
                     play_vars=play_vars, fact_path=root / "facts.d")


@pytest.mark.parametrize("name, expected", [(name, expected) for name, _vars, expected in CASES])
def test_the_first_check_accepts_or_names_the_variable_and_why(outcomes, name, expected):
    if expected is None:
        assert outcomes[name] is None
    else:
        assert outcomes[name] is not None, "accepted"
        assert outcomes[name]["task"] == FIRST_CHECK and expected in outcomes[name]["msg"], outcomes[name]

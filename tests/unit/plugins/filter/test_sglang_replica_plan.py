"""sglang_replica_plan: GPUs in PCI order into replicas, the gateway, the record, the migration
from one unit; and sglang_gateway_argv's own checks (its flags meet smg's real parser in
tests/integration/test_gateway_argv_real_parser.py)."""
import pathlib
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.sglang_gateway_argv import sglang_gateway_argv
from ansible_collections.pro6000.inference.plugins.filter.sglang_replica_plan import (
    FilterModule,
    sglang_replica_plan,
)

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "sglang_service"
# nvidia-smi lists GPUs in its own order; the plan must sort them by PCI bus id.
BUSES = ["00000000:C1:00.0", "00000000:01:00.0", "00000000:81:00.0", "00000000:41:00.0"]
GPUS = [{"index": i, "uuid": "GPU-%d" % i, "pci_bus_id": bus} for i, bus in enumerate(BUSES)]
PCI_ORDER = ["GPU-1", "GPU-3", "GPU-2", "GPU-0"]
SERVES = {"argv": ["--model-path", "/m", "--enable-metrics"], "algorithm": "ddtree", "wanted_algorithm": "ddtree",
          "fallback": False, "draft_length": 16, "ddtree_budget": 15, "model_path": "/m",
          "served_model_name": None, "draft_model_path": "/d"}
LAYOUT = {"tensor_parallel_size": 1, "gpus": [], "replicas": 0, "gateway": "auto", "unit_name": "sglang-qwen",
          "host": "0.0.0.0", "port": 30000, "replica_port": 30001, "gateway_metrics_port": 29000,
          "gateway_control_plane_key_file": "/etc/sglang-qwen-gateway/control-plane-key", "enable_metrics": True}


def plan(devices=GPUS, previous=None, **layout):
    return sglang_replica_plan(devices, dict(LAYOUT, **layout), SERVES, previous)


def test_one_replica_per_gpu_in_pci_order_behind_the_gateway():
    result = plan()
    assert [r["gpus"] for r in result["replicas"]] == [[uuid] for uuid in PCI_ORDER]
    assert [r["name"] for r in result["replicas"]] == ["sglang-qwen-%d" % i for i in range(4)]
    assert [r["port"] for r in result["replicas"]] == [30001, 30002, 30003, 30004]
    assert all(r["host"] == "127.0.0.1" for r in result["replicas"])
    assert result["replicas"][2]["argv"] == SERVES["argv"] + ["--host", "127.0.0.1", "--port", "30003"]
    assert result["gateway"] == {"unit": "sglang-qwen-gateway.service", "host": "0.0.0.0", "port": 30000,
                                 "url": "http://127.0.0.1:30000", "metrics_port": 29000, "metrics_host": "127.0.0.1",
                                 "metrics_url": "http://127.0.0.1:29000/metrics", "policy": "cache_aware",
                                 "control_plane_key_file": "/etc/sglang-qwen-gateway/control-plane-key"}
    record = result["record"]
    assert record["url"] == "http://127.0.0.1:30000" and record["unit"] == "sglang-qwen-gateway.service"
    # Where the smoke gate reads the key of the gateway's /workers (root's alone).
    assert record["gateway"] == {"url": "http://127.0.0.1:30000", "unit": "sglang-qwen-gateway.service",
                                 "metrics_url": "http://127.0.0.1:29000/metrics", "policy": "cache_aware",
                                 "control_plane_key_file": "/etc/sglang-qwen-gateway/control-plane-key"}
    assert record["replicas"][0] == {"name": "sglang-qwen-0", "unit": "sglang-qwen-0.service", "port": 30001,
                                     "url": "http://127.0.0.1:30001", "gpus": ["GPU-1"],
                                     "metrics_url": "http://127.0.0.1:30001/metrics"}
    assert record["draft_length"] == 16 and record["ddtree_budget"] == 15 and record["algorithm"] == "ddtree"
    assert result["retire"] == [] and result["note"] is None


def test_tensor_parallel_two_gives_two_replicas_of_consecutive_pci_gpus():
    result = plan(tensor_parallel_size=2)
    assert [r["gpus"] for r in result["replicas"]] == [PCI_ORDER[:2], PCI_ORDER[2:]]
    # Named and numbered after the PCI position of their first GPU: stable when others change.
    assert [r["name"] for r in result["replicas"]] == ["sglang-qwen-0", "sglang-qwen-2"]
    assert [r["port"] for r in result["replicas"]] == [30001, 30003]


def test_one_gpu_keeps_todays_single_unit_without_gateway():
    result = plan(devices=GPUS[:1], host="127.0.0.1")
    assert result["gateway"] is None and result["record"]["gateway"] is None
    (replica,) = result["replicas"]
    assert (replica["name"], replica["port"], replica["host"], replica["gpus"]) == (
        "sglang-qwen", 30000, "127.0.0.1", ["GPU-0"])
    assert result["record"]["url"] == "http://127.0.0.1:30000" and result["record"]["unit"] == "sglang-qwen.service"


def test_a_scraper_on_another_host_takes_the_metrics_listeners_off_loopback():
    # metrics_host is filter metrics_listen_address over common_metrics_scrapers: 0.0.0.0 when a
    # scraper is on another host. The replicas serve /metrics on their API port, so they bind it
    # too; the URLs recorded for the host itself (and the gateway's manifest) stay on loopback.
    result = plan(metrics_host="0.0.0.0")
    assert [r["host"] for r in result["replicas"]] == ["0.0.0.0"] * 4
    assert result["replicas"][0]["argv"][-4:] == ["--host", "0.0.0.0", "--port", "30001"]
    assert result["replicas"][0]["worker"] == {"url": "http://127.0.0.1:30001"}
    assert result["gateway"]["metrics_host"] == "0.0.0.0"
    assert result["record"] == plan()["record"]
    # Without metrics a replica has nothing to be scraped for: it stays on loopback.
    assert {r["host"] for r in plan(metrics_host="0.0.0.0", enable_metrics=False)["replicas"]} == {"127.0.0.1"}


@pytest.mark.parametrize("host, bound", [("127.0.0.1", "0.0.0.0"), ("localhost", "0.0.0.0"), ("::1", "0.0.0.0"),
                                         ("10.0.0.11", "10.0.0.11"), ("0.0.0.0", "0.0.0.0")])
def test_the_only_replica_leaves_loopback_for_a_remote_scraper_and_keeps_an_address_beyond_it(host, bound):
    (replica,) = plan(devices=GPUS[:1], host=host, metrics_host="0.0.0.0")["replicas"]
    assert replica["host"] == bound and replica["argv"][-4:-2] == ["--host", bound]
    (loopback,) = plan(devices=GPUS[:1], host=host)["replicas"]
    assert loopback["host"] == host


def test_no_gpu_seen_is_one_replica_without_devices():
    (replica,) = plan(devices=[])["replicas"]
    assert replica["gpus"] == [] and replica["name"] == "sglang-qwen"


def test_gpus_seen_only_on_the_pci_bus_are_named_by_position():
    # nvidia_gpu_facts before the new driver is loaded: nvidia-smi cannot answer, the bus can.
    facts = {"gpus": [], "pci_devices": [{"address": "0000:81:00.0"}, {"address": "0000:01:00.0"}]}
    result = sglang_replica_plan(facts, LAYOUT, SERVES)
    assert [r["gpus"] for r in result["replicas"]] == [["0"], ["1"]]
    assert sglang_replica_plan({"gpus": GPUS, "pci_devices": []}, LAYOUT, SERVES)["replicas"][0]["gpus"] == ["GPU-1"]


def test_the_record_names_the_gateway_policy_the_smoke_gate_reads():
    assert plan(gateway_policy="round_robin")["record"]["gateway"]["policy"] == "round_robin"


def test_gateway_always_puts_even_one_replica_behind_it():
    result = plan(devices=GPUS[:1], gateway="always")
    assert result["gateway"]["port"] == 30000 and result["replicas"][0]["port"] == 30001


def test_picked_gpus_by_position_or_uuid_and_a_cap():
    assert [r["gpus"] for r in plan(gpus=[3, "GPU-1"])["replicas"]] == [["GPU-1"], ["GPU-0"]]
    capped = plan(replicas=2)
    assert [r["gpus"] for r in capped["replicas"]] == [["GPU-1"], ["GPU-3"]]
    assert "GPU-2, GPU-0 stay idle" in capped["note"]
    assert "GPU-0 stay idle" in plan(tensor_parallel_size=3)["note"]


@pytest.mark.parametrize("layout, message", [
    ({"gpus": [4]}, "GPU 4 is not present: the host has 4 GPU(s)"),
    ({"gpus": ["GPU-9"]}, "neither a PCI position nor the UUID"),
    ({"gpus": [0, "GPU-1"]}, "named twice"),
    ({"tensor_parallel_size": 8}, "tensor_parallel_size 8 exceeds the 4 GPU(s) selected"),
    ({"gateway": "never"}, "4 replicas need the gateway"),
    ({"gateway": "sometimes"}, "gateway must be one of auto, always, never"),
    ({"replica_port": 29999}, "must all differ"),
    ({"replicas": -1}, "replicas must not be negative"),
])
def test_bad_layouts_are_refused_with_the_reason(layout, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        plan(**layout)


def test_a_host_running_the_single_unit_retires_it_after_the_replicas_on_other_gpus():
    previous = {"url": "http://127.0.0.1:30000", "unit": "sglang-qwen.service", "algorithm": "ddtree"}
    result = plan(previous=previous)
    assert result["retire"] == ["sglang-qwen"]
    # The old unit held SGLang's default device (the first GPU) and the public port.
    assert [r["after_retire"] for r in result["replicas"]] == [True, False, False, False]


def test_a_rerun_retires_nothing_and_a_smaller_layout_retires_the_rest():
    first = plan()
    assert plan(previous=first["record"])["retire"] == []
    back = plan(devices=GPUS[:1], host="127.0.0.1", previous=first["record"])
    assert back["retire"] == ["sglang-qwen-0", "sglang-qwen-1", "sglang-qwen-2", "sglang-qwen-3",
                              "sglang-qwen-gateway"]
    assert back["replicas"][0]["after_retire"]  # GPU-0 (PCI position 3) and port 30000 were in use


def test_the_filter_is_registered():
    assert FilterModule().filters()["sglang_replica_plan"] is sglang_replica_plan


SETTINGS = {"discovery_file": "/etc/sglang-qwen/gateway/workers.json", "policy": "cache_aware",
            "health_check_interval": 30, "health_check_timeout": 30, "replica_health_check_timeout": 20,
            "health_failure_threshold": 2, "retries": 3, "cb_failure_threshold": 5,
            "cb_timeout": 30, "request_timeout": 3600, "shutdown_grace": 600, "extra_args": []}


def test_gateway_argv_names_the_manifest_metrics_and_timeouts():
    argv = sglang_gateway_argv(plan()["gateway"], SETTINGS)
    flags = dict(zip(argv, argv[1:]))
    assert flags["--host"] == "0.0.0.0" and flags["--port"] == "30000"
    assert flags["--discovery-file"] == SETTINGS["discovery_file"] and flags["--prometheus-port"] == "29000"
    assert flags["--request-timeout-secs"] == "3600" and flags["--retry-max-retries"] == "3"
    assert not any("api-key" in word for word in argv)
    assert flags["--prometheus-host"] == "127.0.0.1"
    # A scraper on another host: the metrics listener binds every address (its unit admits them).
    remote = sglang_gateway_argv(plan(metrics_host="0.0.0.0")["gateway"], SETTINGS)
    assert remote[remote.index("--prometheus-host") + 1] == "0.0.0.0" and remote.count("--prometheus-host") == 1


def test_gateway_probes_wait_longer_than_sglangs_health_check_and_never_overlap():
    argv = sglang_gateway_argv(plan()["gateway"], SETTINGS)
    flags = dict(zip(argv, argv[1:]))
    assert flags["--health-check-timeout-secs"] == "30" and flags["--health-check-interval-secs"] == "30"
    assert flags["--health-check-endpoint"] == "/health"
    # The role hands its variables to the filter, and its defaults obey the same rules (the
    # integration test runs them against real smg); the replicas' units carry the variable.
    settings = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__sglang_service_gateway_settings"]
    assert settings["health_check_timeout"] == "{{ sglang_service_gateway_health_check_timeout }}"
    assert settings["replica_health_check_timeout"] == "{{ sglang_service_health_check_timeout }}"
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert (defaults["sglang_service_gateway_health_check_interval"]
            >= defaults["sglang_service_gateway_health_check_timeout"]
            > defaults["sglang_service_health_check_timeout"])
    assert ("Environment=SGLANG_HEALTH_CHECK_TIMEOUT={{ sglang_service_health_check_timeout | int }}\n"
            in (ROLE / "templates" / "sglang.service.j2").read_text())


@pytest.mark.parametrize("change, message", [
    ({"extra_args": ["--api-key", "k"]}, "must not set --api-key"),
    ({"extra_args": ["--port=1"]}, "must not set --port=1"),
    ({"extra_args": ["--prometheus-host", "0.0.0.0"]}, "must not set --prometheus-host"),
    ({"retries": 0}, "retries must be at least 1"),
    ({"request_timeout": "long"}, "request_timeout must be an integer"),
    ({"discovery_file": ""}, "need discovery_file"),
    # SGLang's /health may take SGLANG_HEALTH_CHECK_TIMEOUT: a probe giving up first drops a busy replica.
    ({"health_check_timeout": 20}, "health_check_timeout (20 s) must exceed the replicas' SGLANG_HEALTH_CHECK_TIMEOUT (20 s)"),
    ({"health_check_timeout": None}, "health_check_timeout (5 s) must exceed"),  # smg's default
    ({"health_check_interval": 29}, "health_check_interval (29 s) must be at least health_check_timeout (30 s)"),
    ({"health_check_timeout": "slow"}, "health_check_timeout must be an integer"),
    ({"replica_health_check_timeout": 0}, "replica_health_check_timeout must be at least 1"),
])
def test_gateway_settings_that_cannot_work_are_refused(change, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        sglang_gateway_argv(plan()["gateway"], dict(SETTINGS, **change))

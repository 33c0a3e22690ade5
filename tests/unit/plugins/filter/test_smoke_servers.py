"""smoke_servers: the probe's server list from the record that sglang_replica_plan writes (each
replica in PCI order, then the host), in the shape module sglang_probe documents for servers."""
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.sglang_replica_plan import sglang_replica_plan
from ansible_collections.pro6000.inference.plugins.filter.smoke_servers import FilterModule, smoke_servers
from ansible_collections.pro6000.inference.plugins.modules import sglang_probe

GPUS = [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:81:00.0"},
        {"index": 1, "uuid": "GPU-b", "pci_bus_id": "00000000:01:00.0"}]
LAYOUT = {"tensor_parallel_size": 1, "gpus": [], "replicas": 0, "gateway": "auto", "unit_name": "sglang-qwen",
          "host": "0.0.0.0", "port": 30000, "replica_port": 30001, "gateway_metrics_port": 29000}
SERVES = {"argv": ["--model-path", "/m"], "algorithm": "dflash", "model_path": "/m"}


def record():
    return sglang_replica_plan(GPUS, LAYOUT, SERVES, None)["record"]


def test_each_recorded_replica_then_the_gateway():
    served = record()
    servers = smoke_servers(served["replicas"], {"url": served["url"], "unit": served["unit"], "model": "ignored"})
    assert servers == [
        # GPU-b sits first on the PCI bus: it is replica 0, on the first loopback port.
        {"name": "sglang-qwen-0", "url": "http://127.0.0.1:30001", "unit": "sglang-qwen-0.service"},
        {"name": "sglang-qwen-1", "url": "http://127.0.0.1:30002", "unit": "sglang-qwen-1.service"},
        {"name": "host", "url": "http://127.0.0.1:30000", "unit": "sglang-qwen-gateway.service"},
    ]


def test_each_entry_has_only_the_keys_the_probe_documents():
    documented = set(yaml.safe_load(sglang_probe.DOCUMENTATION)["options"]["servers"]["suboptions"])
    served = record()
    for server in smoke_servers(served["replicas"], {"url": served["url"], "unit": served["unit"]}):
        assert set(server) <= documented


def test_without_replicas_only_the_host_and_no_unit_when_none_is_known():
    assert smoke_servers([], {"url": "https://inference.example:8443", "unit": ""}) == [
        {"name": "host", "url": "https://inference.example:8443", "unit": None}]


def test_a_replica_without_its_unit_is_refused_by_name():
    with pytest.raises(AnsibleFilterError, match="lacks unit"):
        smoke_servers([{"name": "r0", "url": "http://127.0.0.1:30001"}], {"url": "http://127.0.0.1:30000"})


def test_the_filter_is_registered():
    assert FilterModule().filters()["smoke_servers"] is smoke_servers

"""Unit and argument inputs (issue 36, finding 4): what the roles' rules refuse (filter
input_rules, tests/unit/plugins/filter/test_input_rules.py), the renderers refuse too when called
without the roles' first check (filters sglang_speculative_plan, sglang_replica_plan,
sglang_gateway_argv)."""
import json
import pathlib
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.sglang_gateway_argv import sglang_gateway_argv
from ansible_collections.pro6000.inference.plugins.filter.sglang_replica_plan import sglang_replica_plan
from ansible_collections.pro6000.inference.plugins.filter.sglang_speculative_plan import sglang_speculative_plan

TESTS = pathlib.Path(__file__).resolve().parents[3]
FACT = json.loads((TESTS / "fixtures" / "sglang_parser" / "sglang-0.5.23.json").read_text())
BUSES = ["00000000:01:00.0", "00000000:41:00.0", "00000000:81:00.0", "00000000:C1:00.0"]
GPUS = [{"uuid": "GPU-%d" % i, "pci_bus_id": bus} for i, bus in enumerate(BUSES)]
LAYOUT = {"tensor_parallel_size": 1, "gpus": [], "replicas": 0, "gateway": "auto", "unit_name": "sglang-qwen",
          "host": "0.0.0.0", "port": 30000, "replica_port": 30001, "gateway_metrics_port": 29000,
          "enable_metrics": True}
SERVES = {"argv": ["--model-path", "/m"], "algorithm": "none"}
WANTED = {"model_path": "/srv/models/Qwen3.6-27B", "algorithm": "none", "attention_backend": "triton"}
SETTINGS = {"discovery_file": "/etc/sglang-qwen-gateway/workers.json"}


@pytest.mark.parametrize("overrides, message", [
    ({"extra_args": ["--log-level", "info\nExecStartPre=/bin/id"]}, "'info\\nExecStartPre=/bin/id': a command line word"),
    ({"model_path": "/srv/models/a\nUser=root", "served_model_name": "qwen"},
     "'/srv/models/a\\nUser=root': a command line word"),
    # The served name, one word (or the path's last part it defaults to), is refused before the line.
    ({"served_model_name": "q\rx"}, "the served model name 'q\\rx' is empty or holds whitespace or a control"),
    ({"model_path": "/srv/models/a\nUser=root"}, "the served model name 'a\\nUser=root' is empty or holds"),
    ({"host": "127.0.0.1\nIPAddressAllow=any"}, "'127.0.0.1\\nIPAddressAllow=any': a command line word"),
])
def test_the_server_command_line_refuses_a_word_of_more_than_one_line(overrides, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        sglang_speculative_plan(dict(WANTED, **overrides), FACT)


@pytest.mark.parametrize("layout, message", [
    # 65534 + the PCI position of the third GPU (2): 65536.
    ({"replica_port": 65534}, "replica_port + 2 (the PCI position of GPU GPU-2) is 65536, past 65535"),
    ({"gpus": [-1]}, "GPU -1 is neither a PCI position"),
    ({"gpus": [True]}, "GPU True is neither a PCI position"),
    ({"gpus": ["-1"]}, "GPU '-1' is neither a PCI position"),
    ({"tensor_parallel_size": 0}, "tensor_parallel_size must be at least 1, got 0"),
    ({"tensor_parallel_size": True}, "tensor_parallel_size must be an integer, got True"),
    ({"unit_name": "../../etc/x"}, "unit_name '../../etc/x' is not a plain systemd unit name"),
    ({"gateway_unit_name": "../x"}, "gateway_unit_name '../x' is not a plain systemd unit name"),
    ({"gateway": "never", "replicas": 1, "host": "127.0.0.1\nUser=root"}, "host '127.0.0.1\\nUser=root' holds a newline"),
    ({"port": True}, "port must be an integer, got True"),
])
def test_the_replica_plan_refuses_what_the_rules_refuse(layout, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        sglang_replica_plan(GPUS, dict(LAYOUT, **layout), SERVES)


def test_the_last_replica_port_may_be_65535():
    replicas = sglang_replica_plan(GPUS, dict(LAYOUT, replica_port=65532), SERVES)["replicas"]
    assert [replica["port"] for replica in replicas] == [65532, 65533, 65534, 65535]


def test_the_gateway_command_line_refuses_a_word_of_more_than_one_line():
    gateway = sglang_replica_plan(GPUS, LAYOUT, SERVES)["gateway"]
    with pytest.raises(AnsibleFilterError, match=re.escape("'a\\nb': a command line word holds a newline")):
        sglang_gateway_argv(gateway, dict(SETTINGS, extra_args=["--log-level", "a\nb"]))

"""smoke_gate_failure: what role smoke writes as the host's smoke result when a gate fails, read
back by smoke_textfile as the metrics the alert SmokeGateFailed and the floors' alerts use."""
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.smoke_gate_failure import FilterModule, smoke_gate_failure
from ansible_collections.pro6000.inference.plugins.module_utils._monitoring import smoke_textfile

AT = "2026-12-06T08:30:00Z"
MEASURED = {
    "schema": "pro6000.inference.sglang_bench/v1", "started_at": "2026-12-06T08:29:00+00:00", "passed": True,
    "parameters": {"concurrency": 4},
    "gates": [{"name": "decode_tps_c1", "value": 392.1, "floor": 250, "passed": True, "detail": "median of 3"},
              {"name": "acceptance_length", "value": 11.0, "floor": 8, "passed": True, "detail": ""}],
}


def samples(document):
    return {line.split(" ")[0]: float(line.split(" ")[1])
            for line in smoke_textfile(document).splitlines() if not line.startswith("#")}


def test_the_host_benchmark_that_failed_is_its_own_document():
    failed = json.loads(json.dumps(MEASURED))
    failed["gates"][0].update(value=100.0, passed=False)
    failed["passed"] = False
    result = {"failed": True, "msg": "sglang_bench failed 1 gate(s)", "result": failed}
    document = smoke_gate_failure(result, "Run the smoke benchmark of the host and gate on its floors", MEASURED, AT)
    assert document is failed
    assert samples(document)["pro6000_smoke_passed"] == 0.0
    assert samples(document)["pro6000_smoke_decode_tps"] == 100.0


def test_a_gate_failed_after_the_host_benchmark_keeps_its_figures_and_floors():
    result = {"failed": True, "msg": "Not healthy in the gateway's pool: sglang-qwen-1."}
    document = smoke_gate_failure(result, "Fail when the gateway does not route to every replica", MEASURED, AT)
    assert document["passed"] is False and document["finished_at"] == AT
    assert document["gates"][-1] == {"name": "failed_task", "value": "Fail when the gateway does not route to every replica",
                                     "floor": None, "passed": False, "detail": result["msg"]}
    assert MEASURED["passed"] is True and len(MEASURED["gates"]) == 2, "the measured document is not changed"
    found = samples(document)
    assert found["pro6000_smoke_passed"] == 0.0 and found["pro6000_smoke_decode_tps_floor"] == 250.0
    assert found["pro6000_smoke_acceptance_length"] == 11.0


def test_a_gate_failed_before_the_host_benchmark_has_no_figures():
    # A loop (each replica's benchmark): the failed items, by replica name.
    result = {"failed": True, "msg": "One or more items failed", "results": [
        {"item": {"name": "sglang-qwen-0"}, "failed": False},
        {"item": {"name": "sglang-qwen-1"}, "failed": True, "msg": "sglang_bench failed 1 gate(s): decode_tps_c1"}]}
    document = smoke_gate_failure(result, "Benchmark each replica alone", {}, AT)
    assert document["gates"] == [{"name": "failed_task", "value": "Benchmark each replica alone", "floor": None,
                                  "passed": False, "detail": "sglang-qwen-1: sglang_bench failed 1 gate(s): decode_tps_c1"}]
    assert document["started_at"] == AT
    assert samples(document) == {"pro6000_smoke_passed": 0.0, "pro6000_smoke_timestamp_seconds": 1796545800.0}


def test_a_failed_probe_is_a_failed_gate():
    document = smoke_gate_failure({"failed": True, "msg": "sglang-qwen-0 serves DFLASH, not DDTREE"},
                                  "Check that each server answers and serves what was recorded", None, AT)
    assert document["passed"] is False and document["gates"][0]["detail"] == "sglang-qwen-0 serves DFLASH, not DDTREE"


@pytest.mark.parametrize("failed, at", [(None, AT), ("failed", AT), ({"failed": True}, "")])
def test_inputs_it_cannot_work_from_are_refused(failed, at):
    with pytest.raises(AnsibleFilterError, match="smoke_gate_failure"):
        smoke_gate_failure(failed, "task", {}, at)


def test_the_filter_is_registered():
    assert FilterModule().filters()["smoke_gate_failure"] is smoke_gate_failure

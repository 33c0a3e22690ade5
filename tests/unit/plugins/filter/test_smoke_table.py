"""smoke_table: the rows of every replica and the host, and the replicas whose own request
counter did not move while the gateway was benchmarked (the 'no replica without requests' gate)."""
from ansible_collections.pro6000.inference.plugins.filter.smoke_table import requests_total, smoke_table

# sglang:num_requests_total as SGLang's metrics collector exports it (one series per label set).
METRICS = """# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} %s
sglang:num_running_reqs{model_name="m"} 0.0
"""


def bench(concurrency, decode, output, passed=True):
    return {"levels": [{"concurrency": 1, "decode_tps": {"p50": decode}, "output_tps": decode},
                       {"concurrency": concurrency, "output_tps": output}],
            "acceptance": {"value": 11.0},
            "gates": [{"name": "output_tps_cN", "value": output, "floor": 100.0, "passed": passed}]}


def read(name, count):
    return {"item": {"name": name}, "content": METRICS % count}


def test_counts_sum_label_sets_and_are_none_without_the_counter():
    assert requests_total(METRICS % "5.0" + 'sglang:num_requests_total{tp_rank="1"} 2\n') == 7.0
    assert requests_total("sglang:num_running_reqs 0\n") is None


def test_rows_for_each_replica_and_the_gateway_and_the_idle_replica():
    replicas = [{"item": {"name": "sglang-qwen-0"}, "result": bench(2, 390.0, 700.0)},
                {"item": {"name": "sglang-qwen-1"}, "result": bench(2, 380.0, 690.0)}]
    report = smoke_table(replicas, bench(4, 385.0, 1300.0, passed=False),
                         [read("sglang-qwen-0", "10.0"), read("sglang-qwen-1", "10.0")],
                         [read("sglang-qwen-0", "18.0"), read("sglang-qwen-1", "10.0")])
    assert report["taken"] == {"sglang-qwen-0": 8, "sglang-qwen-1": 0}
    assert report["idle"] == ["sglang-qwen-1"]
    rows = report["lines"]
    assert rows[1].split()[:4] == ["sglang-qwen-0", "390.0", "700", "2"] and rows[1].endswith("ok / 8")
    assert rows[3].startswith("gateway") and "FAILED output_tps_cN" in rows[3]
    assert "gate output_tps_cN" in rows[4] and rows[4].endswith("FAILED")


def test_replicas_not_benchmarked_alone_still_show_their_requests_from_the_gateway():
    report = smoke_table([], bench(4, 385.0, 1300.0), [read("sglang-qwen-0", "1.0"), read("sglang-qwen-1", "1.0")],
                         [read("sglang-qwen-0", "4.0"), read("sglang-qwen-1", "1.0")])
    rows = report["lines"]
    assert rows[1].startswith("sglang-qwen-0") and rows[1].endswith("not measured alone / 3")
    assert rows[3].startswith("gateway") and report["idle"] == ["sglang-qwen-1"]


def test_a_single_server_has_one_row_and_no_counts():
    report = smoke_table([], bench(4, 390.0, 1500.0))
    assert report["lines"][1].startswith("server") and report["taken"] == {} and report["idle"] == []

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.tune_table import tune_table


def bench(decode, output, acceptance=None, passed=True):
    return {
        "passed": passed,
        "levels": [
            {"phase": "concurrency_1", "concurrency": 1, "decode_tps": {"p50": decode}, "output_tps": decode},
            {"phase": "concurrency_n", "concurrency": 8, "decode_tps": {"p50": decode * 0.9}, "output_tps": output},
        ],
        "acceptance": {"value": acceptance} if acceptance is not None else None,
        "gates": [{"name": "decode_tps_c1", "passed": passed}],
    }


CONFIGS = [
    {"name": "none", "algorithm": "none", "bench": bench(48.8, 390.0)},
    {"name": "dflash-8", "algorithm": "dflash", "draft_length": 8, "bench": bench(292.0, 2300.0, 7.0)},
    {"name": "ddtree-16-b15", "algorithm": "ddtree", "draft_length": 16, "ddtree_budget": 15,
     "bench": bench(393.0, 2100.0, 11.0)},
    {"name": "ddtree-16-b31", "algorithm": "ddtree", "draft_length": 16, "ddtree_budget": 31,
     "error": "this SGLang build has no DDTree"},
]


def test_ranks_by_single_stream_decode_speed_with_speedup_over_no_speculation():
    table = tune_table(CONFIGS)
    assert [row["name"] for row in table["rows"]] == ["ddtree-16-b15", "dflash-8", "none", "ddtree-16-b31"]
    assert table["best"]["name"] == "ddtree-16-b15"
    assert table["rows"][0]["speedup"] == pytest.approx(393.0 / 48.8, rel=1e-3)
    assert table["rows"][0]["acceptance_length"] == 11.0
    assert "<- best" in table["lines"][1]
    assert "no DDTree" in table["lines"][-1]


def test_aggregate_metric_can_pick_another_winner():
    assert tune_table(CONFIGS, metric="output_tps_cn")["best"]["name"] == "dflash-8"


def test_a_config_whose_gates_failed_never_wins():
    configs = CONFIGS[:2] + [dict(CONFIGS[2], bench=bench(900.0, 9000.0, 11.0, passed=False))]
    table = tune_table(configs)
    assert table["best"]["name"] == "dflash-8"
    assert table["rows"][-1]["error"] == "benchmark gates failed: decode_tps_c1"


def test_no_baseline_means_no_speedup():
    table = tune_table(CONFIGS[1:3])
    assert all(row["speedup"] is None for row in table["rows"] if "error" not in row)


def test_nothing_served_is_an_error_naming_each_failure():
    with pytest.raises(AnsibleFilterError, match="ddtree-16-b31: this SGLang build has no DDTree"):
        tune_table(CONFIGS[3:])


def test_unknown_metric_is_refused():
    with pytest.raises(AnsibleFilterError, match="metric"):
        tune_table(CONFIGS, metric="ttft")


def test_a_missed_latency_objective_still_ranks_and_shows_goodput():
    late = bench(900.0, 9000.0, 11.0, passed=False)
    late["gates"] = [{"name": "decode_tps_c1", "passed": True}, {"name": "ttft_p99_s", "passed": False}]
    late["levels"][1]["goodput"] = 1.25
    table = tune_table(CONFIGS[:2] + [dict(CONFIGS[2], bench=late)])
    assert table["best"]["name"] == CONFIGS[2]["name"] and "error" not in table["rows"][0]
    assert table["rows"][0]["goodput_cn"] == 1.25 and "1.25/s" in table["lines"][1]
    late["gates"].append({"name": "output_tps_c8", "passed": False})
    assert tune_table(CONFIGS[:2] + [dict(CONFIGS[2], bench=late)])["rows"][-1]["error"] == \
        "benchmark gates failed: output_tps_c8"


def test_open_loop_goodput_gets_a_column_per_request_rate():
    def with_open_loop(config, goodputs):
        document = dict(config["bench"], open_loop=[
            {"phase": "open_loop", "request_rate": rate, "goodput": goodput, "request_throughput": 1.5 * rate}
            for rate, goodput in goodputs])
        return dict(config, bench=document)

    configs = [with_open_loop(CONFIGS[0], [(2, 0.5), (8, None)]),
               with_open_loop(CONFIGS[2], [(2, 1.9), (8, 7.25)]), CONFIGS[3]]
    table = tune_table(configs)
    header, best, baseline, failed = table["lines"]
    assert "goodput@2/s" in header and "goodput@8/s" in header
    assert best.split()[-4:] == ["1.90/s", "7.25/s", "<-", "best"] and best.startswith("ddtree-16-b15")
    assert "0.50/s" in baseline and baseline.split()[-1] == "-"
    assert table["rows"][0]["goodput_open"] == [
        {"request_rate": 2, "goodput": 1.9, "request_throughput": 3.0},
        {"request_rate": 8, "goodput": 7.25, "request_throughput": 12.0}]
    assert table["rows"][-1].get("goodput_open") is None and "no DDTree" in failed


def test_a_missed_e2e_objective_still_ranks():
    document = dict(CONFIGS[1]["bench"], passed=False, gates=[{"name": "e2e_p99_s", "passed": False}])
    table = tune_table([dict(CONFIGS[1], bench=document)])
    assert table["best"]["name"] == "dflash-8" and "error" not in table["rows"][0]

"""Role smoke's entry point replica (tasks_from=replica), which role sglang_service runs on its
canary before the other replicas change (issue 38, item 4): one replica alone through its own
port, with the smoke role's floors. Real ansible-playbook on localhost against the SGLang double
(tests/fixtures/sglang_double) serving DDTree with a block-8 drafter, which commits at most 8
tokens a verify step and a completion's last step fewer: its acceptance comes out below 8, the
change of issue 38's example (draft length 8 under the acceptance floor of 8). One playbook run,
and one of entry point floors, which role sglang_service runs before any replica changes."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from _double import running_double  # noqa: E402
from support import run_cases  # noqa: E402


def test_the_replica_entry_point_gates_one_replica_on_the_smoke_floors(tmp_path):
    with running_double(algorithm="DDTREE", block_size=8) as (client, _pid):
        replica = {"name": "sglang-qwen-0", "url": client.base_url}
        defaults = {"smoke_replica": replica, "smoke_replica_count": 4, "smoke_speculative_algorithm": "ddtree",
                    "smoke_bench_max_tokens": 32, "smoke_bench_concurrency": 4, "smoke_min_decode_tps": 0,
                    "smoke_min_acceptance_length": 0}
        outcomes = run_cases(tmp_path, [
            ("floor of 8", "smoke", {"smoke_min_acceptance_length": 8}),
            ("floor of 5", "smoke", {"smoke_min_acceptance_length": 5}),
            ("count that is no number", "smoke", {"smoke_replica_count": "four"}),
            ("replica without URL", "smoke", {"smoke_replica": {"name": "sglang-qwen-0"}}),
            ("floor that is no number", "smoke", {"smoke_min_acceptance_length": "eight"}),
        ], defaults, tasks_from="replica", check=False)
    # What role sglang_service checks before any replica changes (entry point floors).
    (tmp_path / "floors").mkdir()
    checked = run_cases(tmp_path / "floors", [
        ("floors", "smoke", {}),
        ("floor that is no number", "smoke", {"smoke_min_acceptance_length": "eight"}),
    ], {"smoke_min_acceptance_length": 8}, tasks_from="floors", check=False)
    failed = outcomes["floor of 8"]
    assert failed["task"] == "Benchmark each replica alone", failed
    assert "acceptance_length" in failed["msg"] and "8" in failed["msg"], failed
    assert outcomes["floor of 5"] is None
    # Refused by the entry point's argument spec, before anything is measured.
    for case, variable in (("count that is no number", "smoke_replica_count"), ("replica without URL", "url"),
                           ("floor that is no number", "smoke_min_acceptance_length")):
        assert variable in outcomes[case]["msg"] and outcomes[case]["task"] != "Benchmark each replica alone", outcomes[case]
    assert checked["floors"] is None
    assert "smoke_min_acceptance_length" in checked["floor that is no number"]["msg"], checked

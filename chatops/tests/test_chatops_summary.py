"""Events as ansible-runner delivers them, into progress and the summary's figures.

The module results follow the RETURN documentation of pro6000.inference.sglang_bench and
sglang_probe; test_chatops_e2e_lab.py reads them from the real modules on the lab host.
"""
from pro6000_chatops.summary import WITHHELD, EventRecorder, HostSummary, ProgressRelay, probe_figures


def _event(kind, **data):
    return {"event": kind, "event_data": {"play": "Deploy", **data}, "stdout": ""}


BENCH_DOCUMENT = {
    "schema": "pro6000.inference.sglang_bench/v1",
    "passed": False,
    "levels": [
        {"phase": "concurrency_1", "concurrency": 1, "output_tps": 130.2,
         "decode_tps": {"count": 3, "min": 140.0, "p50": 142.1, "p90": 143.0, "p99": 143.0, "max": 143.0,
                        "mean": 141.9}},
        {"phase": "concurrency_n", "concurrency": 8, "output_tps": 801.5,
         "decode_tps": {"count": 16, "p50": 101.0}},
    ],
    "acceptance": {"value": 6.7, "method": "sum(completion_tokens)/sum(spec_verify_ct)"},
    "gates": [
        {"name": "decode_tps_c1", "value": 142.1, "floor": 60, "passed": True, "detail": "median of 3"},
        {"name": "acceptance_length", "value": 6.7, "floor": 9.0, "passed": False, "detail": ""},
    ],
}
PROBE_RESULT = {
    "changed": False,
    "server": {"url": "http://127.0.0.1:30000", "healthy": True, "version": "0.5.23",
               "speculative": {"algorithm": "DDTREE", "num_draft_tokens": 16, "ddtree_budget": 15}},
    "mismatches": [{"setting": "speculative_ddtree_budget", "expected": 20, "actual": 15}],
}


def test_events_become_progress_counts_figures_and_the_failure():
    progress = []
    recorder = EventRecorder(progress.append)
    for event in [
        _event("playbook_on_play_start"),
        _event("playbook_on_task_start", task="Check the server"),
        _event("runner_on_ok", host="h1", task="Check the server",
               resolved_action="pro6000.inference.sglang_probe", res=PROBE_RESULT),
        _event("playbook_on_task_start", task="Run the smoke benchmark"),
        _event("runner_on_failed", host="h1", task="Run the smoke benchmark",
               resolved_action="pro6000.inference.sglang_bench",
               res={"msg": "sglang_bench failed 1 gate(s): acceptance_length 6.7 < 9.0",
                    "result": BENCH_DOCUMENT}),
        _event("runner_on_failed", host="h2", task="Optional step", ignore_errors=True,
               res={"msg": "ignored"}),
        _event("playbook_on_stats", ok={"h1": 3, "h2": 1}, changed={"h1": 2}, failures={"h1": 1},
               dark={}, skipped={}),
    ]:
        recorder(event)

    assert [p.text for p in progress] == [
        "play: Deploy",
        "task: Check the server",
        "h1: ok: Check the server",
        "task: Run the smoke benchmark",
        "h1: failed: Run the smoke benchmark",
        "h2: failed (ignored): Optional step",
    ]
    figures = recorder.bench["h1"]
    assert (figures.passed, figures.decode_tps_single_stream, figures.output_tps, figures.concurrency,
            figures.acceptance_length, figures.failed_gates) == (False, 142.1, 801.5, 8, 6.7,
                                                                 ("acceptance_length",))
    probe = recorder.probes["h1"]
    assert (probe.version, probe.algorithm, probe.draft_tokens, probe.ddtree_budget, probe.mismatches) == (
        "0.5.23", "DDTREE", 16, 15, ("speculative_ddtree_budget",))
    hosts = recorder.host_summaries(("h1", "h2", "h3"), "failed")
    assert [(h.host, h.status, h.changed) for h in hosts] == [
        ("h1", "failed", 2), ("h2", "ok", 0), ("h3", "not run", 0)]
    # The module's message stays out of chat; its gates are in the figures.
    assert recorder.failure("failed") == f"h1: Run the smoke benchmark: failed; {WITHHELD}"


def test_a_benchmark_that_stands_is_the_host_s_figures():
    """Role smoke lets a passing benchmark stand while the same server processes serve the same
    record, and sets it as smoke_bench (roles/smoke/tasks/stands.yml): the summary shows it."""
    recorder = EventRecorder()
    recorder(_event("runner_on_ok", host="h1", task="Take the passing benchmark of these servers, which stands",
                    resolved_action="ansible.builtin.set_fact",
                    res={"changed": False, "ansible_facts": {"smoke_bench": {"result": dict(BENCH_DOCUMENT, passed=True)}}}))
    recorder(_event("runner_on_ok", host="h2", task="Another fact", resolved_action="ansible.builtin.set_fact",
                    res={"changed": False, "ansible_facts": {"other": {"result": BENCH_DOCUMENT}}}))
    figures = recorder.bench["h1"]
    assert (figures.passed, figures.decode_tps_single_stream, figures.output_tps) == (True, 142.1, 801.5)
    assert "h2" not in recorder.bench


def test_a_failure_before_any_task_sends_ansible_output_to_the_log_only(caplog):
    recorder = EventRecorder()
    recorder({"event": "verbose", "event_data": {}, "stdout": "ERROR! the playbook: x.yml could not be found"})
    assert recorder.failure("failed") == ("ansible-playbook ended failed before any task failed; "
                                          "its output is in the bot's log")
    assert "ERROR! the playbook: x.yml could not be found" in caplog.text
    assert recorder.failure("successful") is None


def test_figures_from_a_server_are_relayed_only_when_they_look_like_figures():
    hostile = {**PROBE_RESULT, "server": {**PROBE_RESULT["server"], "version": "0.5.23 <b>see http://x</b>",
                                          "speculative": {"algorithm": ["DDTREE"], "num_draft_tokens": "16"}}}
    probe = probe_figures("h1", hostile)
    assert (probe.version, probe.algorithm, probe.draft_tokens) == ("?", "?", None)


def test_a_progress_callback_that_raises_does_not_stop_the_run():
    delivered = []

    def broken(progress):
        delivered.append(progress.text)
        raise RuntimeError("chat server down")
    relay = ProgressRelay(broken)
    recorder = EventRecorder(relay)
    recorder(_event("playbook_on_play_start"))
    recorder(_event("playbook_on_task_start"))
    recorder(_event("playbook_on_stats", ok={"h1": 1}, changed={}, failures={}, dark={}, skipped={}))
    assert relay.close(10)
    assert recorder.host_summaries(("h1",), "successful")[0].status == "ok"
    assert len(delivered) == 2


def test_a_run_stopped_without_a_recap_reports_what_it_changed():
    recorder = EventRecorder()
    recorder(_event("runner_on_ok", host="h1", task="Write the unit", res={"changed": True}))
    recorder(_event("runner_on_ok", host="h1", task="Read the facts", res={"changed": False}))
    recorder(_event("runner_on_skipped", host="h2", task="Read the facts", res={}))
    for status in ("timeout", "canceled"):
        assert recorder.host_summaries(("h1", "h2", "h3"), status) == (
            HostSummary("h1", status, ok=2, changed=1),
            HostSummary("h2", status, skipped=1),
            HostSummary("h3", status),
        )

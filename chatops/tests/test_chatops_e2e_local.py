"""The wiring, end to end: real ansible-runner runs real (stand-in) playbooks on local hosts.

These prove the events, the progress, the summary, the secrets handling, the cleanup and the
cancel. test_chatops_e2e_lab.py runs the collection's own playbooks against the lab container.
"""
import hashlib
import json
import threading
import time

import pytest

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.runs import REDACTED, run_playbook

from chatops_support import audit_records, processes_with, write_config

SECRET = "hf_chatops_test_0123456789abcdef"


@pytest.fixture
def ops_factory(tmp_path, local_inventory, monkeypatch):
    # The bot's own credential, which must not reach the playbook.
    monkeypatch.setenv("CHAT_BOT_TOKEN", "xoxb-bot-credential")
    monkeypatch.setenv("PRO6000_HUB_TOKEN", SECRET)
    out = tmp_path / "out"
    out.mkdir()

    def make(gate=None, execute=None):
        environment = {"CHATOPS_TEST_OUT": str(out), "CHATOPS_TEST_GATE": str(gate or "")}
        config = load_config(write_config(tmp_path, local_inventory, environment=environment,
                                          secrets=["PRO6000_HUB_TOKEN"]))
        return ChatOps(config, execute=execute), out
    return make


def _wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _a_new_process_stays(variable, before):
    """Whether a process with variable in its environment, not among before, still lives 1 s on."""
    new = set(processes_with(variable)) - before
    if not new:
        return False
    time.sleep(1)
    return bool(new & set(processes_with(variable)))


def test_deploy_runs_the_playbook_with_validated_vars_and_secrets_kept_out_of_the_run_dir(ops_factory):
    ops, out = ops_factory()
    progress = []

    reply = ops.handle("alice", "deploy pro6000-03 ddtree draft=12 budget=20", progress.append)

    assert reply.accepted, reply.text
    summary = reply.summary
    assert summary.status == "successful" and summary.rc == 0 and summary.failure is None, reply.text
    (host,) = summary.hosts
    assert (host.host, host.status, host.changed, host.failed) == ("pro6000-03", "ok", 1, 0)
    assert reply.text.splitlines() == [
        f"deploy pro6000-03 ddtree draft=12 budget=20: successful in {summary.duration_s:.0f} s (run {reply.request_id})",
        "pro6000-03: ok, 1 changed",
    ]
    assert [(p.kind, p.text) for p in progress] == [
        ("play", "play: Record what a deploy receives from chatops"),
        ("task", "task: Print the secret as a careless task would"),
        ("host", "pro6000-03: ok: Print the secret as a careless task would"),
        ("task", "task: Look for the secret in every file of the run directory"),
        ("host", "pro6000-03: ok: Look for the secret in every file of the run directory"),
        ("task", "task: Record the extra vars, the environment and the search"),
        ("host", "pro6000-03: changed: Record the extra vars, the environment and the search"),
        ("task", "task: Wait until the test opens the gate"),
        ("host", "pro6000-03: skipped: Wait until the test opens the gate"),
    ]

    record = json.loads((out / "pro6000-03-deploy.json").read_text())
    assert (record["algorithm"], record["draft_length"], record["budget"]) == ("ddtree", 12, 20)
    assert record["secret_sha256"] == hashlib.sha256(SECRET.encode()).hexdigest()
    assert record["bot_token"] == ""
    # While the playbook ran, no file of its run directory held the secret (a task had printed
    # it: there is no artifacts/<id>/stdout), and the file where ansible-runner dumps the
    # environment held the redaction mark instead.
    assert record["files_with_secret"] == []
    assert record["command_file"]["env"]["PRO6000_HUB_TOKEN"] == REDACTED
    assert "CHAT_BOT_TOKEN" not in record["command_file"]["env"]
    # The run directory was in the configured runs folder, and is gone.
    assert record["run_dir"].startswith(str(ops.config.runs_dir))
    assert list(ops.config.runs_dir.iterdir()) == []

    started, finished = [r for r in audit_records(ops) if r["event"] in ("started", "finished")]
    assert started["extravars"] == {"sglang_service_speculative_algorithm": "ddtree",
                                    "sglang_service_draft_length": 12, "sglang_service_ddtree_budget": 20}
    assert finished["status"] == "successful" and finished["hosts"][0]["changed"] == 1
    assert SECRET not in ops.config.audit_log.read_text()


def test_a_failed_run_reports_each_host_and_the_failed_task(ops_factory):
    ops = ops_factory()[0]
    progress = []

    reply = ops.handle("bob", "status", progress.append)
    assert reply.summary.status == "successful"
    assert [host.host for host in reply.summary.hosts] == ["pro6000-01", "pro6000-02", "pro6000-03"]

    reply = ops.handle("bob", "tune pro6000-02", progress.append)
    summary = reply.summary
    assert reply.accepted and summary.status == "failed" and summary.rc == 2
    assert [(host.host, host.status, host.failed) for host in summary.hosts] == [("pro6000-02", "failed", 1)]
    assert summary.failure == ("pro6000-02: Report that no setting could be measured: failed; "
                               "its message is withheld from chat and the audit log; the bot's log has it")
    assert reply.text.splitlines()[-1] == "failure: " + summary.failure
    assert progress[-1].status == "failed" and progress[-1].host == "pro6000-02"
    assert list(ops.config.runs_dir.iterdir()) == []


def test_two_concurrent_requests_for_one_host_run_one_and_refuse_the_other(ops_factory, tmp_path):
    gate = tmp_path / "gate"
    ops, out = ops_factory(gate)
    replies = {}
    first = threading.Thread(target=lambda: replies.setdefault("first", ops.handle("alice", "bench pro6000-01")))
    first.start()
    # The first run holds the lock once its playbook has started writing.
    _wait_for((out / "pro6000-01-smoke.json").exists)

    second_results = []
    threads = [threading.Thread(target=lambda: second_results.append(ops.handle("bob", text)))
               for text in ("deploy pro6000-01 dflash", "status pro6000-01", "status")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gate.touch()
    first.join()

    assert replies["first"].summary.status == "successful"
    assert len(second_results) == 3
    for reply in second_results:
        assert not reply.accepted
        assert f"pro6000-01 is busy with another run (bench alice, run {replies['first'].request_id}" in reply.text
    # The lock is free again.
    assert ops.handle("bob", "status pro6000-01").summary.status == "successful"


def test_cancel_stops_the_run_and_frees_the_host(ops_factory, tmp_path):
    gate = tmp_path / "gate"
    ops, out = ops_factory(gate)
    replies = {}
    waiting = threading.Event()

    def note_the_wait(progress):
        # Reported after the record task's result: the cancel below finds it counted (the file
        # alone may exist before its result reaches the bot, on a busy machine).
        if progress.text == "task: Wait until the test opens the gate":
            waiting.set()

    worker = threading.Thread(target=lambda: replies.setdefault(
        "run", ops.handle("alice", "bench pro6000-02", note_the_wait)))
    worker.start()
    assert waiting.wait(60), "the run never reached the gate"
    assert (out / "pro6000-02-smoke.json").exists()

    assert not ops.handle("carol", "cancel pro6000-02").accepted  # neither hers nor granted
    cancel = ops.handle("bob", "cancel pro6000-02")
    assert cancel.accepted and cancel.text.startswith("cancel requested for run ")
    started = time.monotonic()
    worker.join(30)

    assert not worker.is_alive() and time.monotonic() - started < 15
    summary = replies["run"].summary
    assert summary.status == "canceled"
    assert summary.failure == "the run was canceled"
    # No play recap after a cancel: what the run changed (the record it wrote) is counted from
    # the host results it had reported.
    assert [(host.host, host.status, host.ok, host.changed) for host in summary.hosts] == [
        ("pro6000-02", "canceled", 1, 1)]
    assert "pro6000-02: canceled, 1 changed" in replies["run"].text
    assert list(ops.config.runs_dir.iterdir()) == []
    # No process of the run is left waiting for the gate (ansible's task worker included).
    assert processes_with(f"CHATOPS_TEST_GATE={gate}") == []
    assert [r["event"] for r in audit_records(ops)].count("cancel") == 1
    # The host is free again.
    gate.touch()
    assert ops.handle("alice", "deploy pro6000-02 none").summary.status == "successful"


def test_cancel_is_seen_within_a_poll_while_the_playbook_is_quiet(ops_factory, tmp_path):
    ops = ops_factory(tmp_path / "gate-never-opened")[0]
    canceled_at = []

    def cancel_once_waiting(progress):
        if progress.text == "task: Wait until the test opens the gate" and not canceled_at:
            time.sleep(0.5)  # the playbook is quiet from here on
            canceled_at.append(time.monotonic())
            ops.cancel_all("alice")

    reply = ops.handle("alice", "bench pro6000-02", cancel_once_waiting)

    assert reply.summary.status == "canceled"
    # ansible-runner asks the cancel callback every CANCEL_POLL_S (1 s) of silence; its
    # default, 5 s, is what prepare() would have left.
    assert time.monotonic() - canceled_at[0] < 3.5


# In a keeper process, or in the bot's own process (where the events arrive on the thread that
# also checks for cancel and timeout).
@pytest.mark.parametrize("execute", [None, run_playbook], ids=["keeper", "in-process"])
def test_a_stuck_chat_delays_neither_the_run_nor_its_cancel(ops_factory, tmp_path, execute):
    gate = tmp_path / "gate-never-opened"
    ops, out = ops_factory(gate, execute)
    chat_back = threading.Event()
    delivered = []

    def stuck_chat(progress):
        delivered.append(progress.text)
        chat_back.wait(60)

    replies = {}
    worker = threading.Thread(target=lambda: replies.setdefault(
        "run", ops.handle("alice", "bench pro6000-02", stuck_chat)))
    worker.start()
    try:
        _wait_for((out / "pro6000-02-smoke.json").exists)
        # Cancel only once the run is at the gate: the chat is stuck, so progress cannot say so,
        # but the gate task's worker is a process of the run that the record task did not start
        # and that stays (short-lived ones, such as the module wrapper's `sleep 0`, end at once).
        before = set(processes_with(f"CHATOPS_TEST_GATE={gate}"))
        _wait_for(lambda: _a_new_process_stays(f"CHATOPS_TEST_GATE={gate}", before))
        assert ops.handle("bob", "cancel pro6000-02").accepted
        # The run ends while the chat still sits on its first message.
        _wait_for(lambda: processes_with(f"CHATOPS_TEST_GATE={gate}") == [], timeout=8)
        _wait_for(lambda: ops.runs() == [], timeout=5)
        assert delivered == ["play: Record a probe or bench request from chatops"]
    finally:
        chat_back.set()
        worker.join(60)
    assert replies["run"].summary.status == "canceled"
    assert "task: Wait until the test opens the gate" in delivered

"""Every refused request is refused before ansible-runner starts, and the audit log records it."""
import json
import os
import sys
import threading

import pytest

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.audit import OUTCOME_EVENTS
from pro6000_chatops.locks import HostLocks

from chatops_support import RunnerSpy, audit_records, write_config
from test_chatops_commands import BAD_INPUT

REFUSED_REQUESTS = [("alice", text, reason) for text, reason in BAD_INPUT] + [
    ("alice", "deploy pro6000-99 ddtree", "unknown host 'pro6000-99'"),
    ("alice", "bench db-01", "unknown host 'db-01': not in inventory group pro6000"),
    ("alice", "deploy localhost", "unknown host 'localhost'"),
    ("alice", "deploy pro6000", "'pro6000' is an inventory group"),
    ("alice", "status pro6000_rack2", "'pro6000_rack2' is an inventory group"),
    ("alice", "deploy all", "'all' is an inventory group"),
    ("carol", "deploy pro6000-01 ddtree", "you may not run deploy"),
    ("carol", "status pro6000-03", "you may not run status on pro6000-03"),
    ("dave", "bench pro6000-01", "you may not run bench on pro6000-01"),
    ("dave", "status", "you may not run status"),
    ("mallory", "status", "you may not run status"),
    ("", "status", "not a valid chat identity"),
    ("alice\nbob", "status", "not a valid chat identity"),
    ("x" * 129, "status", "not a valid chat identity"),
    ("alice", "cancel pro6000-01", "no run is in progress on pro6000-01"),
]


@pytest.mark.parametrize(("user", "text", "reason"), REFUSED_REQUESTS,
                         ids=[repr(f"{case[0][:8]}: {case[1][:40]}") for case in REFUSED_REQUESTS])
def test_refused_before_the_runner_and_audited(spied_ops, runner_spy, user, text, reason):
    reply = spied_ops.handle(user, text)

    assert not reply.accepted
    assert reply.text.startswith("refused: ") and reason in reply.text
    assert "\n" not in reply.text
    assert runner_spy.calls == []
    request, refusal = audit_records(spied_ops)[-2:]
    assert request["event"] == "request" and refusal["event"] == "refused"
    assert request["request"] == refusal["request"] == reply.request_id
    assert request["text"] == text[:512] and request["length"] == len(text)
    assert reason in refusal["reason"]
    # Every record is one line of ASCII, whatever the chat text held.
    for line in spied_ops.config.audit_log.read_bytes().splitlines():
        assert line.isascii() and json.loads(line)


def test_a_busy_host_is_refused_before_the_runner(spied_ops, runner_spy):
    holder = {"run": "0123456789ab", "user": "bob", "action": "deploy", "since": "2026-01-01T00:00:00+00:00"}
    locks = HostLocks(spied_ops.config.lock_dir)
    (held,) = locks.acquire(["pro6000-02"], holder)
    reply = spied_ops.handle("alice", "bench pro6000-02")
    locks.release(held)
    assert not reply.accepted
    assert "pro6000-02 is busy with another run (deploy bob, run 0123456789ab" in reply.text
    assert runner_spy.calls == []
    assert audit_records(spied_ops)[-1]["event"] == "refused"


def test_a_missing_playbook_is_refused_before_the_runner(tmp_path, local_inventory, runner_spy):
    (tmp_path / "empty").mkdir()
    ops = ChatOps(load_config(write_config(tmp_path, local_inventory, playbooks_dir=tmp_path / "empty")),
                  execute=runner_spy)
    reply = ops.handle("alice", "tune pro6000-01")
    assert reply.text == "refused: tune is not available: tune.yml is not installed"
    assert runner_spy.calls == []


def test_an_accepted_request_reaches_the_runner_with_only_validated_values(spied_ops, runner_spy):
    reply = spied_ops.handle("alice", "deploy pro6000-03 ddtree draft=16 budget=32")
    assert reply.accepted and reply.summary.status == "successful"
    (run,) = runner_spy.calls
    assert run.playbook == spied_ops.config.playbooks_dir / "deploy.yml"
    assert run.limit == ("pro6000-03",)
    assert run.extravars == {"sglang_service_speculative_algorithm": "ddtree",
                             "sglang_service_draft_length": 16, "sglang_service_ddtree_budget": 32}
    events = [record["event"] for record in audit_records(spied_ops)]
    assert events == ["request", "started", "finished"]


def test_status_without_a_host_targets_the_hosts_the_user_may_see(spied_ops, runner_spy):
    assert spied_ops.handle("carol", "status").accepted
    assert spied_ops.handle("alice", "status").accepted
    assert [run.limit for run in runner_spy.calls] == [("pro6000-01", "pro6000-02"),
                                                       ("pro6000-01", "pro6000-02", "pro6000-03")]
    assert all(run.extravars == {"smoke_probe_only": True} for run in runner_spy.calls)


def test_secrets_come_from_the_bot_environment_only_when_named(tmp_path, local_inventory, runner_spy):
    config = load_config(write_config(tmp_path, local_inventory, secrets=["PRO6000_HUB_TOKEN"]))
    ops = ChatOps(config, execute=runner_spy,
                  secret_source={"PRO6000_HUB_TOKEN": "hf_secret", "CHAT_BOT_TOKEN": "xoxb"})
    ops.handle("alice", "bench pro6000-01")
    assert runner_spy.calls[0].secrets == {"PRO6000_HUB_TOKEN": "hf_secret"}
    assert "hf_secret" not in config.audit_log.read_text()


def test_concurrent_requests_write_whole_audit_lines(spied_ops):
    threads = [threading.Thread(target=spied_ops.handle, args=("alice", f"deploy pro6000-9{n}"))
               for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = audit_records(spied_ops)
    assert len(records) == 16
    assert sorted(record["event"] for record in records) == ["refused"] * 8 + ["request"] * 8


class BlockingSpy(RunnerSpy):
    """A run of this bot that lasts until the test lets it end."""

    def __init__(self):
        super().__init__()
        self.started, self.finish = threading.Event(), threading.Event()

    def __call__(self, run, on_event, cancel):
        self.calls.append(run)
        self.started.set()
        self.finish.wait(30)
        return "successful", 0


def test_an_identity_without_the_grant_learns_nothing_about_runs(tmp_path, local_inventory):
    spy = BlockingSpy()
    ops = ChatOps(load_config(write_config(tmp_path, local_inventory)), execute=spy)
    worker = threading.Thread(target=ops.handle, args=("alice", "bench pro6000-02"))
    worker.start()
    assert spy.started.wait(30)
    try:
        for user in ("mallory", "carol", "dave"):  # no grant, status only, bench only
            busy = ops.handle(user, "cancel pro6000-02").text
            free = ops.handle(user, "cancel pro6000-01").text
            assert busy == "refused: you may not cancel runs on pro6000-02"
            assert free == "refused: you may not cancel runs on pro6000-01"
        assert ops.handle("bob", "cancel pro6000-01").text == "refused: no run is in progress on pro6000-01"
    finally:
        spy.finish.set()
        worker.join(30)


def test_an_inventory_that_prints_no_json_is_a_refusal_with_its_record(tmp_path, local_inventory, runner_spy):
    # A site hook of the inventory's Python that prints to standard output (sitecustomize is
    # imported by every Python start, ansible-inventory's included).
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("print('Welcome to the inventory host!')\n")
    ops = ChatOps(load_config(write_config(tmp_path, local_inventory, environment={"PYTHONPATH": str(hook)})),
                  execute=runner_spy)

    reply = ops.handle("alice", "bench pro6000-01")

    assert reply.text == ("refused: the inventory could not be read (ansible-inventory printed something "
                          "other than JSON: 'Welcome to the inventory host!')")
    assert [record["event"] for record in audit_records(ops)] == ["request", "refused"]
    assert runner_spy.calls == []


def test_an_inventory_script_gets_the_fixed_environment_not_the_bot_credentials(
        tmp_path, local_inventory, runner_spy, monkeypatch):
    monkeypatch.setenv("CHAT_BOT_TOKEN", "syt_bot_credential")
    seen = tmp_path / "environment.json"
    script = tmp_path / "inventory.py"
    script.write_text(f"""#!{sys.executable}
import json, os
with open({str(seen)!r}, "w") as handle:
    json.dump(dict(os.environ), handle)
print(json.dumps({{"pro6000": {{"hosts": ["pro6000-01"]}}, "_meta": {{"hostvars": {{}}}}}}))
""")
    script.chmod(0o700)
    ops = ChatOps(load_config(write_config(tmp_path, script, environment={"SITE": "lab"})), execute=runner_spy)

    assert ops.handle("alice", "bench pro6000-01").accepted
    environment = json.loads(seen.read_text())
    assert "CHAT_BOT_TOKEN" not in environment
    assert environment["SITE"] == "lab" and environment["PATH"] == os.environ["PATH"]


def test_admit_authorises_without_locking_and_each_request_gets_one_outcome(spied_ops, runner_spy):
    """What the bot calls before it spends a worker or a reply on a request (issue #20 row 3)."""
    stranger = spied_ops.admit("mallory", "deploy pro6000-01")
    admitted = spied_ops.admit("alice", "deploy pro6000-01 ddtree")
    # Authorised, recorded, nothing taken: the host is still free for another request.
    assert not stranger.accepted and stranger.text == "refused: you may not run deploy"
    assert (admitted.user, admitted.hosts, admitted.runs_playbook) == ("alice", ("pro6000-01",), True)
    assert spied_ops.runs() == [] and runner_spy.calls == []
    busy = spied_ops.refuse(admitted, "1 runs are in progress")
    limited = spied_ops.decline("mallory", "deploy pro6000-01", "you sent 20 requests in the last minute")
    ran = spied_ops.carry_out(spied_ops.admit("alice", "bench pro6000-02"))
    assert busy.text == "refused: 1 runs are in progress" and busy.request_id == admitted.request_id
    assert limited.text.startswith("refused: you sent 20") and ran.summary.status == "successful"
    records = audit_records(spied_ops)
    requests = [record["request"] for record in records if record["event"] == "request"]
    outcomes = [record["request"] for record in records if record["event"] in OUTCOME_EVENTS]
    assert len(requests) == 4 and sorted(outcomes) == sorted(requests)

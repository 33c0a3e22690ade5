"""Every refused request is refused before ansible-runner starts, and the audit log records it."""
import json
import threading

import pytest

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.locks import HostLocks

from chatops_support import audit_records, write_config
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
    config = load_config(write_config(tmp_path, local_inventory, secrets=["PRO6000_HUB_TOKEN", "UNSET_ONE"]))
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

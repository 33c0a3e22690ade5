"""Runs that survive the bot: a bot killed mid-deploy, a keeper killed mid-run, a SIGTERM'd bot.

The bot is the real command line (a process of its own, killed with SIGKILL); the runs are real
ansible-runner runs of the stand-in playbooks, waiting at a gate the test controls.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pro6000_chatops import ChatOps, load_config, service
from pro6000_chatops.runs import RUN_DIR_PREFIX, run_processes

from chatops_support import audit_records, processes_with, write_config


@pytest.fixture
def setup(tmp_path, local_inventory, monkeypatch):
    # The stand-in deploy fails without the secret; the bot (this process or a child) has it.
    monkeypatch.setenv("PRO6000_HUB_TOKEN", "hf_survive_test_token")
    out = tmp_path / "out"
    out.mkdir()
    gate = tmp_path / "gate"
    config_path = write_config(tmp_path, local_inventory, secrets=["PRO6000_HUB_TOKEN"], environment={
        "CHATOPS_TEST_OUT": str(out), "CHATOPS_TEST_GATE": str(gate)})
    return config_path, out, gate


def _wait_for(predicate, timeout=60.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _bot_in_the_middle_of(config_path, text, reached):
    """The command line as a bot, started and left once its run has reached ``reached``."""
    bot = subprocess.Popen([sys.executable, "-m", "pro6000_chatops", "--config", str(config_path),
                            "--user", "alice", "--", text],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: reached.exists() or bot.poll() is not None, what=str(reached))
    assert bot.poll() is None, "the bot ended before its run reached the gate"
    return bot


def _finished(ops, run_id):
    return [record for record in audit_records(ops)
            if record["event"] == "finished" and record["request"] == run_id]


def test_a_run_outlives_a_killed_bot_and_the_next_bot_reports_and_cancels_it(setup):
    config_path, out, gate = setup
    bot = _bot_in_the_middle_of(config_path, "deploy pro6000-02 none", out / "pro6000-02-deploy.json")
    bot.kill()
    bot.wait()
    # The deploy goes on without its bot.
    assert processes_with(f"CHATOPS_TEST_GATE={gate}") != []

    ops = ChatOps(load_config(config_path))  # the bot, started again

    assert ops.recovered == []
    (orphan,) = ops.orphaned_runs()
    assert (orphan.user, orphan.action, orphan.command, orphan.hosts) == (
        "alice", "deploy", "deploy pro6000-02 none", ("pro6000-02",))
    assert "orphaned" in orphan.describe()
    # The host stays locked while the orphaned run lives.
    busy = ops.handle("bob", "deploy pro6000-02 none")
    assert not busy.accepted
    assert f"run {orphan.run_id}" in busy.text and "its bot is gone" in busy.text
    # Only an authorised user may cancel it; then nothing of it remains.
    assert ops.handle("carol", "cancel pro6000-02").text == "refused: you may not cancel runs on pro6000-02"
    cancel = ops.handle("bob", "cancel pro6000-02")
    assert cancel.accepted and cancel.text.startswith(f"canceled run {orphan.run_id}: deploy pro6000-02 none by alice")
    assert "no process of it remains" in cancel.text
    assert run_processes(orphan.run_id) == [] and processes_with(f"CHATOPS_TEST_GATE={gate}") == []
    assert ops.runs() == []
    assert list(ops.config.runs_dir.iterdir()) == []
    (finished,) = _finished(ops, orphan.run_id)
    assert finished["status"] == "canceled" and finished["user"] == "alice"
    # A later deploy runs.
    gate.touch()
    assert ops.handle("bob", "deploy pro6000-02 none").summary.status == "successful"


def test_what_a_dead_keeper_left_is_killed_audited_and_removed(setup):
    config_path, out, gate = setup
    bot = _bot_in_the_middle_of(config_path, "bench pro6000-01", out / "pro6000-01-smoke.json")
    (run,) = ChatOps(load_config(config_path)).runs()
    # The bot first: alive, it would close the run itself once it saw its keeper die.
    bot.kill()
    bot.wait()
    os.kill(run.keeper["pid"], signal.SIGKILL)
    # ansible-playbook and its task worker are still there, and so is the run directory.
    _wait_for(lambda: len(run_processes(run.run_id)) >= 1 and run.keeper["pid"] not in run_processes(run.run_id),
              what="the keeper to be gone")
    runs_dir = load_config(config_path).runs_dir
    assert [entry.name.startswith(f"{RUN_DIR_PREFIX}{run.run_id}-") for entry in runs_dir.iterdir()] == [True]

    ops = ChatOps(load_config(config_path))

    assert [lost.run_id for lost in ops.recovered] == [run.run_id]
    assert run_processes(run.run_id) == [] and processes_with(f"CHATOPS_TEST_GATE={gate}") == []
    assert list(runs_dir.iterdir()) == []
    (finished,) = _finished(ops, run.run_id)
    assert finished["status"] == "lost" and "keeper died" in finished["failure"]
    # Closed once: a second start finds nothing more to do.
    assert ChatOps(load_config(config_path)).recovered == []


def test_shutdown_cancels_the_runs_and_waits_for_them(setup):
    config_path, out = setup[:2]
    ops = ChatOps(load_config(config_path))
    replies = []
    worker = threading.Thread(target=lambda: replies.append(ops.handle("alice", "bench pro6000-03")))
    worker.start()
    _wait_for((out / "pro6000-03-smoke.json").exists)

    (run_id,) = ops.shutdown(timeout=60)

    assert replies[0].summary.status == "canceled" and replies[0].request_id == run_id
    assert run_processes(run_id) == [] and ops.runs() == []
    assert ops.handle("alice", "status").text == "refused: the bot is shutting down: try again when it is back"
    worker.join(5)


def test_shutdown_can_hand_the_runs_over_to_their_keepers(setup):
    config_path, out, gate = setup
    ops = ChatOps(load_config(config_path))
    worker = threading.Thread(target=ops.handle, args=("alice", "bench pro6000-03"), daemon=True)
    worker.start()
    _wait_for((out / "pro6000-03-smoke.json").exists)

    (run_id,) = ops.shutdown(hand_over=True)

    # The run goes on, and finishes and is audited by its keeper.
    assert [run.run_id for run in ops.runs()] == [run_id]
    gate.touch()
    _wait_for(lambda: _finished(ops, run_id) != [], what="the finished record")
    assert _finished(ops, run_id)[0]["status"] == "successful"
    assert [record["event"] for record in audit_records(ops)].count("handed_over") == 1
    worker.join(30)


def _wait_for_hosts_free(ops, hosts):
    _wait_for(lambda: not any(ops.locks.is_held(host) for host in hosts), what="the dead keeper's hosts to be free")


def test_a_lost_run_of_several_hosts_gets_one_finished_record_from_the_next_run_on_them(setup):
    config_path, out, gate = setup
    bot = _bot_in_the_middle_of(config_path, "status", out / "pro6000-01-smoke.json")
    _wait_for(lambda: all((out / f"{host}-smoke.json").exists() for host in ("pro6000-02", "pro6000-03")))
    bot.kill()
    bot.wait()
    ops = ChatOps(load_config(config_path))  # a bot started while the run goes on alone
    (run,) = ops.runs()
    assert run.hosts == ("pro6000-01", "pro6000-02", "pro6000-03") and ops.recovered == []
    os.kill(run.keeper["pid"], signal.SIGKILL)  # the run is lost now
    _wait_for_hosts_free(ops, run.hosts)
    gate.touch()

    # The next run takes all three hosts, each lock naming the lost run.
    assert ops.handle("bob", "status").summary.status == "successful"

    records = _finished(ops, run.run_id)
    assert [(record["status"], record["user"]) for record in records] == [("lost", "alice")]
    assert run_processes(run.run_id) == [] and ops.runs() == []


def test_a_lost_run_found_by_its_own_bot_and_by_the_next_run_gets_one_finished_record(setup, monkeypatch):
    config_path, out, gate = setup
    ops = ChatOps(load_config(config_path))
    replies = []
    waiting = threading.Thread(target=lambda: replies.append(ops.handle("alice", "bench pro6000-01")))
    # The thread that waits for the run is held just before it closes the lost run, until the
    # next request on the host has closed it too (the order a busy machine may give them).
    closing, close_now = threading.Event(), threading.Event()
    stop_leftover_processes = service.stop_leftover_processes

    def held_for_the_waiting_thread(run_id, group=None):
        if threading.current_thread() is waiting:
            closing.set()
            assert close_now.wait(120)
        return stop_leftover_processes(run_id, group)

    monkeypatch.setattr(service, "stop_leftover_processes", held_for_the_waiting_thread)
    waiting.start()
    _wait_for((out / "pro6000-01-smoke.json").exists)
    (run,) = ops.runs()
    os.kill(run.keeper["pid"], signal.SIGKILL)
    assert closing.wait(60), "the bot did not find its run lost"
    _wait_for_hosts_free(ops, run.hosts)
    gate.touch()
    assert ops.handle("bob", "bench pro6000-01").summary.status == "successful"
    close_now.set()
    waiting.join(60)

    assert [record["status"] for record in _finished(ops, run.run_id)] == ["lost"]
    # The bot's reply is the outcome the log has.
    assert replies[0].summary.status == "lost" and replies[0].request_id == run.run_id
    assert run_processes(run.run_id) == [] and ops.runs() == []

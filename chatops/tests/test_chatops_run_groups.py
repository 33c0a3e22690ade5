"""A host lock means the old run is gone (issue #20 row 4): processes of a run that lost its
marker (``env -i``; a grandchild in a session of its own, as under ``become`` with sudo's
``env_reset``) are stopped by ``cancel`` and by the recovery after a keeper's SIGKILL, and the
next deploy of the host starts only once they are gone.

Real ansible-runner runs of escaping_playbooks/deploy.yml in keeper processes; the bot that
dies is the real command line, killed with SIGKILL.
"""
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.runs import RUN_DIR_PREFIX, RunGroup, run_processes

from chatops_support import TESTS, audit_records, write_config


@pytest.fixture
def escaping(tmp_path, local_inventory):
    out = tmp_path / "out"
    out.mkdir()
    gate = tmp_path / "gate"
    # A tag no other process has: the sleeps' duration.
    tag = f"3600.{random.randrange(10 ** 8):08d}"
    config_path = write_config(tmp_path, local_inventory, playbooks_dir=TESTS / "escaping_playbooks",
                               environment={"CHATOPS_TEST_OUT": str(out), "CHATOPS_TEST_GATE": str(gate),
                                            "CHATOPS_TEST_TAG": tag})
    yield config_path, out, gate, tag
    for pid in tagged(tag):  # what a failed test left
        os.kill(pid, signal.SIGKILL)


def tagged(tag: str) -> list[int]:
    """The sleeps the runs started (found by their command line: they have no environment)."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                if handle.read().split(b"\0")[:2] == [b"sleep", tag.encode()]:
                    found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def environment_of(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return handle.read()


def wait_for(predicate, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def both_escaped(out, host: str, tag: str) -> list[int]:
    """Once the run has started both: their pids, each without the marker, one in a session of
    its own."""
    wait_for((out / f"{host}-started.txt").exists, "the escaping processes")
    wait_for(lambda: len(tagged(tag)) == 2, "two tagged processes")
    pids = tagged(tag)
    assert all(b"PRO6000_CHATOPS_RUN" not in environment_of(pid) for pid in pids)
    assert any(os.getsid(pid) == pid for pid in pids)
    return pids


def test_cancel_stops_the_processes_that_lost_the_marker(escaping):
    config_path, out, _log, tag = escaping
    ops = ChatOps(load_config(config_path))
    replies = []
    worker = threading.Thread(target=lambda: replies.append(ops.handle("alice", "deploy pro6000-02")))
    worker.start()
    both_escaped(out, "pro6000-02", tag)
    (run,) = ops.runs()
    group = RunGroup.named(run.cgroup)
    assert group is not None and os.path.isdir(group.path), run

    assert ops.handle("alice", "cancel pro6000-02").accepted
    worker.join(120)

    assert replies[0].summary.status == "canceled"
    assert tagged(tag) == [] and run_processes(run.run_id) == []
    assert not os.path.exists(group.path)
    assert ops.runs() == []


def killed_mid_deploy(config_path, out, host: str, tag: str):
    """The command line (as a bot) deploys ``host``; once the run has left both processes, a
    second bot (returned, with nothing to recover yet) reads the run; then the first bot and
    the run's keeper are killed with SIGKILL. Returns the second bot and the run."""
    bot = subprocess.Popen([sys.executable, "-m", "pro6000_chatops", "--config", str(config_path),
                            "--user", "alice", "--", f"deploy {host}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        escaped = both_escaped(out, host, tag)
        ops = ChatOps(load_config(config_path))
        (run,) = ops.runs()
        assert ops.recovered == [] and RunGroup.named(run.cgroup) is not None
        # The bot first: it would close the run itself once it saw its keeper die.
        bot.kill()
        os.kill(run.keeper["pid"], signal.SIGKILL)
    finally:
        bot.wait(60)
    wait_for(lambda: not ops.locks.is_held(host), "the host lock to be free")
    # The keeper is gone, its processes are not: nothing else ends them.
    assert sorted(tagged(tag)) == sorted(escaped)
    return ops, run


def test_after_a_keeper_is_killed_the_next_deploy_starts_once_its_processes_are_gone(escaping):
    config_path, out, gate, tag = escaping
    ops, run = killed_mid_deploy(config_path, out, "pro6000-02", tag)
    (out / "pro6000-02-alive.txt").unlink()
    gate.touch()

    reply = ops.handle("bob", "deploy pro6000-02")

    assert reply.summary.status == "successful", reply.text
    # The second deploy's first task found none of them alive.
    assert (out / "pro6000-02-alive.txt").read_text() == "0\n"
    finished = [(record["request"], record["status"]) for record in audit_records(ops) if record["event"] == "finished"]
    assert finished == [(run.run_id, "lost"), (reply.request_id, "successful")]
    # The second run's own escaped processes ended with it, and nothing of either run is left.
    assert tagged(tag) == [] and run_processes(run.run_id) == []
    assert not os.path.exists(RunGroup.named(run.cgroup).path)
    assert [entry.name for entry in ops.config.runs_dir.iterdir() if entry.name.startswith(RUN_DIR_PREFIX)] == []


def test_a_bot_that_starts_after_a_keeper_was_killed_stops_what_it_left(escaping):
    config_path, out, _log, tag = escaping
    run = killed_mid_deploy(config_path, out, "pro6000-01", tag)[1]

    ops = ChatOps(load_config(config_path))  # the bot, started again

    assert [lost.run_id for lost in ops.recovered] == [run.run_id]
    assert tagged(tag) == [] and run_processes(run.run_id) == []
    assert not os.path.exists(RunGroup.named(run.cgroup).path)

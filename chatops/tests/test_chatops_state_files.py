"""The audit log and the lock files: whole records or none, holders visible with their lock,
and no link, foreign file or loose mode accepted."""
import fcntl
import json
import os
import subprocess
import sys
import threading

import pytest

from pro6000_chatops import locks as locks_module
from pro6000_chatops.audit import AuditLog
from pro6000_chatops.files import UnsafeFile
from pro6000_chatops.locks import HostBusy, HostLocks

from chatops_support import audit_records

# A bot writing a record when the file may not grow by more than 100 bytes (RLIMIT_FSIZE: the
# kernel then writes what fits and returns a short count, as on a nearly full disk).
SHORT_WRITE = """
import os, resource, signal, sys
from pathlib import Path
from pro6000_chatops.audit import AuditError, AuditLog
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
log = AuditLog(Path(sys.argv[1]))
limit = os.path.getsize(sys.argv[1]) + 100
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    log.record("request", "second", text="y" * 300)
except AuditError as error:
    print("AuditError:", error)
"""


def test_a_short_write_leaves_no_part_of_the_record(tmp_path):
    path = tmp_path / "audit.jsonl"
    AuditLog(path).record("request", "first", text="x")

    result = subprocess.run([sys.executable, "-c", SHORT_WRITE, str(path)], capture_output=True,
                            text=True, timeout=60, check=True)

    assert result.stdout.startswith(f"AuditError: the audit log {path} could not be written")
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 1 and json.loads(lines[0])["request"] == "first"


def test_a_record_torn_by_a_killed_writer_is_cut_off_before_the_next(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.record("request", "first")
    with open(path, "ab") as handle:  # what a writer killed in the middle of its write leaves
        handle.write(b'{"event": "request", "request": "torn", "te')

    log.record("request", "second")

    assert [json.loads(line)["request"] for line in path.read_bytes().splitlines()] == ["first", "second"]


def test_an_outcome_recorded_once_is_found_across_a_long_log_and_not_written_again(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.record("started", "lost1")
    log.record("finished", "lost1", status="lost")
    # Records of other requests after it, over several of the chunks the log is read back in,
    # one of them naming the run in its text.
    for number in range(400):
        log.record("request", f"other{number}", text=f"cancel lost1 {'x' * 400}")

    earlier = log.record("finished", "lost1", once=True, status="lost")

    assert earlier["status"] == "lost" and earlier["request"] == "lost1"
    assert [record["request"] for record in audit_records_at(path)].count("lost1") == 2
    # A run with no outcome yet gets one, and only one.
    log.record("started", "again")
    assert log.record("finished", "again", once=True, status="lost") is None
    assert log.record("finished", "again", once=True, status="lost")["request"] == "again"
    assert [record["event"] for record in audit_records_at(path) if record["request"] == "again"] == [
        "started", "finished"]


def audit_records_at(path):
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_the_audit_log_refuses_a_link_a_foreign_file_and_a_loose_mode(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = tmp_path / "audit.jsonl"
    path.symlink_to(victim)
    with pytest.raises(UnsafeFile, match="is a symbolic link"):
        AuditLog(path).record("request", "r1")
    assert victim.read_text() == "precious\n"

    path.unlink()
    path.write_text("")
    os.chmod(path, 0o666)
    with pytest.raises(UnsafeFile, match="writable by group or others"):
        AuditLog(path).record("request", "r2")
    os.chmod(path, 0o640)
    os.chown(path, 65534, 65534)
    with pytest.raises(UnsafeFile, match="belongs to uid 65534"):
        AuditLog(path).record("request", "r3")
    assert path.read_text() == ""


def test_lock_files_refuse_a_link_a_foreign_file_and_a_loose_mode(spied_ops, runner_spy, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    lock = spied_ops.config.lock_dir / "pro6000-01.lock"
    lock.symlink_to(victim)
    reply = spied_ops.handle("alice", "bench pro6000-01")
    assert reply.text.startswith("error: the request could not be carried out (UnsafeFile: lock file")
    assert "is a symbolic link" in reply.text
    assert victim.read_text() == "precious\n"

    lock.unlink()
    lock.write_text("")
    os.chmod(lock, 0o622)
    assert "writable by group or others" in spied_ops.handle("alice", "bench pro6000-01").text
    os.chmod(lock, 0o600)
    os.chown(lock, 65534, 65534)
    assert "belongs to uid 65534" in spied_ops.handle("alice", "bench pro6000-01").text
    assert runner_spy.calls == []
    assert [record["event"] for record in audit_records(spied_ops)] == ["request", "error"] * 3


def test_a_missing_lock_folder_still_gives_the_request_an_outcome(spied_ops, runner_spy):
    spied_ops.config.lock_dir.rmdir()

    reply = spied_ops.handle("alice", "bench pro6000-01")

    assert not reply.accepted and "does not exist" in reply.text
    request, outcome = audit_records(spied_ops)
    assert (request["event"], outcome["event"]) == ("request", "error")
    assert outcome["request"] == request["request"] == reply.request_id
    assert runner_spy.calls == []


def test_a_refusal_always_sees_the_holder_of_a_lock_just_taken(tmp_path, monkeypatch):
    """The winner is stopped right after its flock succeeded, before anything else: whoever is
    refused meanwhile must still learn who holds the host."""
    locks = HostLocks(tmp_path / "locks")
    real_flock = fcntl.flock
    winner_took_it, go_on = threading.Event(), threading.Event()

    def flock_pausing_the_winner(descriptor, operation):
        real_flock(descriptor, operation)
        if threading.current_thread().name == "winner" and operation == fcntl.LOCK_EX | fcntl.LOCK_NB:
            winner_took_it.set()
            go_on.wait(10)

    monkeypatch.setattr(locks_module.fcntl, "flock", flock_pausing_the_winner)
    holder = {"run": "0123456789ab", "user": "bob", "action": "deploy"}
    won = []
    winner = threading.Thread(target=lambda: won.extend(locks.acquire(["pro6000-01"], holder)), name="winner")
    refusals = []

    def contender():
        try:
            locks.acquire(["pro6000-01"], {"run": "other"})
        except HostBusy as busy:
            refusals.append(busy)

    winner.start()
    assert winner_took_it.wait(10)
    loser = threading.Thread(target=contender)
    loser.start()
    loser.join(0.5)
    go_on.set()
    winner.join(10)
    loser.join(10)

    (refusal,) = refusals
    assert refusal.holder == holder
    locks.release(won[0])

"""The keeper of one run: ``python -m pro6000_chatops.keeper``, started by ``runs.Keeper``.

Reads its orders (one JSON document) from standard input, holds the host locks it inherited,
runs the playbook, audits the outcome, frees the hosts and exits. Progress and the summary go
to standard output as JSON lines for as long as someone reads them; SIGTERM cancels the run.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from .audit import AuditLog
from .locks import HeldLock, HostLocks
from .masking import Masker
from .runs import PROGRESS_DRAIN_S, PlaybookRun, RunGroup, conduct, process_identity, run_playbook
from .summary import Progress, ProgressRelay


class _Lines:
    """JSON lines to the bot; once it is gone (a broken pipe), the run goes on without it."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()
        self._broken = False

    def send(self, message: Mapping[str, object]) -> None:
        with self._lock:
            if self._broken:
                return
            try:
                self._stream.write(json.dumps(message).encode() + b"\n")
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                self._broken = True

    def progress(self, progress: Progress) -> None:
        self.send({"progress": progress.__dict__})


def main() -> int:
    # Standard error is the bot's: its log gets what the run withholds from chat.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    orders = json.loads(sys.stdin.buffer.read())
    cancel = threading.Event()
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: cancel.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    run = PlaybookRun.from_dict(orders["run"])
    # Before anything of the run starts: every process it starts is born in the group.
    group = RunGroup.enter(run.run_id)
    locks = HostLocks(Path(orders["lock_dir"]))
    held = {host: HeldLock(host, descriptor) for host, descriptor in orders["locks"].items()}
    locks.update_holder(held.values(), {**orders["holder"], "keeper": process_identity(os.getpid()),
                                        "cgroup": group.path if group is not None else None})
    audit = AuditLog(Path(orders["audit_log"]), Masker(run.secrets.values()))
    lines = _Lines(sys.stdout.buffer)
    relay = ProgressRelay(lines.progress)

    def host_done(host: str) -> None:
        lock = held.pop(host, None)
        if lock is not None:
            locks.release(lock)

    try:
        summary = conduct(run, orders["command"], orders["user"], functools.partial(run_playbook, group=group),
                          audit, relay, cancel, host_done, orders.get("host_done_after"))
    finally:
        for lock in held.values():
            locks.release(lock)
    relay.close(PROGRESS_DRAIN_S)
    lines.send({"summary": summary.as_dict()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One run at a time per host: an exclusive, non-blocking ``flock`` on a file per host.

``flock`` belongs to the open file description, so it excludes other threads of this process
(each opens its own description) as well as other bot processes on the machine, and the kernel
drops it when the holder exits, however it exits. The holder writes who it is into the file so
that a refused request can say what the host is busy with.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path


class HostBusy(Exception):
    """Another run holds the host."""

    def __init__(self, host: str, holder: Mapping[str, object]):
        self.host = host
        self.holder = holder
        what = " ".join(str(holder[key]) for key in ("action", "user") if key in holder)
        detail = f" ({what}, run {holder.get('run', '?')}, since {holder.get('since', '?')})" if holder else ""
        super().__init__(f"{host} is busy with another run{detail}: try again when it has finished")


class HostLocks:
    def __init__(self, lock_dir: Path):
        self.lock_dir = lock_dir
        lock_dir.mkdir(parents=True, exist_ok=True, mode=0o750)

    def _path(self, host: str) -> Path:
        # Host names were checked against the inventory and a strict pattern: no '/' or '..'.
        return self.lock_dir / f"{host}.lock"

    @contextlib.contextmanager
    def hold(self, hosts: Iterable[str], holder: Mapping[str, object]) -> Iterator[None]:
        """Hold every host's lock for the duration, or raise HostBusy holding none."""
        with contextlib.ExitStack() as held:
            # Sorted, so two multi-host requests never wait on each other crosswise.
            for host in sorted(set(hosts)):
                held.enter_context(self._hold_one(host, holder))
            yield

    @contextlib.contextmanager
    def _hold_one(self, host: str, holder: Mapping[str, object]) -> Iterator[None]:
        descriptor = os.open(self._path(host), os.O_RDWR | os.O_CREAT, 0o640)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise HostBusy(host, _read_holder(descriptor)) from None
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, json.dumps(dict(holder)).encode(), 0)
            yield
        finally:
            os.close(descriptor)


def _read_holder(descriptor: int) -> dict[str, object]:
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0) or b"{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}

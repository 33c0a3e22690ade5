"""One run at a time per host: an exclusive, non-blocking ``flock`` on a file per host.

``flock`` belongs to the open file description, so it excludes other threads of this process
(each opens its own description) as well as other bot processes on the machine. A description
passed on to a child process (the run's keeper, see ``runs.py``) keeps the lock for as long as
any process holds it, and the kernel drops it when the last holder exits, however it exits.

The file holds who holds the lock (the holder: run, user, action, keeper process). Taking a
lock and writing its holder happen under a short ``flock`` of the lock folder, as does every
look at a lock, so nobody ever sees a held lock without its holder. A lock that is free but
still names a holder belongs to a run whose keeper died before it could finish: whoever finds
it closes that run (``ChatOps``).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .files import check_folder, open_private

LOCK_SUFFIX = ".lock"
_HOLDER_LIMIT = 65536


class HostBusy(Exception):
    """Another run holds the host."""

    def __init__(self, host: str, holder: Mapping[str, object]):
        self.host = host
        self.holder = holder
        what = " ".join(str(holder[key]) for key in ("action", "user") if key in holder)
        detail = f" ({what}, run {holder.get('run', '?')}, since {holder.get('since', '?')})" if holder else ""
        super().__init__(f"{host} is busy with another run{detail}: try again when it has finished")


@dataclass
class HeldLock:
    """A host lock this process holds; ``previous`` is the holder a dead run left in the file."""

    host: str
    descriptor: int
    previous: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class LockState:
    host: str
    held: bool
    holder: Mapping[str, object]


class HostLocks:
    def __init__(self, lock_dir: Path):
        self.lock_dir = lock_dir
        lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_folder(lock_dir)

    def _path(self, host: str) -> Path:
        # Host names were checked against the inventory and a strict pattern: no '/' or '..'.
        return self.lock_dir / f"{host}{LOCK_SUFFIX}"

    def _open(self, host: str) -> int:
        return open_private(self._path(host), os.O_RDWR, 0o600, "lock file")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Exclusive use of the lock folder for one short step (take, release, look)."""
        check_folder(self.lock_dir)
        descriptor = os.open(self.lock_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def acquire(self, hosts: Iterable[str], holder: Mapping[str, object]) -> list[HeldLock]:
        """Take every host's lock with its holder written, or raise HostBusy holding none."""
        held: list[HeldLock] = []
        with self._guard():
            try:
                # Sorted, so two multi-host requests never wait on each other crosswise.
                for host in sorted(set(hosts)):
                    descriptor = self._open(host)
                    try:
                        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        busy = HostBusy(host, _read_holder(descriptor))
                        os.close(descriptor)
                        raise busy from None
                    held.append(HeldLock(host, descriptor, _read_holder(descriptor)))
                    _write_holder(descriptor, holder)
            except BaseException:
                for lock in held:
                    _write_holder(lock.descriptor, lock.previous)
                    os.close(lock.descriptor)
                raise
        return held

    def update_holder(self, locks: Iterable[HeldLock], holder: Mapping[str, object]) -> None:
        with self._guard():
            for lock in locks:
                _write_holder(lock.descriptor, holder)

    def release(self, lock: HeldLock) -> None:
        """Clear the holder and free the host for every process that shares this lock."""
        try:
            with self._guard():
                _write_holder(lock.descriptor, {})
                fcntl.flock(lock.descriptor, fcntl.LOCK_UN)
        finally:
            os.close(lock.descriptor)

    def states(self) -> list[LockState]:
        """Every host lock: whether a process holds it, and the holder it names."""
        states = []
        with self._guard():
            for path in sorted(self.lock_dir.glob(f"*{LOCK_SUFFIX}")):
                host = path.name[:-len(LOCK_SUFFIX)]
                descriptor = self._open(host)
                try:
                    states.append(LockState(host, not _try_lock(descriptor), _read_holder(descriptor)))
                finally:
                    os.close(descriptor)
        return states

    def is_held(self, host: str) -> bool:
        with self._guard():
            descriptor = self._open(host)
            try:
                return not _try_lock(descriptor)
            finally:
                os.close(descriptor)

    def clear_lost(self, host: str, run_id: str) -> bool:
        """Clear the holder a dead run left on a free lock; False when the lock is held again."""
        with self._guard():
            descriptor = self._open(host)
            try:
                if not _try_lock(descriptor):
                    return False
                if _read_holder(descriptor).get("run") == run_id:
                    _write_holder(descriptor, {})
                return True
            finally:
                os.close(descriptor)


def _try_lock(descriptor: int) -> bool:
    """Whether the lock is free (taken and given back at once; only under the folder guard)."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(descriptor, fcntl.LOCK_UN)
    return True


def _write_holder(descriptor: int, holder: Mapping[str, object]) -> None:
    data = json.dumps(dict(holder), sort_keys=True).encode() if holder else b""
    os.ftruncate(descriptor, 0)
    written = 0
    while written < len(data):
        written += os.pwrite(descriptor, data[written:], written)


def _read_holder(descriptor: int) -> dict[str, object]:
    try:
        holder = json.loads(os.pread(descriptor, _HOLDER_LIMIT, 0) or b"{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}

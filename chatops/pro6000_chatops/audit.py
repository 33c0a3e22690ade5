"""The audit log: one JSON document per line, appended, never rewritten.

Records of concurrent threads and bot processes never interleave: each is appended on a
descriptor opened with ``O_APPEND`` under an exclusive ``flock``. A record is written whole or
not at all: a short write (a full disk, a file size limit) is cut back off and raised as
AuditError, and a fragment that a writer killed mid-write left at the end is cut off by the
next writer before it appends. Every record is flushed to disk (``fdatasync``) before the call
returns, so what the log says happened survives a crash of the machine; records are few (a
handful per request), so this costs nothing that matters. ``ensure_ascii`` keeps control
characters and look-alike letters from chat visible as escapes; secret values are masked.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
from pathlib import Path

from .files import open_private
from .masking import Masker

# Each request has one ``request`` record and then exactly one of these, its outcome (a run's
# ``started`` comes before its ``finished``). A ``cancel`` record whose request is a run's own
# id is a stop by the bot's shutdown or the command line's Ctrl-C; the run's ``finished`` is
# its outcome. A ``help`` request's outcome is its ``help`` record. Whoever closes a lost run
# writes its ``finished`` with ``once``: several may find the same lost run (its bot, the next
# run on each of its hosts, a bot starting), one records it.
OUTCOME_EVENTS = frozenset({"refused", "error", "cancel", "help", "finished"})
# Raw chat text is kept up to this many characters; the record also says how long it was.
TEXT_LIMIT = 512
_TAIL_CHUNK = 65536


class AuditError(OSError):
    """A record could not be written whole; nothing of it is in the log."""


def clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT]


class AuditLog:
    def __init__(self, path: Path, masker: Masker | None = None):
        self.path = path
        self.masker = masker or Masker()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)

    def record(self, event: str, request_id: str, *, once: bool = False,
               **fields: object) -> dict[str, object] | None:
        """Append a record. With ``once``, append nothing when the log already holds an ``event``
        record of this request (looked for under the same lock), and return that record."""
        entry = self.masker.value({
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "event": event,
            "request": request_id,
            **fields,
        })
        line = (json.dumps(entry, ensure_ascii=True, sort_keys=True, default=str) + "\n").encode()
        descriptor = open_private(self.path, os.O_RDWR | os.O_APPEND, 0o640, "audit log")
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            size = _cut_torn_tail(descriptor)
            if once:
                earlier = _earlier_record(descriptor, size, event, request_id)
                if earlier is not None:
                    return earlier
            try:
                written = 0
                while written < len(line):
                    count = os.write(descriptor, line[written:])
                    if count == 0:
                        raise OSError(0, "the write made no progress")
                    written += count
                os.fdatasync(descriptor)
            except OSError as error:
                os.ftruncate(descriptor, size)
                raise AuditError(f"the audit log {self.path} could not be written "
                                 f"({error.strerror or error}); the {event} record was not kept") from None
        finally:
            os.close(descriptor)
        return None


def _earlier_record(descriptor: int, end: int, event: str, request_id: str) -> dict[str, object] | None:
    """The last ``event`` record of ``request_id``, read backwards from ``end`` and no further
    than the request's ``started`` record (nothing of its outcome comes before that)."""
    needle = json.dumps({"request": request_id})[1:-1].encode()
    tail = b""
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        lines = (os.pread(descriptor, end - start, start) + tail).split(b"\n")
        # The first piece may be the end of a line that starts in the chunk before.
        tail = lines.pop(0) if start > 0 else b""
        for line in reversed(lines):
            if needle not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("request") == request_id and record.get("event") == event:
                return record
            if record.get("request") == request_id and record.get("event") == "started":
                return None
        end = start
    return None


def _cut_torn_tail(descriptor: int) -> int:
    """Cut a partial last line (its writer was killed mid-write); returns the size after that."""
    size = os.fstat(descriptor).st_size
    if size == 0 or os.pread(descriptor, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        newline = os.pread(descriptor, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    os.ftruncate(descriptor, end)
    return end

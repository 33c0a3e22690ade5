"""The audit log: one JSON document per line, appended, never rewritten.

Each record is written with a single ``write`` on a descriptor opened with ``O_APPEND`` and under
an exclusive ``flock``, so records of concurrent threads and bot processes never interleave.
``ensure_ascii`` keeps control characters and look-alike letters from chat visible as escapes.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
from pathlib import Path

# Raw chat text is kept up to this many characters; the record also says how long it was.
TEXT_LIMIT = 512


def clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT]


class AuditLog:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, event: str, request_id: str, **fields: object) -> None:
        entry = {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "event": event,
            "request": request_id,
            **fields,
        }
        line = (json.dumps(entry, ensure_ascii=True, sort_keys=True, default=str) + "\n").encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            os.write(descriptor, line)
        finally:
            os.close(descriptor)

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress of long work on a host (the weights staging): the worker keeps a small JSON document
up to date, module work_progress reads it while the work runs as an asynchronous job and turns
it into figures (bytes done, rate, time left) and one line for the terminal.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import threading
import time

from ansible_collections.pro6000.inference.plugins.module_utils._weights.files import human_bytes

SCHEMA = "pro6000.inference.progress/1"
# Fields a progress document holds, each a whole number of bytes or files.
COUNTS = ("done_bytes", "start_bytes", "total_bytes", "files_done", "files_total")


def human_duration(seconds):
    """'45 s', '3 min 20 s', '2 h 05 min': whole units, as a person reads a time left."""
    seconds = int(round(seconds))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %02d s" % (seconds // 60, seconds % 60)
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


def write_document(path, document):
    """Replace path with document in one rename: a reader sees the old or the new, never half."""
    partial = "%s.%d.tmp" % (path, os.getpid())
    with open(partial, "w") as stream:
        json.dump(document, stream, sort_keys=True)
    os.chmod(partial, 0o644)
    os.replace(partial, path)


class ProgressWriter:
    """Samples measure() (returning (done_bytes, files_done)) every `every` seconds on a thread of
    its own and writes the document to path; stop() writes the last sample and removes the file.

    The bytes already there when the work began (start_bytes: a resumed download) count as done
    but not towards the rate."""

    def __init__(self, path, phase, measure, total_bytes, files_total, every=1.0, clock=time.time):
        self.path = path
        self.measure = measure
        self.every = every
        self.clock = clock
        done, files_done = measure()
        self.document = {"schema": SCHEMA, "pid": os.getpid(), "phase": phase, "started": clock(),
                         "updated": clock(), "done_bytes": done, "start_bytes": done,
                         "total_bytes": total_bytes, "files_done": files_done, "files_total": files_total}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="progress", daemon=True)

    def sample(self):
        self.document["done_bytes"], self.document["files_done"] = self.measure()
        self.document["updated"] = self.clock()
        write_document(self.path, self.document)

    def run(self):
        while not self.stopping.wait(self.every):
            try:
                self.sample()
            except OSError:
                pass  # progress is a courtesy: a failed sample never stops the work it reports on

    def __enter__(self):
        write_document(self.path, self.document)
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stopping.set()
        self.thread.join()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    return True


def read_document(path):
    """The document at path, or None when there is none, it is not ours, or its writer is gone
    (a stale file a killed run left must not be reported as this run's progress)."""
    try:
        with open(path) as stream:
            document = json.load(stream)
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        return None
    numbers = [document.get(key) for key in COUNTS + ("started", "updated", "pid")]
    if not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in numbers):
        return None
    if not process_alive(int(document["pid"])):
        return None
    return document


def figures(document):
    """Bytes done and total, percent, rate (bytes/s over the time since the work began, counting
    only what this run moved) and the time left at that rate (None until something moved)."""
    done, total, start = document["done_bytes"], document["total_bytes"], document["start_bytes"]
    elapsed = max(0.0, document["updated"] - document["started"])
    rate = (done - start) / elapsed if elapsed > 0 and done > start else None
    return {
        "phase": document["phase"],
        "done_bytes": done,
        "total_bytes": total,
        "files_done": document["files_done"],
        "files_total": document["files_total"],
        "percent": round(100.0 * done / total, 1) if total else 100.0,
        "rate_bytes_per_s": round(rate) if rate is not None else None,
        "eta_s": round(max(0, total - done) / rate) if rate else None,
        "elapsed_s": round(elapsed),
    }


def describe(label, numbers):
    """One line: 'Qwen3.6-27B: fetch 12.0 GiB of 54.0 GiB (22.2 %), 3/14 files, 105.0 MiB/s, 6 min 50 s left'."""
    line = "%s: %s %s of %s (%.1f %%), %d/%d files" % (
        label, numbers["phase"], human_bytes(numbers["done_bytes"]), human_bytes(numbers["total_bytes"]),
        numbers["percent"], numbers["files_done"], numbers["files_total"])
    if numbers["rate_bytes_per_s"] is None:
        return line + ", rate not known yet"
    return line + ", %s/s, %s left" % (human_bytes(numbers["rate_bytes_per_s"]), human_duration(numbers["eta_s"]))

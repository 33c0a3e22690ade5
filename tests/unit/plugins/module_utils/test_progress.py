"""The progress document of long work: written by ProgressWriter while the work runs, read and
turned into figures (rate, time left) and one line by module work_progress."""
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils import _progress


def document(**fields):
    base = {"schema": _progress.SCHEMA, "pid": os.getpid(), "phase": "download", "started": 1000.0,
            "updated": 1010.0, "done_bytes": 0, "start_bytes": 0, "total_bytes": 0, "files_done": 0,
            "files_total": 0}
    base.update(fields)
    return base


def test_rate_counts_only_what_this_run_moved_and_the_time_left_follows_from_it():
    # 1 GiB already there from a cut run, 2 GiB moved in 20 s: 100 MiB/s over what this run moved,
    # 7 GiB left at that rate is 70 s (computed by hand, not by the code under test).
    gib = 1024 ** 3
    numbers = _progress.figures(document(started=1000.0, updated=1020.0, start_bytes=gib, done_bytes=3 * gib,
                                         total_bytes=10 * gib, files_done=2, files_total=8))
    assert numbers == {"phase": "download", "done_bytes": 3 * gib, "total_bytes": 10 * gib, "files_done": 2,
                       "files_total": 8, "percent": 30.0, "rate_bytes_per_s": 107374182, "eta_s": 70,
                       "elapsed_s": 20}


def test_rate_and_time_left_are_unknown_until_a_byte_moved():
    numbers = _progress.figures(document(start_bytes=500, done_bytes=500, total_bytes=1000, files_total=1))
    assert numbers["rate_bytes_per_s"] is None and numbers["eta_s"] is None and numbers["percent"] == 50.0
    line = _progress.describe("Qwen3.6-27B", numbers)
    assert line == "Qwen3.6-27B: download 500 B of 1000 B (50.0 %), 0/1 files, rate not known yet"


def test_the_line_says_bytes_done_rate_and_time_left():
    # (54 GiB - 500 MiB) at 50 MiB/s: 54796 MiB / 50 = 1095.9 s.
    mib = 1024 ** 2
    numbers = _progress.figures(document(updated=1010.0, done_bytes=500 * mib, total_bytes=54 * 1024 * mib,
                                         files_done=1, files_total=14))
    assert _progress.describe("Qwen3.6-27B", numbers) == (
        "Qwen3.6-27B: download 500.0 MiB of 54.0 GiB (0.9 %), 1/14 files, 50.0 MiB/s, 18 min 16 s left")


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (59.4, "59 s"), (60, "1 min 00 s"), (3599, "59 min 59 s"),
                                           (3600, "1 h 00 min"), (5430, "1 h 30 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert _progress.human_duration(seconds) == text


def test_the_writer_keeps_the_document_current_and_removes_it_at_the_end(tmp_path):
    path = tmp_path / "progress.json"
    done = [100]
    seen = []
    with _progress.ProgressWriter(str(path), "download", lambda: (done[0], done[0] // 400), 1000, 2, every=0.05):
        seen.append(_progress.read_document(str(path)))
        for step in (400, 800):
            done[0] = step
            deadline = time.monotonic() + 5
            while _progress.read_document(str(path))["done_bytes"] != step and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(_progress.read_document(str(path)))
    assert not path.exists()
    assert [(entry["done_bytes"], entry["files_done"]) for entry in seen] == [(100, 0), (400, 1), (800, 2)]
    assert all(entry["start_bytes"] == 100 and entry["total_bytes"] == 1000 and entry["files_total"] == 2
               and entry["pid"] == os.getpid() for entry in seen)
    assert seen[2]["updated"] > seen[0]["updated"] >= seen[0]["started"]


def test_a_document_left_by_a_dead_writer_or_of_another_shape_is_not_reported(tmp_path):
    path = tmp_path / "progress.json"
    assert _progress.read_document(str(path)) is None
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    path.write_text(json.dumps(document(pid=int(dead.stdout))))
    assert _progress.read_document(str(path)) is None
    path.write_text(json.dumps(document(schema="other/1")))
    assert _progress.read_document(str(path)) is None
    path.write_text(json.dumps(document(done_bytes="12")))
    assert _progress.read_document(str(path)) is None
    path.write_text("{")
    assert _progress.read_document(str(path)) is None
    path.write_text(json.dumps(document()))
    assert _progress.read_document(str(path)) == document()

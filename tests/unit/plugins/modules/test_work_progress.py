"""work_progress on the files an asynchronous job leaves (async_wrapper's results file, the
progress document model_stage writes, a pip --log file), as the roles poll it."""
import json
import os
import time

from ansible_collections.pro6000.inference.plugins.module_utils import _progress
from ansible_collections.pro6000.inference.plugins.modules import work_progress
from support import run_main

MIB = 1024 * 1024


def running_job(tmp_path):
    # What async_wrapper writes when the job starts (ansible/modules/async_wrapper.py, jwrite).
    path = tmp_path / "j123.456"
    path.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "j123.456"}))
    return path


def test_a_running_job_is_waited_for_then_its_figures_reported(tmp_path, capsys):
    results = running_job(tmp_path)
    progress = tmp_path / "progress.json"
    now = time.time()
    _progress.write_document(str(progress), {
        "schema": _progress.SCHEMA, "pid": os.getpid(), "phase": "download", "started": now - 10,
        "updated": now, "done_bytes": 30 * MIB, "start_bytes": 10 * MIB, "total_bytes": 110 * MIB,
        "files_done": 1, "files_total": 4})
    began = time.monotonic()
    failed, result = run_main(work_progress.main, {"results_file": str(results), "progress_file": str(progress),
                                                   "label": "Qwen3.6-27B", "wait": 1}, capsys)
    # The wait counts from the job's start (its results file's time), which came before `began`;
    # the default wait (10 s) would have taken longer than the bound.
    assert time.time() >= results.stat().st_mtime + 1 and time.monotonic() - began < 9
    # 20 MiB moved in 10 s: 2 MiB/s; 80 MiB left at that rate: 40 s.
    assert not failed and not result["changed"] and not result["finished"]
    assert result["line"] == "Qwen3.6-27B: download 30.0 MiB of 110.0 MiB (27.3 %), 1/4 files, 2.0 MiB/s, 40 s left"
    assert result["progress"]["rate_bytes_per_s"] == 2 * MIB and result["progress"]["eta_s"] == 40
    assert result["phase"] == "download" and result["label"] == "Qwen3.6-27B"


def test_without_a_document_the_line_says_the_step_its_time_and_the_log_s_last_line(tmp_path, capsys):
    results = running_job(tmp_path)
    os.utime(results, (time.time() - 130, time.time() - 130))
    log = tmp_path / "pip-torch.log"
    log.write_text("2026-12-06T14:27:01,548 Collecting torch==2.14.1\n"
                   "2026-12-06T14:27:02,001   Downloading torch-2.14.1-cp312-manylinux.whl (900.1 MB)\n\n")
    failed, result = run_main(work_progress.main, {"results_file": str(results), "log_file": str(log),
                                                   "label": "Install PyTorch from its index", "phase": "pip",
                                                   "wait": 1}, capsys)
    assert not failed and result["progress"] is None and 130 <= result["elapsed_s"] <= 133
    assert result["line"].startswith("Install PyTorch from its index: pip, 2 min 1")
    assert result["line"].endswith(" elapsed; last: Downloading torch-2.14.1-cp312-manylinux.whl (900.1 MB)")


def test_a_finished_job_is_reported_at_once(tmp_path, capsys):
    results = tmp_path / "j1.2"
    results.write_text(json.dumps({"changed": True, "failed": True, "msg": "the mirror answered 404"}))
    began = time.monotonic()
    failed, result = run_main(work_progress.main, {"results_file": str(results), "label": "Qwen3.6-27B",
                                                   "progress_file": str(tmp_path / "gone.json"), "wait": 30}, capsys)
    assert time.monotonic() - began < 15   # half the wait: no waiting for a finished job
    assert not failed and result["finished"] and result["line"] == "Qwen3.6-27B: finished"
    assert result["elapsed_s"] is None


def test_a_job_file_being_written_is_not_finished_and_a_missing_one_is(tmp_path):
    partial = tmp_path / "partial"
    partial.write_text('{"started": tr')
    assert not work_progress.job_finished(str(partial))
    assert work_progress.job_finished(str(tmp_path / "missing"))


def test_a_wait_under_a_second_is_refused(tmp_path, capsys):
    failed, result = run_main(work_progress.main, {"results_file": str(running_job(tmp_path)), "label": "x",
                                                   "wait": 0}, capsys)
    assert failed and result["msg"] == "wait must be at least 1 second, not 0"


def test_the_interval_counts_from_the_previous_report_not_from_this_poll(tmp_path, capsys):
    results = running_job(tmp_path)
    # The previous report was 9 s ago (the tasks between two polls took that long): this one
    # comes 10 s after it, about 1 s from now, not 10 s from now. The bounds are seconds wide,
    # so that a loaded machine does not break them and counting from this poll still does.
    since = time.time() - 9
    began = time.monotonic()
    second = run_main(work_progress.main, {"results_file": str(results), "label": "x", "wait": 10,
                                           "since": since}, capsys)[1]
    assert time.monotonic() - began < 5
    assert since + 10 <= second["answered_at"] < since + 15

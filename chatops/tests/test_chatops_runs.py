"""stop_leftover_processes against real processes: what a cancel leaves behind must not survive."""
import os
import subprocess
import time
import uuid

from pro6000_chatops.runs import RUN_MARKER, stop_leftover_processes

from chatops_support import processes_with


def _with_marker(run_id: str) -> list[int]:
    return processes_with(f"{RUN_MARKER}={run_id}")


def _start(run_id: str, script: str) -> subprocess.Popen:
    # A session of its own, as ansible's task workers have: a process-group kill misses it.
    return subprocess.Popen(["sh", "-c", script], env={**os.environ, RUN_MARKER: run_id},
                            start_new_session=True)


def test_a_run_that_keeps_forking_is_stopped_whole_and_other_runs_are_left_alone():
    forking_run, other_run = f"forking-{uuid.uuid4()}", f"other-{uuid.uuid4()}"
    forking = _start(forking_run, "while :; do sleep 300 & sleep 0.01; done")
    other = _start(other_run, "exec sleep 300")
    try:
        deadline = time.monotonic() + 30
        while len(_with_marker(forking_run)) < 5:
            assert time.monotonic() < deadline, "the forking process did not start its children"
            time.sleep(0.02)

        killed = stop_leftover_processes(forking_run)

        assert killed >= 5
        assert _with_marker(forking_run) == []
        assert forking.wait(10) == -9
        assert other.poll() is None and _with_marker(other_run) == [other.pid]
    finally:
        for process in (forking, other):
            process.kill()
            process.wait()

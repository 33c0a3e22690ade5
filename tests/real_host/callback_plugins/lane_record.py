"""Records every task result of a run as one JSON line each, in the file named by
LANE_RECORD_FILE: the real-host lane's raw output (ansible.posix's json callback is not part of
ansible-core, which is all the lane may assume on a host), and the task timings of the Molecule
scenarios (.config/molecule/config.yml enables it there with LANE_RECORD_RESULTS=0, so that only
names, statuses and durations are written; tests/scripts/timings.py ranks them)."""
import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: lane_record
type: notification
short_description: Record every task result as JSON lines, with its duration
description:
  - Writes one JSON object per task result (playbook, play, task, host, status, duration in seconds and, unless
    LANE_RECORD_RESULTS is 0, the result) to LANE_RECORD_FILE; records nothing where that variable is unset.
requirements: [enable in callbacks_enabled]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "lane_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        # Unset in a nested run that inherited callbacks_enabled alone: nothing to record, and
        # no warning in that run's output.
        self._path = os.environ.get("LANE_RECORD_FILE")
        if self._path:
            os.makedirs(os.path.dirname(os.path.abspath(self._path)), exist_ok=True)
        self._results = os.environ.get("LANE_RECORD_RESULTS", "1") != "0"
        self._playbook = None
        self._play = None
        self._started = {}  # (host, task uuid) -> monotonic time the task started on that host

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.basename(playbook._file_name)

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def v2_runner_on_start(self, host, task):
        self._started[(host.get_name(), task._uuid)] = time.monotonic()

    def _record(self, status, result):
        if not self._path:
            return
        host = result._host.get_name()
        started = self._started.pop((host, result._task._uuid), None)
        entry = {"playbook": self._playbook, "play": self._play, "task": result.task_name, "host": host,
                 "status": status, "duration": None if started is None else round(time.monotonic() - started, 3)}
        if self._results:
            entry["result"] = result._result
        with open(self._path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._record("changed" if result._result.get("changed") else "ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record("ignored" if ignore_errors else "failed", result)

    def v2_runner_on_skipped(self, result):
        self._record("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._record("failed", result)

"""Records every task result of a run as one JSON line each, in the file named by
LANE_RECORD_FILE: the real-host lane's raw output (ansible.posix's json callback is not part of
ansible-core, which is all the lane may assume on a host)."""
import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: lane_record
type: notification
short_description: Record every task result as JSON lines for the real-host lane
description: Writes one JSON object per task result (play, task, host, status, result) to LANE_RECORD_FILE.
requirements: [enable in callbacks_enabled]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "lane_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._path = os.environ["LANE_RECORD_FILE"]
        self._play = None

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def _record(self, status, result):
        entry = {"play": self._play, "task": result.task_name, "host": result._host.get_name(), "status": status,
                 "result": result._result}
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

"""Where the controller's CPU goes, task by task: at each task's start the CPU of the
ansible-playbook process and of every process it has reaped (its forks, which reap the docker CLI
or ssh they run; the forks of the task before are reaped first) is read, and the CPU since the
previous task's start is that task's, for all its hosts together (the linear strategy starts a
task once the previous one is done everywhere).
bench_fleet.py enables it for the measured rerun and prints the sums per role; the time before
the first task (from the process's start: its imports, the playbooks, the inventory) is entry "(start)"."""
import json
import multiprocessing
import os
import resource
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_cpu
type: aggregate
short_description: Record the controller CPU and wall time of every task, all hosts together
description:
  - Writes one JSON object per task (play, role, task, hosts that reported, CPU seconds, wall seconds) to
    TASK_CPU_FILE at the end of the run; records nothing where that variable is unset.
requirements: [enable in callbacks_enabled]
"""


def cpu_seconds():
    # A fork is counted when reaped, and the task queue manager reaps one only when it reuses its
    # slot, tasks later: the forks of the task before, which have sent their results and are
    # exiting, are waited for (a second at most each) and reaped here.
    for fork in multiprocessing.active_children():
        fork.join(1)
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_cpu"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._path = os.environ.get("TASK_CPU_FILE")
        self._play = None
        self._entries = [{"play": None, "role": "(start)", "task": "(start)", "results": 0}]
        self._mark = (0.0, time.monotonic())  # CPU and wall at the current entry's start

    def _next(self, entry):
        cpu, wall = cpu_seconds(), time.monotonic()
        self._entries[-1].update(cpu=round(cpu - self._mark[0], 3), wall=round(wall - self._mark[1], 3))
        self._mark = (cpu, wall)
        self._entries.append(entry)

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def v2_playbook_on_task_start(self, task, is_conditional):
        role = task._role.get_name(include_role_fqcn=False) if task._role else "(play)"
        self._next({"play": self._play, "role": role, "task": task.get_name(), "results": 0})

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def _result(self, result, *args, **kwargs):
        self._entries[-1]["results"] += 1

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_skipped = v2_runner_on_unreachable = _result

    def v2_playbook_on_stats(self, stats):
        self._next({"play": None, "role": "(end)", "task": "(end)", "results": 0})
        if self._path:
            with open(self._path, "w", encoding="utf-8") as out:
                json.dump(self._entries[:-1], out, indent=1)

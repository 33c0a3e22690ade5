"""Run one playbook through ansible-runner, in a process of its own that outlives the bot.

The keeper: each run is driven by a keeper process (``python -m pro6000_chatops.keeper``) in a
session of its own. It inherits the run's host lock descriptors, so the hosts stay locked for
as long as the keeper lives, whatever happens to the bot; it runs ansible-runner, writes the
run's ``finished`` record to the audit log, removes the run directory and frees the hosts. It
gets its orders (secrets included) on standard input and sends progress and the summary back
as JSON lines on standard output; SIGTERM cancels the run. When the bot is gone, the keeper
carries on alone; a bot that starts again finds it through the lock files (``locks.py``).

Secrets: ansible-runner writes files under the private data directory for whatever it is given
as ``envvars``, ``extravars``, ``passwords`` or ``settings`` (``env/...``), and it always dumps
the child's complete environment into ``artifacts/<ident>/command`` just before it starts
ansible-playbook. So secrets are never handed to it as arguments: the RunnerConfig is prepared
without them, the child environment is then rebuilt in memory from an allow-list plus the
secrets, and the status handler that runs after that dump and before the playbook starts
rewrites ``command`` with the secret values redacted. The playbook reads the secrets from its
environment (``lookup('ansible.builtin.env', NAME)``). The run directory is created mode 0700 in
a memory-backed folder where there is one, and removed when the run ends, however it ends.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ansible_runner import Runner, RunnerConfig

from .audit import AuditError, AuditLog
from .environment import minimal_environment
from .inventory import ansible_tool
from .masking import REDACTED
from .summary import EventRecorder, Progress, RunSummary

logger = logging.getLogger(__name__)

# Set in the keeper's environment, inherited by every process of the run: how they are found.
RUN_MARKER = "PRO6000_CHATOPS_RUN"
# The run directory's name starts with this, then the run id and '-'.
RUN_DIR_PREFIX = "pro6000-chatops-"
# How often (seconds) ansible-runner asks the cancel callback while the playbook is quiet.
CANCEL_POLL_S = 1
# How long (seconds) the leftovers of a run may take to die before the run is reported anyway.
LEFTOVER_KILL_TIMEOUT_S = 10
# How long (seconds) the end of a run waits for queued progress to reach the chat.
PROGRESS_DRAIN_S = 10

Executor = Callable[["PlaybookRun", Callable[[Mapping[str, object]], None], threading.Event],
                    tuple[str, "int | None"]]


@dataclass(frozen=True)
class PlaybookRun:
    run_id: str
    playbook: Path
    inventory: Path
    limit: tuple[str, ...]
    extravars: Mapping[str, object]
    environment: Mapping[str, str]
    secrets: Mapping[str, str]
    runs_dir: Path
    job_timeout: int

    def as_dict(self) -> dict[str, object]:
        return {"run_id": self.run_id, "playbook": str(self.playbook), "inventory": str(self.inventory),
                "limit": list(self.limit), "extravars": dict(self.extravars),
                "environment": dict(self.environment), "secrets": dict(self.secrets),
                "runs_dir": str(self.runs_dir), "job_timeout": self.job_timeout}

    @classmethod
    def from_dict(cls, document: Mapping[str, object]) -> PlaybookRun:
        return cls(**{**document, "playbook": Path(document["playbook"]),
                      "inventory": Path(document["inventory"]), "runs_dir": Path(document["runs_dir"]),
                      "limit": tuple(document["limit"])})


def child_environment(prepared: Mapping[str, str], inherited: Mapping[str, str],
                      fixed: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """The playbook's environment: allow-listed inherited variables, the operator's fixed ones,
    the secrets, and what ansible-runner itself set (its callback plugin: it must win)."""
    set_by_runner = {name: value for name, value in prepared.items() if inherited.get(name) != value}
    return {**minimal_environment(inherited, fixed), **secrets, **set_by_runner}


def redact_command_file(artifact_dir: Path, secret_names: tuple[str, ...]) -> None:
    """Replace secret values in ansible-runner's ``command`` artifact."""
    path = artifact_dir / "command"
    document = json.loads(path.read_text(encoding="utf-8"))
    environment = document.get("env") or {}
    for name in secret_names:
        if name in environment:
            environment[name] = REDACTED
    temporary = path.with_name("command.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    os.replace(temporary, path)


def process_identity(pid: int) -> dict[str, int] | None:
    """A process's id and start time (clock ticks since boot): together they name it for good,
    where a pid alone may be reused by another process once it has exited."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            # The command name, in parentheses, may hold spaces: count fields after it.
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return {"pid": pid, "start": int(fields[19])}


def is_alive(identity: Mapping[str, object] | None) -> bool:
    if not isinstance(identity, Mapping) or not isinstance(identity.get("pid"), int):
        return False
    return process_identity(identity["pid"]) == dict(identity)


class RunGroup:
    """A run's own cgroup (v2): every process of the run, whatever it does to its environment,
    its session or its user (``env -i``, ``setsid``, ``sudo`` with ``env_reset``), is born in it
    and stays in it, so killing the group (``cgroup.kill``) stops the whole run at once, and a
    bot that finds the run after its keeper died still finds every process.

    The keeper creates it as a child of the cgroup it was started in (the bot's: with systemd,
    the unit's, delegated to the bot by ``Delegate=yes``) and moves itself into it before it
    starts anything; its path goes into the lock files. Where no cgroup can be created (no
    cgroup v2, a read-only or not delegated hierarchy), the run goes on without one and its
    processes are found by their marker alone (see ``run_processes``). A process of the run
    that writes to the cgroup files on purpose can leave; nothing else can.
    """

    def __init__(self, path: str):
        self.path = path

    @staticmethod
    def _hierarchy() -> tuple[str, str]:
        """The cgroup v2 mount point and this process's cgroup in it."""
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mount = next((line.split()[4] for line in handle if " - cgroup2 " in line), None)
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            own = next((line.strip()[3:] for line in handle if line.startswith("0::")), None)
        if mount is None or own is None:
            raise OSError("no cgroup v2 hierarchy")
        return mount, own

    @classmethod
    def enter(cls, run_id: str) -> RunGroup | None:
        """Create the run's cgroup and move this process into it; None where that cannot be."""
        created = None
        try:
            mount, own = cls._hierarchy()
            created = os.path.join(mount + own.rstrip("/"), f"{RUN_DIR_PREFIX}{run_id}")
            os.mkdir(created, 0o755)
            with open(os.path.join(created, "cgroup.procs"), "w", encoding="ascii") as handle:
                handle.write(str(os.getpid()))
        except OSError as error:
            if created is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(created)
            logger.warning("run %s: no cgroup of its own (%s); its processes are found by their "
                           "environment only", run_id, error)
            return None
        return cls(created)

    @classmethod
    def named(cls, path: object) -> RunGroup | None:
        """The group a lock file names, when it is one (a run's cgroup under the hierarchy)."""
        if not isinstance(path, str) or not os.path.basename(path).startswith(RUN_DIR_PREFIX):
            return None
        try:
            mount = cls._hierarchy()[0]
        except OSError:
            return None
        path = os.path.normpath(path)
        return cls(path) if path.startswith(mount.rstrip("/") + "/") else None

    def leave(self) -> None:
        """Move this process back to the parent cgroup (so that killing the group spares it)."""
        with open(os.path.join(os.path.dirname(self.path), "cgroup.procs"), "w", encoding="ascii") as handle:
            handle.write(str(os.getpid()))

    def kill(self) -> bool:
        """Kill every process in the group and remove it; True when it is gone (or never was)."""
        if not os.path.isdir(self.path):
            return True
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w", encoding="ascii") as handle:
                handle.write("1")
        except FileNotFoundError:  # a kernel older than 5.14: kill them one by one
            self._kill_each()
        deadline = time.monotonic() + LEFTOVER_KILL_TIMEOUT_S
        while True:
            try:
                os.rmdir(self.path)  # refused (EBUSY) while a process is still in it
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    logger.error("the cgroup %s still holds processes after %d s", self.path,
                                 LEFTOVER_KILL_TIMEOUT_S)
                    return False
                self._kill_each()
                time.sleep(0.02)

    def _kill_each(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            with open(os.path.join(self.path, "cgroup.procs"), encoding="ascii") as handle:
                pids = [int(line) for line in handle if line.strip()]
            for pid in pids:
                if pid != os.getpid():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)


def _processes_of_run(marker: bytes) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def run_processes(run_id: str) -> list[int]:
    """The live processes of a run (its keeper, ansible-playbook, task workers, modules)."""
    return _processes_of_run(f"{RUN_MARKER}={run_id}".encode())


def stop_leftover_processes(run_id: str, group: RunGroup | None = None) -> int:
    """Kill the processes of a run that outlived ansible-playbook: its whole cgroup, when it
    has one, then whatever carries its marker; returns how many were found by the marker.

    ansible-core's task workers start sessions of their own, so the process-group kill that
    ansible-runner sends on cancel or timeout misses a worker in the middle of a task, and that
    worker would go on until its task ends. They stay in the run's cgroup, and (unless a task
    drops its environment) carry the run's marker. A killed process lingers until the kernel
    gets to it, and a worker may fork between the scan and the kill, so the scan repeats until
    it finds none (a dead one's environment reads empty).
    """
    if group is not None:
        group.kill()
    killed: set[int] = set()
    deadline = time.monotonic() + LEFTOVER_KILL_TIMEOUT_S
    while (found := [pid for pid in run_processes(run_id) if pid != os.getpid()]) \
            and time.monotonic() < deadline:
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.02)
    return len(killed)


def remove_run_dirs(runs_dir: Path, keep: set[str]) -> list[str]:
    """Remove the run directories of runs not in ``keep`` (left by a run that died); their ids."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(runs_dir):
            if not entry.name.startswith(RUN_DIR_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            run_id = entry.name[len(RUN_DIR_PREFIX):].split("-", 1)[0]
            if run_id not in keep and entry.stat(follow_symlinks=False).st_uid == os.geteuid():
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(run_id)
    return removed


def runner_config(run: PlaybookRun, private_data_dir: Path) -> RunnerConfig:
    """The prepared RunnerConfig of a run, its environment rebuilt (see the module's text)."""
    config = RunnerConfig(
        private_data_dir=str(private_data_dir),
        playbook=str(run.playbook),
        inventory=str(run.inventory),
        limit=",".join(run.limit),
        extravars=dict(run.extravars),
        ident=run.run_id,
        quiet=True,
        suppress_env_files=True,
        timeout=run.job_timeout,
    )
    config.prepare()
    # prepare() sets these two from env/settings (a file we do not write) and forgets what the
    # constructor was given: they only hold when set afterwards.
    config.suppress_output_file = True  # no artifacts/<ident>/stdout holding the playbook's output
    config.pexpect_timeout = CANCEL_POLL_S
    config.env = child_environment(config.env, os.environ, run.environment, run.secrets)
    # The ansible-playbook beside this Python first, even when its folder is not on PATH.
    tools = os.path.dirname(ansible_tool("ansible-playbook"))
    config.env["PATH"] = os.pathsep.join(filter(None, (tools, config.env.get("PATH"))))
    config.env[RUN_MARKER] = run.run_id
    return config


def run_playbook(run: PlaybookRun, on_event: Callable[[Mapping[str, object]], None],
                 cancel: threading.Event, group: RunGroup | None = None) -> tuple[str, int | None]:
    """Run the playbook in this process; returns ansible-runner's (status, rc). Blocks until
    the run ends, and until every process of it is gone: ``group`` is the run's cgroup, which
    this process (the keeper) is in and leaves to kill it."""
    run.runs_dir.mkdir(parents=True, exist_ok=True)
    private_data_dir = Path(tempfile.mkdtemp(prefix=f"{RUN_DIR_PREFIX}{run.run_id}-", dir=run.runs_dir))
    try:
        config = runner_config(run, private_data_dir)
        secret_names = tuple(run.secrets)

        def on_status(status: Mapping[str, object], runner_config: RunnerConfig) -> None:
            if status.get("status") == "running":
                redact_command_file(Path(runner_config.artifact_dir), secret_names)

        def handle_event(event: Mapping[str, object]) -> bool:
            on_event(event)
            return False  # events stay in memory: nothing of them is written to disk

        runner = Runner(config, event_handler=handle_event, status_handler=on_status,
                        cancel_callback=cancel.is_set)
        status, rc = runner.run()
        return str(status), rc
    finally:
        if group is not None:
            group.leave()
        stop_leftover_processes(run.run_id, group)
        shutil.rmtree(private_data_dir, ignore_errors=True)


def conduct(run: PlaybookRun, command: str, user: str, execute: Executor, audit: AuditLog,
            on_progress: Callable[[Progress], None] | None, cancel: threading.Event,
            on_host_done: Callable[[str], None] | None = None,
            host_done_after: str | None = None) -> RunSummary:
    """Execute a run and make its summary; the audit log gets its ``finished`` record.

    ``on_progress`` is called on the thread that also checks for cancel and timeout: pass a
    ProgressRelay, and close it once the hosts are free (a slow chat must not hold them)."""
    recorder = EventRecorder(on_progress, audit.masker, on_host_done, host_done_after)
    started = time.monotonic()
    try:
        status, rc = execute(run, recorder, cancel)
    except Exception as error:  # pylint: disable=broad-exception-caught
        # ansible-runner could not start or broke: report it like a failed run.
        status, rc = "error", None
        recorder.failures.append(audit.masker.text(f"ansible-runner: {type(error).__name__}: {error}"))
    summary = RunSummary(
        run_id=run.run_id,
        command=command,
        status=status,
        rc=rc,
        duration_s=time.monotonic() - started,
        hosts=recorder.host_summaries(run.limit, status),
        bench=tuple(recorder.bench[host] for host in run.limit if host in recorder.bench),
        probes=tuple(recorder.probes[host] for host in run.limit if host in recorder.probes),
        failure=recorder.failure(status),
    )
    try:
        audit.record("finished", run.run_id, user=user, **summary.as_dict())
    except AuditError:
        # The run happened whatever the log says: the summary still goes back to the chat.
        logger.exception("run %s: the finished record could not be written", run.run_id)
    return summary


class Keeper:
    """The bot's side of a run's keeper process (see the module's text)."""

    def __init__(self, orders: Mapping[str, object], lock_descriptors: list[int]):
        run_id = orders["run"]["run_id"]
        environment = {**minimal_environment(os.environ, {}), RUN_MARKER: run_id}
        # A session of its own: a Ctrl-C or a hang-up meant for the bot does not reach the run.
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", "pro6000_chatops.keeper"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, pass_fds=lock_descriptors, start_new_session=True, env=environment)
        try:
            self.process.stdin.write(json.dumps(orders).encode())
            self.process.stdin.close()
        except BrokenPipeError:  # it died at once: messages() ends with no summary
            pass

    def stop(self) -> None:
        """Ask the keeper to cancel the run (it audits and cleans up, then exits)."""
        self.process.send_signal(signal.SIGTERM)  # a no-op once the keeper has been reaped

    def messages(self) -> Iterator[Progress | RunSummary]:
        for line in self.process.stdout:
            message = json.loads(line)
            if "progress" in message:
                yield Progress(**message["progress"])
            elif "summary" in message:
                yield RunSummary.from_dict(message["summary"])

    def wait(self) -> int:
        self.process.stdout.close()
        return self.process.wait()

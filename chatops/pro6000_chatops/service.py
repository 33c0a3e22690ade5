"""The front a chat bot calls: ``ChatOps.handle(user, text, on_progress)``.

Every request goes through the same gates, in order, before anything runs: the grammar, the
action grant, the inventory, the host grant, the host lock. A request refused at any gate gets
a one-line reason, and the audit log gets the request, the refusal or the run and its result.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import audit
from .commands import Command, Refused, parse
from .config import Config, load_config
from .inventory import InventoryCache, InventoryError
from .locks import HostBusy, HostLocks
from .runs import PlaybookRun, run_playbook
from .summary import EventRecorder, Progress, RunSummary

USER_LIMIT = 128
ProgressCallback = Callable[[Progress], None]
Executor = Callable[[PlaybookRun, Callable[[Mapping[str, object]], None], threading.Event],
                    tuple[str, "int | None"]]


@dataclass(frozen=True)
class Reply:
    """What the bot answers: ``text`` is the refusal, the acknowledgement or the summary."""

    request_id: str
    accepted: bool
    text: str
    summary: RunSummary | None = None


@dataclass(frozen=True)
class ActiveRun:
    run_id: str
    user: str
    command: Command
    hosts: tuple[str, ...]
    cancel: threading.Event


class ChatOps:
    def __init__(self, config: Config, execute: Executor = run_playbook,
                 secret_source: Mapping[str, str] | None = None):
        """``execute`` runs a playbook (ansible-runner); ``secret_source`` holds the secret
        values named in the configuration (default: this process's environment)."""
        self.config = config
        self.audit = audit.AuditLog(config.audit_log)
        self.locks = HostLocks(config.lock_dir)
        self.inventory = InventoryCache(config.inventory, config.inventory_group,
                                        config.environment, config.inventory_cache_seconds)
        self._execute = execute
        self._secret_source = os.environ if secret_source is None else secret_source
        self._active: dict[str, ActiveRun] = {}
        self._active_lock = threading.Lock()

    @classmethod
    def from_config_file(cls, path: str | os.PathLike[str]) -> ChatOps:
        return cls(load_config(path))

    def handle(self, user: str, text: str, on_progress: ProgressCallback | None = None) -> Reply:
        """Parse, authorise and run one chat command. Blocks until a run ends: call it from a
        worker thread; ``cancel HOST`` from another thread stops the run."""
        request_id = uuid.uuid4().hex[:12]
        self.audit.record("request", request_id, user=audit.clip(str(user)),
                          text=audit.clip(str(text)), length=len(str(text)))
        try:
            if not isinstance(user, str) or not 0 < len(user) <= USER_LIMIT or not user.isprintable():
                raise Refused("the requesting user is not a valid chat identity")
            command = parse(text)
            if command.action.name == "cancel":
                return self._cancel(request_id, user, command)
            hosts = self._authorise(user, command)
            return self._run(request_id, user, command, hosts, on_progress)
        except Refused as refusal:
            self.audit.record("refused", request_id, user=audit.clip(str(user)), reason=str(refusal))
            return Reply(request_id, False, f"refused: {refusal}")

    def cancel_all(self, user: str) -> list[str]:
        """Cancel every run of this process (the command line's Ctrl-C); returns their ids."""
        with self._active_lock:
            runs = list(self._active.values())
        for run in runs:
            run.cancel.set()
            self.audit.record("cancel", run.run_id, user=user, run=run.run_id)
        return [run.run_id for run in runs]

    def _authorise(self, user: str, command: Command) -> tuple[str, ...]:
        policy = self.config.policy
        action = command.action.name
        if not policy.may_run(user, action):
            raise Refused(f"you may not run {action}")
        try:
            inventory = self.inventory.get()
        except InventoryError as error:
            raise Refused(f"the inventory could not be read ({error})") from None
        if command.host is None:
            hosts = tuple(sorted(host for host in inventory.hosts if policy.allows(user, action, host)))
            if not hosts:
                raise Refused(f"you may run {action} on no host of group {self.config.inventory_group}")
            return hosts
        if command.host in inventory.group_names:
            raise Refused(f"{command.host!r} is an inventory group; name one host")
        if command.host not in inventory.hosts:
            raise Refused(f"unknown host {command.host!r}: not in inventory group "
                          f"{self.config.inventory_group}")
        if not policy.allows(user, action, command.host):
            raise Refused(f"you may not run {action} on {command.host}")
        return (command.host,)

    def _cancel(self, request_id: str, user: str, command: Command) -> Reply:
        host = command.host
        with self._active_lock:
            run = next((run for run in self._active.values() if host in run.hosts), None)
        if run is None:
            raise Refused(f"no run of this bot is in progress on {host}")
        if run.user != user and not self.config.policy.allows(user, "cancel", host):
            raise Refused(f"you may cancel only your own runs on {host}")
        run.cancel.set()
        self.audit.record("cancel", request_id, user=user, run=run.run_id)
        return Reply(request_id, True,
                     f"cancel requested for run {run.run_id} ({run.command.describe()} by {run.user})")

    def _run(self, request_id: str, user: str, command: Command, hosts: tuple[str, ...],
             on_progress: ProgressCallback | None) -> Reply:
        playbook = self.config.playbooks_dir / command.action.playbook
        if not playbook.is_file():
            raise Refused(f"{command.action.name} is not available: {playbook.name} is not installed")
        holder = {"run": request_id, "user": user, "action": command.action.name,
                  "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.locks.hold(hosts, holder))
            except HostBusy as busy:
                raise Refused(str(busy)) from None
            active = ActiveRun(request_id, user, command, hosts, threading.Event())
            with self._active_lock:
                self._active[request_id] = active
            held.callback(self._forget, request_id)
            summary = self._execute_run(active, playbook, on_progress)
        return Reply(request_id, True, summary.text(), summary)

    def _forget(self, run_id: str) -> None:
        with self._active_lock:
            self._active.pop(run_id, None)

    def _execute_run(self, active: ActiveRun, playbook, on_progress) -> RunSummary:
        command = active.command
        run = PlaybookRun(
            run_id=active.run_id,
            playbook=playbook,
            inventory=self.config.inventory,
            limit=active.hosts,
            extravars=command.extravars(),
            environment=self.config.environment,
            secrets={name: self._secret_source[name] for name in self.config.secrets
                     if name in self._secret_source},
            runs_dir=self.config.runs_dir,
            job_timeout=self.config.job_timeout,
        )
        self.audit.record("started", active.run_id, user=active.user, command=command.describe(),
                          playbook=playbook.name, hosts=list(active.hosts), extravars=run.extravars)
        recorder = EventRecorder(on_progress)
        started = time.monotonic()
        try:
            status, rc = self._execute(run, recorder, active.cancel)
        except Exception as error:  # pylint: disable=broad-exception-caught
            # ansible-runner could not start or broke: report it like a failed run.
            status, rc = "error", None
            recorder.failures.append(f"ansible-runner: {type(error).__name__}: {error}")
        summary = RunSummary(
            run_id=active.run_id,
            command=command.describe(),
            status=status,
            rc=rc,
            duration_s=time.monotonic() - started,
            hosts=recorder.host_summaries(active.hosts, status),
            bench=tuple(recorder.bench[host] for host in active.hosts if host in recorder.bench),
            probes=tuple(recorder.probes[host] for host in active.hosts if host in recorder.probes),
            failure=recorder.failure(status),
        )
        self.audit.record("finished", active.run_id, user=active.user, **summary.as_dict())
        return summary

"""The front a chat bot calls: ``ChatOps.handle(user, text, on_progress)``.

Every request goes through the same gates, in order, before anything runs: the grammar, the
action grant, the inventory, the host grant, the host lock. A request refused at any gate gets
a one-line reason, and the audit log gets the request and its outcome: the refusal, the error,
the cancel, or the run (``started``, then ``finished`` from the run's keeper).

Runs live in keeper processes (``runs.py``) that outlive the bot. ``runs()`` and
``orphaned_runs()`` list the runs that hold hosts (the orphans are those whose bot is gone),
``cancel HOST`` stops any of them, and ``shutdown()`` is what a bot does on SIGTERM.
"""
from __future__ import annotations

import datetime
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import audit
from .commands import ACTIONS, HELP, Command, Refused, grammar, parse
from .config import Config, load_config
from .inventory import InventoryCache, InventoryError
from .locks import HeldLock, HostBusy, HostLocks
from .masking import Masker
from .runs import (PROGRESS_DRAIN_S, Executor, Keeper, PlaybookRun, RunGroup, conduct,
                   is_alive, process_identity, remove_run_dirs, stop_leftover_processes)
from .secrets import find_secrets
from .summary import Progress, ProgressRelay, RunSummary

USER_LIMIT = 128
# How long (seconds) a keeper asked to cancel may take before its processes are killed.
KEEPER_STOP_TIMEOUT_S = 30
ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class Reply:
    """What the bot answers: ``text`` is the refusal, the acknowledgement or the summary."""

    request_id: str
    accepted: bool
    text: str
    summary: RunSummary | None = None


@dataclass(frozen=True)
class RunInfo:
    """A run that holds hosts, as its lock files describe it."""

    run_id: str
    user: str
    action: str
    command: str
    hosts: tuple[str, ...]
    since: str
    keeper: Mapping[str, int] | None
    # Its bot process is gone: nobody relays its progress; it still finishes and is audited.
    orphaned: bool
    # The run's own cgroup (runs.RunGroup), when its keeper could make one.
    cgroup: str | None = None

    @classmethod
    def from_holder(cls, holder: Mapping[str, object], orphaned: bool,
                    hosts: tuple[str, ...] | None = None) -> RunInfo:
        """From a lock file's holder; ``hosts``: those it holds now (default: all it took)."""
        if hosts is None:
            hosts = tuple(str(host) for host in holder.get("hosts") or ())
        return cls(str(holder.get("run")), str(holder.get("user", "?")), str(holder.get("action", "?")),
                   str(holder.get("command", holder.get("action", "?"))), hosts,
                   str(holder.get("since", "?")), holder.get("keeper"), orphaned,
                   holder.get("cgroup") if isinstance(holder.get("cgroup"), str) else None)

    def describe(self) -> str:
        text = f"run {self.run_id}: {self.command} by {self.user} since {self.since}"
        if self.orphaned:
            text += " (orphaned: the bot that started it is gone; cancel stops it)"
        return text


@dataclass(frozen=True)
class Request:
    """A request that passed the gates that need no host lock (``ChatOps.admit``): its user
    may run its action on ``hosts`` (none for ``cancel``, authorised when it is carried out)."""

    request_id: str
    user: str
    command: Command
    hosts: tuple[str, ...]

    @property
    def runs_playbook(self) -> bool:
        return self.command.action.playbook is not None


class ActiveRun:
    """A run this bot started and still waits for."""

    def __init__(self, run_id: str, user: str, command: Command, hosts: tuple[str, ...]):
        self.run_id, self.user, self.command, self.hosts = run_id, user, command, hosts
        self.cancel = threading.Event()
        self.done = threading.Event()
        self._keeper: Keeper | None = None

    def attach(self, keeper: Keeper) -> None:
        self._keeper = keeper
        if self.cancel.is_set():  # canceled while the keeper was starting
            keeper.stop()

    def stop(self) -> None:
        self.cancel.set()
        if self._keeper is not None:
            self._keeper.stop()


class ChatOps:
    def __init__(self, config: Config, execute: Executor | None = None,
                 secret_source: Mapping[str, str] | None = None):
        """``execute`` runs a playbook in this process instead of in a keeper process (tests;
        such runs end with the bot); ``secret_source`` holds the secret values named in the
        configuration (default: this process's environment, or the unit's credentials: secrets.py);
        a named secret it lacks is a ConfigError.

        Starting closes the runs that a dead keeper left (audited as ``lost``) and removes
        stale run directories; ``recovered`` lists those runs."""
        self.config = config
        self._secrets = find_secrets(config.secrets, os.environ if secret_source is None else secret_source)
        self.masker = Masker(self._secrets.values())
        self.audit = audit.AuditLog(config.audit_log, self.masker)
        self.locks = HostLocks(config.lock_dir)
        self.inventory = InventoryCache(config.inventory, config.inventory_group,
                                        config.environment, config.inventory_cache_seconds)
        self._execute = execute
        self._identity = process_identity(os.getpid())
        self._active: dict[str, ActiveRun] = {}
        self._active_lock = threading.Lock()
        self._closing = False
        self.recovered = self.recover()

    @classmethod
    def from_config_file(cls, path: str | os.PathLike[str]) -> ChatOps:
        return cls(load_config(path))

    # -- requests --------------------------------------------------------------------------

    def handle(self, user: str, text: str, on_progress: ProgressCallback | None = None) -> Reply:
        """Parse, authorise and run one chat command. Blocks until a run ends: call it from a
        worker thread; ``cancel HOST`` from another thread stops the run."""
        request = self.admit(user, text)
        return request if isinstance(request, Reply) else self.carry_out(request, on_progress)

    def admit(self, user: str, text: str) -> Request | Reply:
        """The gates that need no host lock: the user, the grammar, the grants, the inventory.
        Records the request; returns the authorised request, or the refusal (recorded too).
        Nothing is taken or started: a bot calls it before it spends anything on the request."""
        request_id = uuid.uuid4().hex[:12]

        def authorise() -> Request:
            self.audit.record("request", request_id, user=audit.clip(str(user)),
                              text=audit.clip(str(text)), length=len(str(text)))
            if not isinstance(user, str) or not 0 < len(user) <= USER_LIMIT or not user.isprintable():
                raise Refused("the requesting user is not a valid chat identity")
            command = parse(text)
            self._refuse_if_closing()
            # cancel is authorised when it is carried out; help tells each user their own grants.
            hosts = () if command.action.name in ("cancel", HELP.name) else self._authorise(user, command)
            return Request(request_id, user, command, hosts)

        return self._outcome(request_id, user, authorise)

    def decline(self, user: str, text: str, reason: str) -> Reply:
        """Refuse a request unread (a bot's per-user limits): recorded, with its outcome."""
        request_id = uuid.uuid4().hex[:12]

        def refuse() -> Reply:
            self.audit.record("request", request_id, user=audit.clip(str(user)),
                              text=audit.clip(str(text)), length=len(str(text)))
            raise Refused(reason)

        return self._outcome(request_id, user, refuse)

    def refuse(self, request: Request, reason: str) -> Reply:
        """Refuse an admitted request (a bot with every run worker busy): its outcome record."""
        def refuse() -> Reply:
            raise Refused(reason)

        return self._outcome(request.request_id, request.user, refuse)

    def carry_out(self, request: Request, on_progress: ProgressCallback | None = None) -> Reply:
        """The admitted request: a cancel, or a run (host locks, then the playbook). Blocks until
        a run ends."""
        def act() -> Reply:
            self._refuse_if_closing()
            if request.command.action.name == "cancel":
                return self._cancel(request.request_id, request.user, request.command)
            if request.command.action is HELP:
                self.audit.record("help", request.request_id, user=audit.clip(request.user))
                return Reply(request.request_id, True, self.help_text(request.user))
            return self._run(request.request_id, request.user, request.command, request.hosts,
                             on_progress)

        return self._outcome(request.request_id, request.user, act)

    def help_text(self, user: str) -> str:
        """The command grammar, then what this user may run where, from the configuration's
        grants (nobody else's)."""
        lines = ["commands ([...] is optional):", *(f"  {usage}" for usage in grammar())]
        policy = self.config.policy
        grants = policy.grants_of(user)
        if not grants:
            return "\n".join(lines + ["you may run no command here: ask the bot's operator for a grant"])
        groups = sorted(policy.groups_of(user))
        lines.append("you may run" + (f" (groups {', '.join(groups)})" if groups else "") + ":")
        for grant in grants:
            actions = ", ".join(name for name in ACTIONS if name in grant.actions)
            lines.append(f"  {actions} on hosts {', '.join(grant.host_patterns)} "
                         f"of inventory group {self.config.inventory_group}")
        return "\n".join(lines)

    def _refuse_if_closing(self) -> None:
        if self._closing:
            raise Refused("the bot is shutting down: try again when it is back")

    def _outcome(self, request_id: str, user: str, step: Callable[[], object]):
        """``step()``'s result; a refusal or an error instead becomes the request's outcome
        record and a masked reply."""
        try:
            result = step()
        except Refused as refusal:
            self.audit.record("refused", request_id, user=audit.clip(str(user)), reason=str(refusal))
            result = Reply(request_id, False, f"refused: {refusal}")
        except Exception as error:  # pylint: disable=broad-exception-caught
            # Whatever broke (a lock folder gone, a full disk), the request gets an outcome.
            message = f"{type(error).__name__}: {error}"
            try:
                self.audit.record("error", request_id, user=audit.clip(str(user)), error=message)
            except OSError:
                pass  # the audit log itself is what failed; the reply still says so
            result = Reply(request_id, False, f"error: the request could not be carried out ({message})")
        if isinstance(result, Reply):
            return Reply(result.request_id, result.accepted, self.masker.text(result.text), result.summary)
        return result

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

    # -- runs --------------------------------------------------------------------------------

    def _run(self, request_id: str, user: str, command: Command, hosts: tuple[str, ...],
             on_progress: ProgressCallback | None) -> Reply:
        playbook = self.config.playbooks_dir / command.action.playbook
        if not playbook.is_file():
            raise Refused(f"{command.action.name} is not available: {playbook.name} is not installed")
        holder = {"run": request_id, "user": user, "action": command.action.name,
                  "command": command.describe(), "hosts": list(hosts), "bot": self._identity,
                  "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        try:
            held = self.locks.acquire(hosts, holder)
        except HostBusy as busy:
            orphaned = self._is_orphan(busy.holder)
            raise Refused(str(busy) + ("; its bot is gone: cancel stops it" if orphaned else "")) from None
        run = PlaybookRun(
            run_id=request_id, playbook=playbook, inventory=self.config.inventory, limit=hosts,
            extravars=command.extravars(), environment=self.config.environment,
            secrets=self._secrets, runs_dir=self.config.runs_dir, job_timeout=self.config.job_timeout)
        active = ActiveRun(request_id, user, command, hosts)
        with self._active_lock:
            self._active[request_id] = active
        try:
            try:
                # A lost run may have held several of these hosts: it is closed once.
                lost = {lock.previous["run"]: lock.previous for lock in held if lock.previous.get("run")}
                for previous in lost.values():
                    self._close_lost(RunInfo.from_holder(previous, True), "lost",
                                     "its keeper died before the run finished")
                self.audit.record("started", request_id, user=user, command=command.describe(),
                                  playbook=playbook.name, hosts=list(hosts), extravars=run.extravars)
            except BaseException:
                self._release(held)
                raise
            try:
                if self._execute is None:
                    summary = self._run_in_keeper(active, run, holder, held, on_progress)
                else:
                    summary = self._run_here(active, run, held, on_progress)
            except Exception as error:  # pylint: disable=broad-exception-caught
                # A started run always gets its finished record (a keeper that could not start).
                self._release(held)
                summary = RunSummary(request_id, command.describe(), "error", None, 0.0,
                                     failure=self.masker.text(f"{type(error).__name__}: {error}"))
                self.audit.record("finished", request_id, user=user, **summary.as_dict())
        finally:
            with self._active_lock:
                self._active.pop(request_id, None)
            active.done.set()
        return Reply(request_id, True, summary.text(), summary)

    def _release(self, held: list[HeldLock]) -> None:
        """Free the locks this process still holds itself (not those handed to a keeper)."""
        for lock in held:
            if lock.descriptor >= 0:
                self.locks.release(lock)
                lock.descriptor = -1

    def _run_here(self, active: ActiveRun, run: PlaybookRun, held: list[HeldLock],
                  on_progress: ProgressCallback | None) -> RunSummary:
        def host_done(host: str) -> None:
            self._release([lock for lock in held if lock.host == host])

        relay = ProgressRelay(on_progress) if on_progress is not None else None
        try:
            return conduct(run, active.command.describe(), active.user, self._execute, self.audit,
                           relay, active.cancel, host_done, active.command.action.host_done_after)
        finally:
            self._release(held)
            if relay is not None:
                relay.close(PROGRESS_DRAIN_S)

    def _run_in_keeper(self, active: ActiveRun, run: PlaybookRun, holder: Mapping[str, object],
                       held: list[HeldLock], on_progress: ProgressCallback | None) -> RunSummary:
        orders = {"run": run.as_dict(), "user": active.user, "command": active.command.describe(),
                  "holder": holder, "audit_log": str(self.config.audit_log),
                  "lock_dir": str(self.config.lock_dir),
                  "locks": {lock.host: lock.descriptor for lock in held},
                  "host_done_after": active.command.action.host_done_after}
        keeper = Keeper(orders, [lock.descriptor for lock in held])
        # The keeper holds the locks now; this process lets go of its copies.
        for lock in held:
            os.close(lock.descriptor)
            lock.descriptor = -1
        active.attach(keeper)
        relay = ProgressRelay(on_progress) if on_progress is not None else None
        summary = None
        for message in keeper.messages():
            if isinstance(message, RunSummary):
                summary = message
            elif relay is not None:
                relay(message)
        status = keeper.wait()
        if relay is not None:
            relay.close(PROGRESS_DRAIN_S)
        if summary is None:
            # The lock files hold what the keeper added (its cgroup).
            holder = next((state.holder for state in self.locks.states()
                           if state.holder.get("run") == run.run_id), holder)
            return self._close_lost(RunInfo.from_holder(holder, False), "lost",
                                    f"its keeper process ended with status {status} before the run finished")
        return summary

    def _close_lost(self, run: RunInfo, status: str, reason: str) -> RunSummary:
        """Close a run whose keeper is gone: kill what is left of it, audit its outcome (unless
        it already has one: then that is the summary), clear its lock files and remove its run
        directory."""
        stop_leftover_processes(run.run_id, RunGroup.named(run.cgroup))
        summary = RunSummary(run.run_id, run.command, status, None, 0.0, failure=f"the run was {status}: {reason}")
        # Its keeper may have recorded the outcome before it died, or another closer found it
        # first (the run's own bot, the next request on one of its hosts, another bot process).
        earlier = self.audit.record("finished", run.run_id, once=True, user=run.user,
                                    hosts_held=list(run.hosts), **summary.as_dict())
        if earlier is not None:
            summary = RunSummary.from_dict(earlier)
        for host in run.hosts:
            self.locks.clear_lost(host, run.run_id)
        held_runs = {state.holder.get("run") for state in self.locks.states() if state.held}
        remove_run_dirs(self.config.runs_dir, held_runs)
        return summary

    def recover(self) -> list[RunInfo]:
        """Close the runs whose keeper died (their locks are free but still name them) and
        remove run directories that no running run owns; returns the runs closed."""
        lost = {state.holder["run"]: RunInfo.from_holder(state.holder, True)
                for state in self.locks.states() if not state.held and state.holder.get("run")}
        for run in lost.values():
            self._close_lost(run, "lost", "its keeper died before the run finished")
        held_runs = {state.holder.get("run") for state in self.locks.states() if state.held}
        remove_run_dirs(self.config.runs_dir, held_runs)
        return list(lost.values())

    def runs(self) -> list[RunInfo]:
        """Every run that holds hosts now, of this bot or another (for a status report)."""
        found: dict[str, tuple[Mapping[str, object], tuple[str, ...]]] = {}
        for state in self.locks.states():
            run_id = state.holder.get("run")
            if state.held and run_id:
                holder, hosts = found.get(run_id, (state.holder, ()))
                found[run_id] = (holder, hosts + (state.host,))
        return [RunInfo.from_holder(holder, self._is_orphan(holder), hosts) for holder, hosts in found.values()]

    def _is_orphan(self, holder: Mapping[str, object]) -> bool:
        return holder.get("bot") != self._identity and not is_alive(holder.get("bot"))

    def orphaned_runs(self) -> list[RunInfo]:
        """The runs whose bot is gone: report them to the room after a restart."""
        return [run for run in self.runs() if run.orphaned]

    # -- cancel and shutdown -------------------------------------------------------------------

    def _cancel(self, request_id: str, user: str, command: Command) -> Reply:
        host = command.host
        run = next((run for run in self.runs() if host in run.hosts), None)
        if run is None:  # a run whose keeper died may have left processes behind
            run = next((RunInfo.from_holder(state.holder, True) for state in self.locks.states()
                        if state.host == host and not state.held and state.holder.get("run")), None)
        # Whether a run is there is told only to its owner and to who may cancel on the host.
        if (run is None or run.user != user) and not self.config.policy.allows(user, "cancel", host):
            raise Refused(f"you may not cancel runs on {host}")
        if run is None:
            raise Refused(f"no run is in progress on {host}")
        self.audit.record("cancel", request_id, user=user, run=run.run_id)
        with self._active_lock:
            active = self._active.get(run.run_id)
        if active is not None:
            active.stop()
            return Reply(request_id, True, f"cancel requested for run {run.run_id} "
                                           f"({run.command} by {run.user})")
        self._stop_foreign(run)
        return Reply(request_id, True, f"canceled {run.describe()}: no process of it remains")

    def _stop_foreign(self, run: RunInfo) -> None:
        """Cancel a run of another bot, dead or alive, through its keeper; kill what is left
        when the keeper is gone or does not finish in time."""
        if is_alive(run.keeper):
            os.kill(run.keeper["pid"], signal.SIGTERM)
        deadline = time.monotonic() + (KEEPER_STOP_TIMEOUT_S if is_alive(run.keeper) else 0)
        while any(self.locks.is_held(host) for host in run.hosts) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop_leftover_processes(run.run_id, RunGroup.named(run.cgroup))
        # A keeper that finished clears the lock files; one that did not, leaves the run to close.
        if any(state.holder.get("run") == run.run_id for state in self.locks.states()):
            self._close_lost(run, "canceled", "its keeper did not finish it; every process of it was killed")

    def cancel_all(self, user: str) -> list[str]:
        """Cancel every run this bot waits for and has not canceled yet (the command line's
        Ctrl-C); returns their ids."""
        with self._active_lock:
            runs = [run for run in self._active.values() if not run.cancel.is_set()]
        for run in runs:
            self.audit.record("cancel", run.run_id, user=user, run=run.run_id)
            run.stop()
        return [run.run_id for run in runs]

    def shutdown(self, hand_over: bool = False, timeout: float = KEEPER_STOP_TIMEOUT_S) -> list[str]:
        """What a bot does on SIGTERM: accept no more requests, then either cancel its runs and
        wait (at most ``timeout`` s) until they have ended and their ``handle`` calls returned,
        or (``hand_over``) leave them to their keepers, which finish and audit them alone; a
        bot started later reports them as orphaned. Returns the ids of the runs concerned."""
        self._closing = True
        with self._active_lock:
            runs = list(self._active.values())
        for run in runs:
            self.audit.record("handed_over" if hand_over else "cancel", run.run_id, user="shutdown",
                              run=run.run_id)
            if not hand_over:
                run.stop()
        if not hand_over:
            deadline = time.monotonic() + timeout
            for run in runs:
                run.done.wait(max(0.0, deadline - time.monotonic()))
        return [run.run_id for run in runs]

"""The long-running bot: ``pro6000-chatops serve --config chatops.yml``.

One asyncio loop talks to the chat system; each request's ``ChatOps`` calls run in a thread
of its own. A request spends nothing before it is authorised: first the sender's limits
(``bot.user_requests_in_flight``, ``bot.user_requests_per_minute``, counted in memory), then
``ChatOps.admit`` (grammar, grants, inventory), and only then does a request that runs a
playbook take one of the ``bot.run_workers`` and get its ``received:`` reply.

The workers are shared so that nobody is starved: read-only runs (``status``, ``bench``) take
at most ``run_workers - 1``, so one worker is always left to the runs that change hosts
(``deploy``, ``tune``) and a flood of reads never refuses an operator's deploy; and one user
holds at most ``user_requests_in_flight`` requests, at most ``run_workers - 2`` (checked when
the configuration is read), so whatever one user sends, another user's read still gets a
worker. A flood of requests from one user, authorised or not, thus never takes every worker or
a turn from another user; every request gets one outcome record in the audit log and, when
refused, one reply. ``cancel``, ``help`` and text that does not parse never take a run worker,
so a cancel is answered while every run worker is busy. ``help`` answers with the grammar, the
asker's own grants and these per-user limits. Progress goes from the run's thread to the
loop without waiting, and is posted in batches at most every ``bot.progress_interval_seconds``.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from .chat.base import ChatAdapter, ChatCommand
from .chat.matrix import ChatError, MatrixAdapter, MatrixSettings
from .commands import HELP, Refused, parse
from .config import Config, ConfigError, load_config
from .secrets import find_secrets
from .service import ChatOps, Reply
from .summary import Progress

logger = logging.getLogger(__name__)

_KEYS = {"run_workers", "progress_interval_seconds", "on_stop", "user_requests_in_flight",
         "user_requests_per_minute"}
# What SIGTERM does to the runs in progress: cancel them, or leave them to their keeper
# processes, which finish them (a bot started later reports them).
ON_STOP = ("cancel", "hand_over")
# Lines of progress in one chat message; the rest is counted, not shown.
PROGRESS_LINES = 40
# The window of bot.user_requests_per_minute (seconds).
RATE_WINDOW_S = 60.0
# Past this many senders, those with nothing in the window are forgotten (bounded memory).
USERS_TRACKED = 1024


def _whole_number(raw: Mapping[str, object], key: str, default: int, high: int, low: int = 1,
                  why: str = "") -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(f"bot.{key} must be a whole number from {low} to {high}{why}")
    return value


# Run workers that no single user can take: the one read-only runs never take (kept for runs
# that change hosts), and one left to the other users' reads.
WORKERS_KEPT_FROM_ONE_USER = 2


@dataclass(frozen=True)
class BotSettings:
    run_workers: int = 4
    progress_interval_seconds: float = 5.0
    on_stop: str = "cancel"
    # One user's requests in progress at once (runs included; cancel and help never count), at most
    # run_workers - WORKERS_KEPT_FROM_ONE_USER ...
    user_requests_in_flight: int = 2
    # ... and in the last minute (every request): a flood from one account costs one reply
    # and one audit record per request, never a worker or another user's turn.
    user_requests_per_minute: int = 20

    @classmethod
    def from_mapping(cls, raw: object) -> BotSettings:
        if not isinstance(raw, Mapping):
            raise ConfigError("bot must be a mapping with run_workers, progress_interval_seconds, on_stop")
        unknown = set(raw) - _KEYS
        if unknown:
            raise ConfigError(f"bot has unknown keys: {', '.join(sorted(unknown))}")
        workers = _whole_number(raw, "run_workers", cls.run_workers, 64, WORKERS_KEPT_FROM_ONE_USER + 1,
                                ": one worker is kept for deploy and tune, and one user's requests "
                                "must leave another to the reads of other users")
        in_flight = _whole_number(raw, "user_requests_in_flight", cls.user_requests_in_flight,
                                  workers - WORKERS_KEPT_FROM_ONE_USER,
                                  why=f" (run_workers {workers} less {WORKERS_KEPT_FROM_ONE_USER}): one "
                                      "user's requests must leave a worker to deploy and tune and "
                                      "another to the reads of other users")
        per_minute = _whole_number(raw, "user_requests_per_minute", cls.user_requests_per_minute, 600)
        interval = raw.get("progress_interval_seconds", cls.progress_interval_seconds)
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or not 0.1 <= interval <= 600:
            raise ConfigError("bot.progress_interval_seconds must be a number from 0.1 to 600")
        on_stop = raw.get("on_stop", cls.on_stop)
        if on_stop not in ON_STOP:
            raise ConfigError(f"bot.on_stop must be one of {', '.join(ON_STOP)}")
        return cls(workers, float(interval), on_stop, in_flight, per_minute)


class UserLimits:
    """Per-user admission: requests in progress, and requests in the last minute."""

    def __init__(self, in_flight: int, per_minute: int, clock: Callable[[], float] = time.monotonic):
        self._in_flight_limit = in_flight
        self._per_minute_limit = per_minute
        self._clock = clock
        self._in_flight: dict[str, int] = {}
        self._recent: dict[str, deque[float]] = {}

    def take(self, user: str, in_flight: bool) -> str | None:
        """Count a request of ``user`` (in flight too, when ``in_flight``); or, over a limit,
        count nothing and return the reason."""
        now = self._clock()
        if len(self._recent) > USERS_TRACKED:
            self._forget_idle(now)
        recent = self._recent.setdefault(user, deque())
        while recent and recent[0] <= now - RATE_WINDOW_S:
            recent.popleft()
        if len(recent) >= self._per_minute_limit:
            wait = recent[0] + RATE_WINDOW_S - now
            return (f"you sent {len(recent)} requests in the last minute, the most this bot takes "
                    f"from one user: try again in {max(1, round(wait))} s")
        if in_flight and self._in_flight.get(user, 0) >= self._in_flight_limit:
            return (f"you have {self._in_flight[user]} requests in progress, the most this bot "
                    "takes from one user at once: try again when one has finished")
        recent.append(now)
        if in_flight:
            self._in_flight[user] = self._in_flight.get(user, 0) + 1
        return None

    def release(self, user: str) -> None:
        """A request counted in flight has ended."""
        self._in_flight[user] -= 1
        if not self._in_flight[user]:
            del self._in_flight[user]

    def _forget_idle(self, now: float) -> None:
        horizon = now - RATE_WINDOW_S
        for user in [user for user, recent in self._recent.items() if not recent or recent[-1] <= horizon]:
            del self._recent[user]


def read_sections(path: str | os.PathLike[str]) -> tuple[Mapping[str, object], Path]:
    """The bot's own sections of the configuration file (``matrix``, ``bot``) and its folder;
    ``load_config`` validates the rest of the file."""
    path = Path(path).resolve()
    with open(path, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping")
    return raw, path.parent


class ProgressRelay:
    """Collects a run's progress lines (from any thread, without waiting) and posts them."""

    def __init__(self, bot: Bot, command: ChatCommand):
        self._bot = bot
        self._command = command
        self._lines: list[str] = []
        self._task = asyncio.create_task(self._post_periodically())

    def push(self, progress: Progress) -> None:
        """Called in the run's thread."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the bot is stopping
            self._bot.loop.call_soon_threadsafe(self._lines.append, progress.text)

    async def _post_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._bot.settings.progress_interval_seconds)
            await self._flush()

    async def _flush(self) -> None:
        lines, self._lines = self._lines, []
        if not lines:
            return
        text = "\n".join(lines[:PROGRESS_LINES])
        if len(lines) > PROGRESS_LINES:
            text += f"\n... and {len(lines) - PROGRESS_LINES} more steps"
        await self._bot.adapter.reply(self._command, text)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._flush()


class Bot:
    def __init__(self, ops: ChatOps, adapter: ChatAdapter, settings: BotSettings):
        self.ops = ops
        self.adapter = adapter
        self.settings = settings
        self.loop: asyncio.AbstractEventLoop | None = None
        self._running = 0
        self._reading = 0  # the runs in progress that change no host
        self.limits = UserLimits(settings.user_requests_in_flight, settings.user_requests_per_minute)
        self._requests: dict[asyncio.Task, ChatCommand] = {}

    async def serve(self, stop: asyncio.Event) -> None:
        """Connect, answer commands until ``stop`` is set, then stop the runs and return."""
        self.loop = asyncio.get_running_loop()
        await self.adapter.connect()
        await self._report_runs_left_behind()
        listening = asyncio.create_task(self.adapter.listen(self._on_command))
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({listening, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening  # raises what ended it, if not the cancel
            await self._stop_runs()
            await self.adapter.close()

    async def _report_runs_left_behind(self) -> None:
        """Tell the rooms about the runs of a bot that is gone: those still in progress (an
        authorised ``cancel HOST`` stops them) and those whose keeper died (closed at start)."""
        lines = [run.describe() for run in await asyncio.to_thread(self.ops.orphaned_runs)]
        lines += [f"run {run.run_id}: {run.command} by {run.user} since {run.since}: lost, its "
                  "keeper process died before it finished; closed (the audit log has it)"
                  for run in self.ops.recovered]
        if lines:
            await self.adapter.announce("started; runs of the bot before me:\n" + "\n".join(lines))

    async def _stop_runs(self) -> None:
        hand_over = self.settings.on_stop == "hand_over"
        stopped = await asyncio.to_thread(self.ops.shutdown, hand_over)
        if stopped:
            logger.info("stopping: %s runs %s", "handed over" if hand_over else "canceled", ", ".join(stopped))
        if not hand_over:
            # The canceled runs' summaries are posted before the bot exits.
            if self._requests:
                await asyncio.wait(set(self._requests))
            return
        for task, command in list(self._requests.items()):
            task.cancel()
            await self.adapter.reply(command, "the bot is stopping: this run goes on without it, "
                                              "and the bot reports it when it is back")

    async def _on_command(self, command: ChatCommand) -> None:
        task = asyncio.create_task(self._answer(command))
        self._requests[task] = command
        task.add_done_callback(self._requests.pop)

    async def _answer(self, command: ChatCommand) -> None:
        try:
            await self._run_request(command)
        except asyncio.CancelledError:
            raise
        except Exception:  # pylint: disable=broad-exception-caught
            # One broken request must not stop the bot, nor leave its sender without an answer.
            logger.exception("request %s from %s failed", command.event_id, command.sender)
            await self.adapter.reply(command, "error: the bot failed on this request; its log has the details")

    async def _run_request(self, command: ChatCommand) -> None:
        try:
            action = parse(command.text).action
        except Refused:
            action = None  # admit() refuses it again, with the reason, and audits it
        # cancel and help run nothing: they are answered at once and never wait for a worker.
        in_flight = action is None or action.playbook is not None
        limited = self.limits.take(command.sender, in_flight)
        if limited is not None:
            reply = await self._in_thread(self.ops.decline, command.sender, command.text, limited)
            await self.adapter.reply(command, reply.text)
            return
        try:
            await self._admitted(command)
        finally:
            if in_flight:
                self.limits.release(command.sender)

    async def _admitted(self, command: ChatCommand) -> None:
        request = await self._in_thread(self.ops.admit, command.sender, command.text)
        if isinstance(request, Reply):
            await self.adapter.reply(command, request.text)
            return
        if not request.runs_playbook:
            reply = await self._in_thread(self.ops.carry_out, request, None)
            text = reply.text
            if request.command.action is HELP:
                text += "\n" + self._limits_text()
            await self.adapter.reply(command, text)
            return
        reads = not request.command.action.changes_hosts
        busy = self._workers_busy(reads)
        if busy is not None:
            reply = await self._in_thread(self.ops.refuse, request, busy)
            await self.adapter.reply(command, reply.text)
            return
        self._running += 1
        self._reading += reads
        relay = ProgressRelay(self, command)
        try:
            # The run starts now; its acknowledgement is posted meanwhile.
            outcome = self._in_thread(self.ops.carry_out, request, relay.push)
            try:
                await self.adapter.reply(command, f"received: {command.text}")
            except Exception:  # pylint: disable=broad-exception-caught
                # A lost acknowledgement must not lose the run's summary.
                logger.exception("request %s: the acknowledgement could not be posted", command.event_id)
            reply = await outcome
        finally:
            self._running -= 1
            self._reading -= reads
            await relay.close()
        await self.adapter.reply(command, reply.text)

    def _limits_text(self) -> str:
        """The per-user limits, the same for every user: the end of a help answer."""
        return (f"your limits: requests in progress at once {self.settings.user_requests_in_flight} "
                f"(cancel and help never count); requests a minute {self.settings.user_requests_per_minute}")

    def _workers_busy(self, reads: bool) -> str | None:
        """Why no worker is free for a run (``reads``: one that changes no host), or None."""
        if self._running >= self.settings.run_workers:
            return (f"{self._running} runs are in progress, the most this bot runs at once: "
                    "try again when one has finished")
        if reads and self._reading >= self.settings.run_workers - 1:
            return (f"{self._reading} read-only runs are in progress, the most this bot runs at once "
                    "(the last worker is kept for deploy and tune): try again when one has finished")
        return None

    def _in_thread(self, function, *args) -> asyncio.Future:
        """Call ``function`` in a thread of its own: a cancel never waits behind a run. A daemon
        thread, so that a bot handing its runs over exits without waiting for them."""
        future = self.loop.create_future()

        def settle(result=None, error=None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def work() -> None:
            try:
                outcome = {"result": function(*args)}
            except Exception as error:  # pylint: disable=broad-exception-caught
                outcome = {"error": error}
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self.loop.call_soon_threadsafe(lambda: settle(**outcome))

        threading.Thread(target=work, name="chatops-request", daemon=True).start()
        return future


def load_settings(config_path: str) -> tuple[Config, MatrixSettings, BotSettings]:
    """Read and validate the whole configuration file; changes nothing."""
    raw, base = read_sections(config_path)
    if "matrix" not in raw:
        raise ConfigError("matrix is required to serve (the chat server to connect to)")
    return (load_config(config_path), MatrixSettings.from_mapping(raw["matrix"], base),
            BotSettings.from_mapping(raw.get("bot", {})))


def check(config_path: str) -> int:
    """``serve --check``: 0 when the configuration is valid and every secret it names is
    found (secrets.py), else 2 with the reason."""
    try:
        config, _matrix, _settings = load_settings(config_path)
        find_secrets(config.secrets, os.environ)
    except (OSError, ConfigError, yaml.YAMLError) as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    print(f"{config_path}: the configuration is valid")
    return 0


def serve(config_path: str) -> int:
    """Run the bot until SIGTERM or SIGINT; returns the exit status (2: configuration error)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config, matrix_settings, settings = load_settings(config_path)
        ops = ChatOps(config)
    except (OSError, ConfigError, yaml.YAMLError) as error:
        logger.error("configuration error: %s", error)
        return 2
    adapter = MatrixAdapter(matrix_settings)

    async def main() -> None:
        stop = asyncio.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(number, stop.set)
        await Bot(ops, adapter, settings).serve(stop)

    try:
        asyncio.run(main())
    except (ChatError, ConfigError) as error:
        logger.error("%s", error)
        return 1
    logger.info("stopped")
    return 0

"""The long-running bot: ``pro6000-chatops serve --config chatops.yml``.

One asyncio loop talks to the chat system; each request's ``ChatOps.handle`` runs in a thread
of its own. At most ``bot.run_workers`` requests that run a playbook are in progress at once;
the rest (``cancel``, text that does not parse) is never counted against them, so a cancel is
answered while every run worker is busy. Progress goes from the run's thread to the loop
without waiting, and is posted in batches at most every ``bot.progress_interval_seconds``.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from .chat.base import ChatAdapter, ChatCommand
from .chat.matrix import ChatError, MatrixAdapter, MatrixSettings
from .commands import Refused, parse
from .config import Config, ConfigError, load_config
from .service import ChatOps
from .summary import Progress

logger = logging.getLogger(__name__)

_KEYS = {"run_workers", "progress_interval_seconds", "on_stop"}
# What SIGTERM does to the runs in progress: cancel them, or leave them to their keeper
# processes, which finish them (a bot started later reports them).
ON_STOP = ("cancel", "hand_over")
# Lines of progress in one chat message; the rest is counted, not shown.
PROGRESS_LINES = 40


@dataclass(frozen=True)
class BotSettings:
    run_workers: int = 4
    progress_interval_seconds: float = 5.0
    on_stop: str = "cancel"

    @classmethod
    def from_mapping(cls, raw: object) -> BotSettings:
        if not isinstance(raw, Mapping):
            raise ConfigError("bot must be a mapping with run_workers, progress_interval_seconds, on_stop")
        unknown = set(raw) - _KEYS
        if unknown:
            raise ConfigError(f"bot has unknown keys: {', '.join(sorted(unknown))}")
        workers = raw.get("run_workers", cls.run_workers)
        if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 64:
            raise ConfigError("bot.run_workers must be a whole number from 1 to 64")
        interval = raw.get("progress_interval_seconds", cls.progress_interval_seconds)
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or not 0.1 <= interval <= 600:
            raise ConfigError("bot.progress_interval_seconds must be a number from 0.1 to 600")
        on_stop = raw.get("on_stop", cls.on_stop)
        if on_stop not in ON_STOP:
            raise ConfigError(f"bot.on_stop must be one of {', '.join(ON_STOP)}")
        return cls(workers, float(interval), on_stop)


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
            action = None  # handle() refuses it again, with the reason, and audits it
        runs_playbook = action is not None and action.playbook is not None
        if runs_playbook and self._running >= self.settings.run_workers:
            await self.adapter.reply(command, f"refused: {self._running} runs are in progress, "
                                              "the most this bot runs at once: try again when one has finished")
            return
        relay = None
        try:
            if runs_playbook:
                self._running += 1
                await self.adapter.reply(command, f"received: {command.text}")
                relay = ProgressRelay(self, command)
            reply = await self._in_thread(self.ops.handle, command.sender, command.text,
                                          relay.push if relay else None)
        finally:
            if runs_playbook:
                self._running -= 1
            if relay is not None:
                await relay.close()
        await self.adapter.reply(command, reply.text)

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
    """``serve --check``: 0 when the configuration is valid, else 2 with the reason."""
    try:
        load_settings(config_path)
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

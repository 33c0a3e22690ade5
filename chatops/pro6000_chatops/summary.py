"""Turn ansible-runner events into progress messages a bot can relay and a final summary.

What reaches chat and the audit log is built here, from the events' structure: play, task and
host names, result states, counts, and the figures of the collection's own modules, each
checked against the shape it must have. Raw task output (a failure's ``msg``, ``stderr``, a
module's return values, ansible-playbook's own output) never does: it can hold any secret a host
or a server knows (a journal excerpt with an API key, a token in a URL), not only those the bot
was told about, so it goes to the bot's log alone (masked), and the failure line names the host
and the task. Names and figures still go through the masker too (names are templates).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .masking import Masker

logger = logging.getLogger(__name__)

BENCH_MODULE = "pro6000.inference.sglang_bench"
PROBE_MODULE = "pro6000.inference.sglang_probe"
PROGRESS_MODULE = "pro6000.inference.work_progress"
SET_FACT = "ansible.builtin.set_fact"
BENCH_SCHEMA_PREFIX = "pro6000.inference.sglang_bench/"
_HOST_RESULTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}
_MESSAGE_LIMIT = 300
# The failure line when a task failed: its message is in the bot's log, not in chat.
WITHHELD = "its message is withheld from chat and the audit log; the bot's log has it"
# What a figure's name or version may look like to be relayed; anything else shows as '?'.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+,()-]{0,79}")


@dataclass(frozen=True)
class Progress:
    """One step of a run: ``kind`` is ``play``, ``task`` or ``host`` (a per-host result)."""

    kind: str
    text: str
    play: str | None = None
    task: str | None = None
    host: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class HostSummary:
    host: str
    status: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class BenchFigures:
    """The smoke benchmark's headline figures for one host (None when not measured)."""

    host: str
    passed: bool | None
    decode_tps_single_stream: float | None
    output_tps: float | None
    concurrency: int | None
    acceptance_length: float | None
    failed_gates: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeFigures:
    """What the server of one host reports serving (from ``sglang_probe``)."""

    host: str
    version: str | None
    algorithm: str | None
    draft_tokens: int | None
    ddtree_budget: int | None
    mismatches: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    command: str
    status: str
    rc: int | None
    duration_s: float
    hosts: tuple[HostSummary, ...] = ()
    bench: tuple[BenchFigures, ...] = ()
    probes: tuple[ProbeFigures, ...] = ()
    failure: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "successful"

    def text(self) -> str:
        """A short answer for chat: one line for the run, one per host, one for a failure."""
        lines = [f"{self.command}: {self.status} in {self.duration_s:.0f} s (run {self.run_id})"]
        probes = {probe.host: probe for probe in self.probes}
        figures = {figure.host: figure for figure in self.bench}
        for host in self.hosts:
            line = f"{host.host}: {host.status}, {host.changed} changed"
            if host.host in probes:
                line += "; " + _probe_text(probes[host.host])
            if host.host in figures:
                line += "; " + _bench_text(figures[host.host])
            lines.append(line)
        if self.failure:
            lines.append(f"failure: {self.failure}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        return {
            "run": self.run_id, "command": self.command, "status": self.status, "rc": self.rc,
            "duration_s": round(self.duration_s, 1),
            "hosts": [host.__dict__ for host in self.hosts],
            "bench": [figure.__dict__ for figure in self.bench],
            "probes": [probe.__dict__ for probe in self.probes],
            "failure": self.failure,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, object]) -> RunSummary:
        """The summary back from ``as_dict`` (as the run's keeper process sends it)."""
        return cls(
            run_id=document["run"], command=document["command"], status=document["status"],
            rc=document["rc"], duration_s=document["duration_s"],
            hosts=tuple(HostSummary(**host) for host in document["hosts"]),
            bench=tuple(BenchFigures(**{**figure, "failed_gates": tuple(figure["failed_gates"])})
                        for figure in document["bench"]),
            probes=tuple(ProbeFigures(**{**probe, "mismatches": tuple(probe["mismatches"])})
                         for probe in document["probes"]),
            failure=document["failure"],
        )


def _number(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "n/a"


def _probe_text(probe: ProbeFigures) -> str:
    served = probe.algorithm or "no speculation"
    if probe.algorithm and probe.draft_tokens is not None:
        served += f" draft {probe.draft_tokens}"
    if probe.ddtree_budget is not None:
        served += f" budget {probe.ddtree_budget}"
    text = f"serves {served} on SGLang {probe.version or '?'}"
    if probe.mismatches:
        text += f" (differs from the inventory: {', '.join(probe.mismatches)})"
    return text


def _bench_text(figure: BenchFigures) -> str:
    verdict = {True: "passed", False: "FAILED", None: "not judged"}[figure.passed]
    text = (f"bench {verdict}: 1 stream {_number(figure.decode_tps_single_stream)} tok/s, "
            f"{figure.concurrency or '?'} streams {_number(figure.output_tps)} tok/s, "
            f"acceptance {_number(figure.acceptance_length)}")
    if figure.failed_gates:
        text += f" (failed gates: {', '.join(figure.failed_gates)})"
    return text


def bench_figures(host: str, document: Mapping[str, object]) -> BenchFigures:
    """Headline figures from a ``sglang_bench`` result document (see the module's RETURN)."""
    levels = [level for level in document.get("levels") or [] if isinstance(level, dict)]
    single = next((level for level in levels if level.get("concurrency") == 1), None)
    widest = max(levels, key=lambda level: level.get("concurrency") or 0, default=None)
    decode = (single or {}).get("decode_tps") or {}
    acceptance = document.get("acceptance") or {}
    gates = [gate for gate in document.get("gates") or [] if isinstance(gate, dict)]
    return BenchFigures(
        host=host,
        passed=document.get("passed") if isinstance(document.get("passed"), bool) else None,
        decode_tps_single_stream=decode.get("p50") if isinstance(decode, dict) else None,
        output_tps=(widest or {}).get("output_tps"),
        concurrency=(widest or {}).get("concurrency"),
        acceptance_length=acceptance.get("value") if isinstance(acceptance, dict) else None,
        failed_gates=tuple(_name(gate.get("name")) or "?" for gate in gates if gate.get("passed") is False),
    )


def probe_figures(host: str, result: Mapping[str, object]) -> ProbeFigures:
    """What ``sglang_probe`` read from the server (see the module's RETURN)."""
    server = result.get("server") if isinstance(result.get("server"), dict) else {}
    speculative = server.get("speculative") if isinstance(server.get("speculative"), dict) else {}
    mismatches = [entry for entry in result.get("mismatches") or [] if isinstance(entry, dict)]
    return ProbeFigures(
        host=host,
        version=_name(server.get("version")),
        algorithm=_name(speculative.get("algorithm")),
        draft_tokens=_whole(speculative.get("num_draft_tokens")),
        ddtree_budget=_whole(speculative.get("ddtree_budget")),
        mismatches=tuple(_name(entry.get("setting")) or "?" for entry in mismatches),
    )


def _size(count: int) -> str:
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def progress_text(host: str, result: Mapping[str, object]) -> str:
    """How far a host's long work has come, from ``work_progress``'s figures (see its RETURN):
    its ``line`` is not relayed, since it can end with a raw log line."""
    label = _label(result.get("label"))
    if result.get("finished") is True:
        return f"{host}: {label}: finished"
    phase = _name(result.get("phase")) or "?"
    figures = result.get("progress") if isinstance(result.get("progress"), dict) else {}
    done, total = _whole(figures.get("done_bytes")), _whole(figures.get("total_bytes"))
    if done is None or total is None:
        elapsed = _whole(result.get("elapsed_s"))
        return f"{host}: {label}: {phase}" + (f", {_duration(elapsed)} elapsed" if elapsed is not None else "")
    text = f"{host}: {label}: {phase} {_size(done)} of {_size(total)}"
    rate, left = _whole(figures.get("rate_bytes_per_s")), _whole(figures.get("eta_s"))
    if rate is not None and left is not None:
        text += f", {_size(rate)}/s, {_duration(left)} left"
    return text


def _label(value: object) -> str:
    """What a role says the work is (a model's name, a build step's sentence): a template of
    the role, shown when it is short printable text."""
    return value if isinstance(value, str) and _LABEL.fullmatch(value) else "?"


def _name(value: object) -> str | None:
    """A name or version reported by a server or module, only when it looks like one."""
    if value is None:
        return None
    return value if isinstance(value, str) and _NAME.fullmatch(value) else "?"


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "..."


def _failure_message(result: Mapping[str, object]) -> str:
    """The raw message of a failed result: for the bot's log only."""
    for key in ("msg", "stderr", "reason"):
        value = result.get(key)
        if isinstance(value, str) and value.strip():
            return _clip(value)
    return "no message"


# The play recap's counters (playbook_on_stats) and the host results that raise each of them
# (ansible-core lib/ansible/executor/stats.py, as the strategy plugins call it).
_RECAP_COUNTER = {"ok": "ok", "changed": "ok", "failed": "failures", "unreachable": "dark",
                  "skipped": "skipped", "failed (ignored)": "ignored"}


@dataclass
class EventRecorder:
    """Consumes ansible-runner events in order; relays progress and keeps what the summary needs.

    ``on_host_done`` is told the host whose result of ``done_module`` (or whose failure) has
    just come in, so that a run can let go of that host before the others are done.
    """

    on_progress: Callable[[Progress], None] | None = None
    masker: Masker = field(default_factory=Masker)
    on_host_done: Callable[[str], None] | None = None
    done_module: str | None = None
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    # The same counters, counted from the host results as they come: a canceled or timed-out
    # run has no recap, and what it changed before it stopped must still be reported.
    counted: dict[str, dict[str, int]] = field(default_factory=dict)
    bench: dict[str, BenchFigures] = field(default_factory=dict)
    probes: dict[str, ProbeFigures] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    last_output: list[str] = field(default_factory=list)

    def __call__(self, event: Mapping[str, object]) -> None:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if not isinstance(data, dict):
            return
        if isinstance(event.get("stdout"), str) and event["stdout"].strip():
            # Kept for the log of failures that happen before any task (syntax errors, bad
            # inventory).
            lines = self.masker.text(event["stdout"]).strip().splitlines()
            self.last_output = (self.last_output + lines)[-5:]
        if kind == "playbook_on_play_start":
            self._emit(Progress("play", f"play: {data.get('play')}", play=data.get("play")))
        elif kind == "playbook_on_task_start":
            self._emit(Progress("task", f"task: {data.get('task')}", play=data.get("play"),
                                task=data.get("task")))
        elif kind in _HOST_RESULTS:
            self._host_result(_HOST_RESULTS[kind], data)
        elif kind == "playbook_on_stats":
            for counter in ("ok", "changed", "failures", "dark", "skipped"):
                for host, count in (data.get(counter) or {}).items():
                    self.stats.setdefault(host, {})[counter] = count

    def _host_result(self, status: str, data: Mapping[str, object]) -> None:
        host = str(data.get("host"))
        task = data.get("task")
        result = data.get("res") if isinstance(data.get("res"), dict) else {}
        # Role smoke probes every replica and then the host's URL in one module run: its
        # ``server`` is the last, what the host serves.
        if status == "ok" and result.get("changed"):
            status = "changed"
        action = data.get("resolved_action")
        # Role smoke takes a passing benchmark that still stands (the same server processes
        # serving the same record) as the host's result: smoke_bench, set from its record.
        standing = ((result.get("ansible_facts") or {}).get("smoke_bench") or {}) if action == SET_FACT else {}
        document = result.get("result") if action == BENCH_MODULE else standing.get("result")
        if isinstance(document, dict) and str(document.get("schema", "")).startswith(BENCH_SCHEMA_PREFIX):
            self.bench[host] = bench_figures(host, document)
        if action == PROBE_MODULE and isinstance(result.get("server"), dict):
            self.probes[host] = probe_figures(host, result)
        text = f"{host}: {status}: {task}"
        if action == PROGRESS_MODULE and status == "ok":
            text = progress_text(host, result)
        ends_host = action == self.done_module
        if status in ("failed", "unreachable"):
            if data.get("ignore_errors"):
                status = "failed (ignored)"
                text = f"{host}: {status}: {task}"
            else:
                logger.warning("%s: %s: %s: %s", host, task, status,
                               self.masker.text(_failure_message(result)))
                self.failures.append(f"{host}: {task}: {status}; {WITHHELD}")
                ends_host = True
        counts = self.counted.setdefault(host, {})
        counter = _RECAP_COUNTER[status]
        counts[counter] = counts.get(counter, 0) + 1
        if status == "changed":
            counts["changed"] = counts.get("changed", 0) + 1
        self._emit(Progress("host", text, play=data.get("play"), task=task, host=host, status=status))
        if ends_host and self.on_host_done is not None:
            self.on_host_done(host)

    def _emit(self, progress: Progress) -> None:
        # Names of plays and tasks are templates: they can hold a secret too.
        if self.on_progress is not None:
            self.on_progress(dataclasses.replace(
                progress, text=self.masker.text(progress.text),
                play=progress.play and self.masker.text(progress.play),
                task=progress.task and self.masker.text(progress.task)))

    def host_summaries(self, hosts: tuple[str, ...], run_status: str) -> tuple[HostSummary, ...]:
        summaries = []
        for host in hosts:
            counts = self.stats.get(host)
            if counts is not None:
                status = "unreachable" if counts.get("dark") else "failed" if counts.get("failures") else "ok"
            elif run_status in ("canceled", "timeout"):
                status, counts = run_status, self.counted.get(host, {})
            elif host in self.counted:
                status, counts = "failed", self.counted[host]
            else:
                summaries.append(HostSummary(host, "not run"))
                continue
            summaries.append(HostSummary(host, status, ok=counts.get("ok", 0),
                                         changed=counts.get("changed", 0),
                                         failed=counts.get("failures", 0),
                                         unreachable=counts.get("dark", 0),
                                         skipped=counts.get("skipped", 0)))
        return tuple(summaries)

    def failure(self, run_status: str) -> str | None:
        if run_status == "successful":
            return None
        if self.failures:
            return self.failures[0]
        if run_status in ("canceled", "timeout"):
            return f"the run was {'canceled' if run_status == 'canceled' else 'stopped: it ran too long'}"
        if self.last_output:
            logger.warning("ansible-playbook ended %s before any task failed: %s", run_status,
                           _clip(" ".join(self.last_output)))
            return f"ansible-playbook ended {run_status} before any task failed; its output is in the bot's log"
        return "ansible-playbook failed without a message"


class ProgressRelay:
    """Hands progress to a callback on a thread of its own, through a bounded queue.

    The run's thread only queues: a slow or stuck callback (a chat server that takes its time)
    never holds up ansible-runner's loop, which is where cancel and the job timeout are checked.
    When the queue is full, progress is dropped and counted; ``close`` says how much.
    """

    def __init__(self, deliver: Callable[[Progress], None], capacity: int = 64):
        self._deliver = deliver
        self._capacity = capacity
        self._pending: collections.deque[Progress] = collections.deque()
        self._condition = threading.Condition()
        self._closed = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="progress-relay", daemon=True)
        self._thread.start()

    def __call__(self, progress: Progress) -> None:
        with self._condition:
            if len(self._pending) >= self._capacity:
                self.dropped += 1
                return
            self._pending.append(progress)
            self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._pending and not self._closed:
                    self._condition.wait()
                if not self._pending:
                    return
                progress = self._pending.popleft()
            try:
                self._deliver(progress)
            except Exception:  # pylint: disable=broad-exception-caught
                # A bot that fails to relay a message must not stop a deploy halfway.
                logger.exception("the progress callback failed on %r", progress.text)

    def close(self, timeout: float | None = None) -> bool:
        """Deliver what is queued (waiting at most ``timeout`` s); True when all was delivered."""
        with self._condition:
            if self.dropped:
                self._pending.append(Progress("note", f"{self.dropped} progress messages were dropped: "
                                                      "they came faster than they could be delivered"))
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

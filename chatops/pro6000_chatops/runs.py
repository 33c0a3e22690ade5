"""Run one playbook through ansible-runner in a fresh private data directory.

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
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ansible_runner import Runner, RunnerConfig

from .inventory import ansible_tool

REDACTED = "**redacted**"
# What the playbook inherits from the bot's environment besides ANSIBLE_* settings; the bot's
# own credentials (chat tokens and the like) stay out of it.
PASSTHROUGH = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "SSH_AUTH_SOCK", "VIRTUAL_ENV", "DOCKER_HOST",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
})
# Set in the playbook's environment, inherited by every process of the run: how leftovers are found.
RUN_MARKER = "PRO6000_CHATOPS_RUN"
# How often (seconds) ansible-runner asks the cancel callback while the playbook is quiet.
CANCEL_POLL_S = 1
# How long (seconds) the leftovers of a run may take to die before the run is reported anyway.
LEFTOVER_KILL_TIMEOUT_S = 10


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


def child_environment(prepared: Mapping[str, str], inherited: Mapping[str, str],
                      fixed: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """The playbook's environment: allow-listed inherited variables, the operator's fixed ones,
    the secrets, and what ansible-runner itself set (its callback plugin: it must win)."""
    set_by_runner = {name: value for name, value in prepared.items() if inherited.get(name) != value}
    kept = {name: value for name, value in inherited.items()
            if name in PASSTHROUGH or name.startswith("ANSIBLE_")}
    return {**kept, **fixed, **secrets, **set_by_runner}


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


def stop_leftover_processes(run_id: str) -> int:
    """Kill the processes of a run that outlived ansible-playbook; returns how many.

    ansible-core's task workers start sessions of their own, so the process-group kill that
    ansible-runner sends on cancel or timeout misses a worker in the middle of a task, and that
    worker would go on until its task ends. They carry the run's marker in their environment.
    A killed process lingers until the kernel gets to it, and a worker may fork between the scan
    and the kill, so the scan repeats until it finds none (a dead one's environment reads empty).
    """
    marker = f"{RUN_MARKER}={run_id}".encode()
    killed: set[int] = set()
    deadline = time.monotonic() + LEFTOVER_KILL_TIMEOUT_S
    while (found := _processes_of_run(marker)) and time.monotonic() < deadline:
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.02)
    return len(killed)


def run_playbook(run: PlaybookRun, on_event: Callable[[Mapping[str, object]], None],
                 cancel: threading.Event) -> tuple[str, int | None]:
    """Run the playbook; returns ansible-runner's (status, rc). Blocks until the run ends."""
    run.runs_dir.mkdir(parents=True, exist_ok=True)
    private_data_dir = Path(tempfile.mkdtemp(prefix=f"pro6000-chatops-{run.run_id}-", dir=run.runs_dir))
    try:
        config = RunnerConfig(
            private_data_dir=str(private_data_dir),
            playbook=str(run.playbook),
            inventory=str(run.inventory),
            limit=",".join(run.limit),
            extravars=dict(run.extravars),
            ident=run.run_id,
            quiet=True,
            suppress_output_file=True,
            suppress_env_files=True,
            timeout=run.job_timeout,
            settings={"pexpect_timeout": CANCEL_POLL_S},
        )
        config.prepare()
        config.env = child_environment(config.env, os.environ, run.environment, run.secrets)
        # The ansible-playbook beside this Python first, even when its folder is not on PATH.
        tools = os.path.dirname(ansible_tool("ansible-playbook"))
        config.env["PATH"] = os.pathsep.join(filter(None, (tools, config.env.get("PATH"))))
        config.env[RUN_MARKER] = run.run_id
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
        stop_leftover_processes(run.run_id)
        shutil.rmtree(private_data_dir, ignore_errors=True)

"""A real Matrix homeserver for the bot's tests, and people who talk to the bot through it.

Synapse (the reference homeserver) runs from its own virtual environment, built once under the
checkout's ``.cache/`` and reused; it stores in SQLite, listens on 127.0.0.1 only, on a free port,
and creates users by shared-secret registration (``register_new_matrix_user``), as an operator
would on a server of their own.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from nio import AsyncClient, LoginResponse, RoomCreateResponse, RoomSendResponse, SyncResponse

from chatops_support import REPO_ROOT
from support import free_port

BOT = "pro6000-bot"
SYNAPSE_VERSION = "1.163.2"
SYNAPSE_VENV = REPO_ROOT / ".cache" / f"synapse-{SYNAPSE_VERSION}"
PASSWORD = "correct horse battery staple"


def synapse_venv() -> Path:
    """The virtual environment with Synapse, created on first use (about 30 s), then reused.
    Its scripts name the path it was created at: one made through another path to this folder
    (a worktree's link to .cache) is made again."""
    ready = SYNAPSE_VENV / ".ready"
    SYNAPSE_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(SYNAPSE_VENV.parent / f"{SYNAPSE_VENV.name}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once build it once
        if not ready.exists() or ready.read_text(encoding="utf-8") != str(SYNAPSE_VENV):
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(SYNAPSE_VENV)], check=True, timeout=120)
            subprocess.run([str(SYNAPSE_VENV / "bin" / "pip"), "install", "--quiet",
                            f"matrix-synapse=={SYNAPSE_VERSION}"], check=True, timeout=900)
            ready.write_text(str(SYNAPSE_VENV), encoding="utf-8")
    return SYNAPSE_VENV


class Homeserver:
    """One Synapse process; ``stop()`` ends it."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.venv = synapse_venv()
        self.config = folder / "homeserver.yaml"
        python = str(self.venv / "bin" / "python")
        subprocess.run([python, "-m", "synapse.app.homeserver", "--server-name", "localhost",
                        "--config-path", str(self.config), "--generate-config", "--report-stats=no"],
                       cwd=folder, check=True, capture_output=True, timeout=120)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        settings = yaml.safe_load(self.config.read_text(encoding="utf-8"))
        settings["listeners"] = [{"port": port, "bind_addresses": ["127.0.0.1"], "type": "http",
                                  "tls": False, "x_forwarded": False,
                                  "resources": [{"names": ["client"], "compress": False}]}]
        # No federation: nothing outside this machine is reachable, nor asked.
        settings["trusted_key_servers"] = []
        settings["suppress_key_server_warning"] = True
        # The bot posts a few messages a second; an operator exempts a bot's account the same way
        # (or with the admin API's override_ratelimit).
        settings["rc_message"] = {"per_second": 50, "burst_count": 100}
        settings["rc_login"] = {"address": {"per_second": 50, "burst_count": 100},
                                "account": {"per_second": 50, "burst_count": 100}}
        self.config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        self.log = open(folder / "synapse.out", "wb")  # pylint: disable=consider-using-with
        self.process = subprocess.Popen([python, "-m", "synapse.app.homeserver", "-c", str(self.config)],
                                        cwd=folder, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(self.url + "/_matrix/client/versions", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                assert self.process.poll() is None, (folder / "synapse.out").read_text(errors="replace")
                assert time.monotonic() < deadline, "Synapse did not answer within 120 s"
                time.sleep(0.2)

    def register(self, name: str) -> str:
        """A new user (by the shared secret, no admin rights); returns the user ID."""
        subprocess.run([str(self.venv / "bin" / "register_new_matrix_user"), "-c", str(self.config),
                        "-u", name, "-p", PASSWORD, "--no-admin", self.url],
                       check=True, capture_output=True, timeout=60)
        return f"@{name}:localhost"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
        self.log.close()


class Person:
    """A Matrix client as a person uses one: it sends messages and reads what the room gets."""

    def __init__(self, homeserver: Homeserver, user_id: str):
        self.user_id = user_id
        self.client = AsyncClient(homeserver.url, user_id)
        self.events: list[dict] = []  # every m.room.message event seen, oldest first
        self._since: str | None = None

    async def login(self) -> str:
        response = await self.client.login(PASSWORD)
        assert isinstance(response, LoginResponse), response
        await self.sync(0)
        return response.access_token

    async def sync(self, timeout_ms: int = 500) -> None:
        # Synapse sends at most 10 events of a room per sync unless asked for more: a busy
        # room would lose messages between two syncs.
        response = await self.client.sync(timeout=timeout_ms, since=self._since,
                                          sync_filter={"room": {"timeline": {"limit": 200}}})
        assert isinstance(response, SyncResponse), response
        self._since = response.next_batch
        for room_id, room in response.rooms.join.items():
            for event in room.timeline.events:
                if event.source.get("type") == "m.room.message":
                    self.events.append({**event.source, "room_id": room_id})

    async def create_room(self, invite: list[str]) -> str:
        response = await self.client.room_create(name="inference-ops", invite=invite)
        assert isinstance(response, RoomCreateResponse), response
        return response.room_id

    async def join(self, room_id: str) -> None:
        await self.client.join(room_id)

    async def say(self, room_id: str, text: str, **content: object) -> str:
        response = await self.client.room_send(room_id, "m.room.message",
                                               {"msgtype": "m.text", "body": text, **content})
        assert isinstance(response, RoomSendResponse), response
        return response.event_id

    def replies_to(self, event_id: str) -> list[dict]:
        """The contents of the messages in the thread of ``event_id``, oldest first."""
        return [event["content"] for event in self.events
                if (event["content"].get("m.relates_to") or {}).get("event_id") == event_id]

    async def wait_for_reply(self, event_id: str, starts_with: str, timeout: float = 90) -> dict:
        """The first reply in the thread with a line that starts with ``starts_with``."""
        deadline = time.monotonic() + timeout
        while True:
            for content in self.replies_to(event_id):
                if any(line.startswith(starts_with) for line in content["body"].splitlines()):
                    return content
            assert time.monotonic() < deadline, (
                f"no reply starting with {starts_with!r} within {timeout} s; the thread: "
                + json.dumps([content["body"] for content in self.replies_to(event_id)], indent=1))
            await self.sync()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()


def run(coroutine):
    """Run one test's conversation."""
    return asyncio.run(coroutine)


@dataclass(frozen=True)
class Room:
    """A room on a homeserver with people and the bot in it; the bot's access token in a file."""

    homeserver: Homeserver
    room_id: str
    users: dict[str, str]  # user ID by name; the bot's under "bot"
    token_file: Path


def open_room(homeserver: Homeserver, folder: Path, names: list[str]) -> Room:
    """Registers ``names`` and the bot; the first person creates the room, the others join it."""
    users = {name: homeserver.register(name) for name in names}
    users["bot"] = homeserver.register(BOT)

    async def setup():
        people = [Person(homeserver, users[name]) for name in (*names, "bot")]
        tokens = [await person.login() for person in people]
        room_id = await people[0].create_room(invite=[users[name] for name in (*names[1:], "bot")])
        for person in people[1:-1]:
            await person.join(room_id)
        for person in people:
            await person.close()
        return room_id, tokens[-1]

    room_id, bot_token = run(setup())
    token_file = folder / "matrix-token"
    token_file.write_text(bot_token + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    return Room(homeserver, room_id, users, token_file)


def serve_in(config: Path, room: Room, **bot: object) -> None:
    """Adds to a chatops configuration what ``serve`` needs: the bot's account and room, and the
    ``bot`` settings given."""
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["matrix"] = {"homeserver": room.homeserver.url, "user_id": room.users["bot"],
                          "access_token_file": os.path.relpath(room.token_file, config.parent),
                          "rooms": [room.room_id], "state_dir": "state"}
    document["bot"] = bot
    config.write_text(yaml.safe_dump(document), encoding="utf-8")


async def signed_in(room: Room, *names: str) -> list[Person]:
    """People of the room (by name), logged in on a device of their own."""
    people = [Person(room.homeserver, room.users[name]) for name in names]
    for person in people:
        await person.login()
    return people


class BotProcess:
    """``pro6000-chatops serve`` as its own process; ready once it has read the backlog."""

    started = 0

    def __init__(self, config: Path):
        BotProcess.started += 1
        self.log = config.parent / f"bot-{BotProcess.started}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pro6000_chatops", "serve", "--config", str(config)],
                stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
        self.wait_for_log("matrix: listening")

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, line: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.text():
            assert self.process.poll() is None, f"the bot exited ({self.process.returncode}):\n{self.text()}"
            assert time.monotonic() < deadline, f"the bot did not log {line!r}:\n{self.text()}"
            time.sleep(0.1)

    def stop(self, timeout: float = 60) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


def audit(folder: Path) -> list[dict]:
    """The records of the audit log of the bot configured in ``folder`` (audit.jsonl)."""
    return [json.loads(line) for line in (folder / "audit.jsonl").read_text(encoding="utf-8").splitlines()]


def assert_is_the_bots_escaped_reply(content: dict, command_event: str) -> None:
    """A notice in the thread of the command, mentioning nobody, its HTML one escaped block."""
    assert content["msgtype"] == "m.notice" and content["m.mentions"] == {}
    assert content["m.relates_to"]["rel_type"] == "m.thread"
    assert content["m.relates_to"]["m.in_reply_to"] == {"event_id": command_event}
    assert content["formatted_body"].startswith("<pre><code>")
    assert "<" not in content["formatted_body"][len("<pre><code>"):-len("</code></pre>")]

"""The Matrix adapter, on the matrix-nio client library (unencrypted rooms).

Identity: the ``sender`` of a Matrix event is the user ID its homeserver authenticated, so
grants list Matrix user IDs (``@alice:example.org``); nothing typed in a message names a user.

Replayed events: the sync token is kept in ``state_dir`` after every sync, so a restarted bot
resumes where it stopped and never sees an event twice; and the first sync after a start only
reads the backlog: a command sent while the bot was down is not run later, unannounced. Edits
(``m.replace``) never re-run a command, and notices (what bots send) are not commands.

Escaping: replies are ``m.notice`` events, which the default push rule ``.m.rule.suppress_notices``
keeps from notifying anyone; they carry an empty ``m.mentions``, so no legacy body-matching rule
(display name, ``@room``) applies either (Matrix client-server API v1.7+, "User and room
mentions" and "Push rules: predefined rules"); the HTML form is the text escaped inside
``<pre><code>``, so no markup, link or Markdown that a host printed is rendered.
"""
from __future__ import annotations

import asyncio
import collections
import html
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nio import (AsyncClient, AsyncClientConfig, ProfileGetDisplayNameResponse, JoinError, RoomMessagesError,
                 RoomMessageText, RoomSendError, SyncError, WhoamiError)

from ..config import ConfigError
from ..files import read_private_text
from .base import ChatAdapter, ChatCommand, CommandHandler

logger = logging.getLogger(__name__)

# Matrix events are at most 65,536 bytes; the text goes in twice (plain and escaped HTML, where
# one character can become six), four bytes a character at most.
MESSAGE_LIMIT = 6000
SYNC_TIMEOUT_MS = 30_000
# Errors that retrying cannot fix: the token was revoked or the account locked out.
_FATAL_CODES = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_FORBIDDEN", "M_USER_LOCKED"})
_RETRY_S = 5
_SEEN_LIMIT = 1000
# A sync holds at most the filter's timeline limit of a room's new events; when more came (a
# flood), the rest is read back from the room's history, at most this many pages of 100.
_BACKFILL_PAGES = 10
_USER_ID = re.compile(r"@[a-z0-9._=/+-]+:[A-Za-z0-9.:\[\]-]+")
_KEYS = {"homeserver", "user_id", "access_token_file", "rooms", "state_dir"}
# Only messages, in the timeline; no presence or account data the bot has no use for.
SYNC_FILTER = {
    "presence": {"types": []},
    "account_data": {"types": []},
    "room": {"timeline": {"types": ["m.room.message"], "limit": 50},
             "state": {"lazy_load_members": True},
             "ephemeral": {"types": []}, "account_data": {"types": []}},
}


class ChatError(RuntimeError):
    """The chat server refused the bot in a way retrying cannot fix."""


@dataclass(frozen=True)
class MatrixSettings:
    homeserver: str
    user_id: str
    access_token_file: Path
    rooms: tuple[str, ...]
    state_dir: Path

    @classmethod
    def from_mapping(cls, raw: object, base: Path) -> MatrixSettings:
        """Validate the ``matrix`` section of the configuration file; relative paths are
        relative to ``base`` (the file's folder)."""
        if not isinstance(raw, Mapping):
            raise ConfigError("matrix must be a mapping with homeserver, user_id, "
                              "access_token_file, rooms and state_dir")
        unknown = set(raw) - _KEYS
        if unknown:
            raise ConfigError(f"matrix has unknown keys: {', '.join(sorted(unknown))}")
        for key in sorted(_KEYS):
            if key not in raw:
                raise ConfigError(f"matrix.{key} is required")
        homeserver = raw["homeserver"]
        if not isinstance(homeserver, str) or not re.fullmatch(r"https?://[^\s/]+/?", homeserver):
            raise ConfigError("matrix.homeserver must be the homeserver's base URL, "
                              "e.g. https://matrix.example.org")
        user_id = raw["user_id"]
        if not isinstance(user_id, str) or not _USER_ID.fullmatch(user_id):
            raise ConfigError("matrix.user_id must be the bot's Matrix user ID, e.g. @pro6000-bot:example.org")
        rooms = raw["rooms"]
        if (not isinstance(rooms, list) or not rooms
                or not all(isinstance(room, str) and room[:1] in ("!", "#") for room in rooms)):
            raise ConfigError("matrix.rooms must be a non-empty list of room IDs (!...) or aliases (#...)")
        for key in ("access_token_file", "state_dir"):
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"matrix.{key} must be a path")
        return cls(homeserver.rstrip("/"), user_id, (base / raw["access_token_file"]).resolve(),
                   tuple(rooms), (base / raw["state_dir"]).resolve())


def read_access_token(path: Path) -> str:
    """The token, from a file no other user can read (systemd's LoadCredential= gives one)."""
    try:
        token = read_private_text(path, "matrix.access_token_file").strip()
    except FileNotFoundError as error:
        raise ConfigError(f"matrix.access_token_file {path}: {error.strerror}") from None
    except OSError as error:
        raise ConfigError(error.strerror or str(error)) from None
    if not token or not token.isprintable() or " " in token:
        raise ConfigError(f"matrix.access_token_file {path} does not hold one access token")
    return token


def strip_reply_fallback(body: str) -> str:
    """A reply's body starts with the quoted original ('> ' lines, then a blank line)."""
    if not body.startswith("> "):
        return body
    lines = body.split("\n")
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).lstrip("\n")


def addressed_text(body: str, names: tuple[str, ...]) -> str | None:
    """The command when the message starts with one of the bot's names (``name: command``,
    ``name, command`` or ``name command``), else None."""
    for name in names:
        if body[:len(name)].casefold() == name.casefold():
            rest = body[len(name):]
            if not rest or rest[0] in ":, \t":
                return rest.lstrip(":,").strip()
    return None


def message_content(text: str) -> dict[str, object]:
    """A notice carrying ``text`` as plain text and as escaped, preformatted HTML."""
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + f"\n... ({len(text) - MESSAGE_LIMIT} more characters not shown)"
    return {
        "msgtype": "m.notice",
        "body": text,
        "format": "org.matrix.custom.html",
        "formatted_body": f"<pre><code>{html.escape(text, quote=True)}</code></pre>",
        "m.mentions": {},
    }


class MatrixAdapter(ChatAdapter):
    def __init__(self, settings: MatrixSettings):
        self.settings = settings
        # Connection errors and rate limits (429) are retried by nio itself, without limit
        # (AsyncClientConfig.max_timeouts / max_limit_exceeded left at None).
        self._client = AsyncClient(settings.homeserver, settings.user_id,
                                   config=AsyncClientConfig(encryption_enabled=False,
                                                            store_sync_tokens=False,
                                                            max_timeout_retry_wait_time=30))
        self._rooms: dict[str, str] = {}  # joined room ID -> the configured ID or alias
        self._names: tuple[str, ...] = ()
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()

    @property
    def _token_path(self) -> Path:
        return self.settings.state_dir / "matrix-sync-token"

    async def connect(self) -> None:
        client = self._client
        client.access_token = read_access_token(self.settings.access_token_file)
        logger.info("matrix: connecting to %s as %s", self.settings.homeserver, self.settings.user_id)
        while True:
            whoami = await client.whoami()
            if not isinstance(whoami, WhoamiError):
                break
            self._raise_if_fatal(whoami, "the access token")
            logger.warning("matrix: whoami failed (%s); retrying in %d s", whoami, _RETRY_S)
            await asyncio.sleep(_RETRY_S)
        if whoami.user_id != self.settings.user_id:
            raise ChatError(f"matrix.user_id is {self.settings.user_id}, but the access token "
                            f"belongs to {whoami.user_id}")
        client.user_id, client.device_id = whoami.user_id, whoami.device_id
        for room in self.settings.rooms:
            joined = await client.join(room)
            if isinstance(joined, JoinError):
                raise ChatError(f"matrix.rooms: {self.settings.user_id} cannot join {room}: {joined}")
            self._rooms[joined.room_id] = room
        localpart = self.settings.user_id[1:].split(":", 1)[0]
        names = [self.settings.user_id, "@" + localpart, localpart]
        profile = await client.get_displayname()
        if isinstance(profile, ProfileGetDisplayNameResponse) and profile.displayname:
            names.append(profile.displayname)
        # Longest first, so that "@bot:example.org" is not read as "@bot" plus ":example.org".
        self._names = tuple(sorted(set(names), key=len, reverse=True))
        logger.info("matrix: signed in as %s, in rooms %s", self.settings.user_id,
                    ", ".join(sorted(self._rooms.values())))

    def _raise_if_fatal(self, error: SyncError | WhoamiError, what: str) -> None:
        if error.status_code in _FATAL_CODES:
            raise ChatError(f"matrix: the homeserver refused {what} of {self.settings.user_id}: {error}")

    async def listen(self, on_command: CommandHandler) -> None:
        since = self._load_since()
        backlog = True
        while True:
            # The backlog at once: a resumed sync with nothing new would wait the whole timeout.
            response = await self._client.sync(timeout=0 if backlog else SYNC_TIMEOUT_MS,
                                               since=since, sync_filter=SYNC_FILTER)
            if isinstance(response, SyncError):
                self._raise_if_fatal(response, "the sync")
                logger.warning("matrix: sync failed (%s); retrying in %d s", response, _RETRY_S)
                await asyncio.sleep(_RETRY_S)
                continue
            for room_id, room in response.rooms.join.items():
                if room_id not in self._rooms:
                    continue
                events = room.timeline.events if backlog else await self._new_events(room_id, room.timeline, since)
                for event in events:
                    command = self._command(room_id, event)
                    if command is None:
                        continue
                    if backlog:
                        logger.info("matrix: not running %s from %s: sent before the bot started",
                                    command.event_id, command.sender)
                        continue
                    await on_command(command)
            since = response.next_batch
            self._save_since(since)
            if backlog:
                backlog = False
                logger.info("matrix: listening")

    async def _new_events(self, room_id: str, timeline: object, since: str | None) -> list:
        """The room's events since the last sync, oldest first. A limited timeline (more came
        than a sync holds) is completed from the room's history back to that sync: otherwise a
        flood would hide the requests that came before its last events."""
        events = list(timeline.events)
        if not timeline.limited or since is None:
            return events
        older, start = [], timeline.prev_batch
        for _page in range(_BACKFILL_PAGES):
            response = await self._client.room_messages(room_id, start=start, end=since, limit=100,
                                                        message_filter={"types": ["m.room.message"]})
            if isinstance(response, RoomMessagesError):
                logger.error("matrix: could not read back the history of %s: %s", room_id, response)
                break
            older.extend(response.chunk)
            if not response.chunk or not response.end or response.end == start:
                break
            start = response.end
        else:
            logger.warning("matrix: more than %d messages came in %s between two syncs; "
                           "the oldest were not read", _BACKFILL_PAGES * 100, room_id)
        return older[::-1] + events

    def _command(self, room_id: str, event: object) -> ChatCommand | None:
        if not isinstance(event, RoomMessageText) or event.sender == self.settings.user_id:
            return None
        if event.event_id in self._seen:
            return None
        self._seen[event.event_id] = None
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        relation = event.source.get("content", {}).get("m.relates_to") or {}
        if not isinstance(relation, dict) or relation.get("rel_type") == "m.replace":
            return None
        text = addressed_text(strip_reply_fallback(event.body), self._names)
        if text is None:
            return None
        # A command inside a thread is answered in that thread; any other starts one.
        thread = relation.get("event_id") if relation.get("rel_type") == "m.thread" else None
        return ChatCommand(room=room_id, sender=event.sender, event_id=event.event_id, text=text,
                           thread=thread if isinstance(thread, str) else event.event_id)

    async def reply(self, command: ChatCommand, text: str) -> None:
        content = message_content(text)
        content["m.relates_to"] = {
            "rel_type": "m.thread", "event_id": command.thread, "is_falling_back": True,
            "m.in_reply_to": {"event_id": command.event_id},
        }
        await self._send(command.room, content)

    async def announce(self, text: str) -> None:
        for room_id in self._rooms:
            await self._send(room_id, message_content(text))

    async def _send(self, room_id: str, content: dict[str, object]) -> None:
        response = await self._client.room_send(room_id, "m.room.message", content)
        if isinstance(response, RoomSendError):
            # Nothing to tell the room about a message that could not reach it; the log has it.
            logger.error("matrix: could not post to %s: %s", room_id, response)

    async def close(self) -> None:
        await self._client.close()

    def _load_since(self) -> str | None:
        try:
            token = self._token_path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        return token or None

    def _save_since(self, token: str) -> None:
        self.settings.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self._token_path.with_name(self._token_path.name + ".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(token)
        os.replace(temporary, self._token_path)

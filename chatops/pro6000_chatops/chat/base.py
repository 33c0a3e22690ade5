"""What the bot needs from a chat system: the whole interface an adapter implements.

The bot speaks plain text; the adapter owns everything specific to its chat system: how it
connects, which messages are addressed to the bot, whose they are (an identity the chat system
verified, never a name typed in the message), where replies go, and how text is escaped so
that nothing the bot relays from hosts renders as markup or notifies anyone.
"""
from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ChatCommand:
    """A message addressed to the bot, with the addressing removed.

    ``sender`` is the chat system's stable user ID (what grants list); ``event_id`` identifies
    the message; ``thread`` is where the adapter posts the replies (the message's own thread,
    or the thread it was sent in)."""

    room: str
    sender: str
    event_id: str
    text: str
    thread: str


CommandHandler = Callable[[ChatCommand], Awaitable[None]]


class ChatAdapter(abc.ABC):
    """One chat system. All methods run on the bot's asyncio event loop."""

    @abc.abstractmethod
    async def connect(self) -> None:
        """Log in, check the identity, join the configured rooms. Retries while the chat server
        cannot be reached; raises for what retrying cannot fix (a refused credential)."""

    @abc.abstractmethod
    async def listen(self, on_command: CommandHandler) -> None:
        """Deliver commands addressed to the bot until the task is cancelled: only messages
        sent after the bot started, never the bot's own, never one message twice (after a
        restart included). Awaits each ``on_command``, which must return at once."""

    @abc.abstractmethod
    async def reply(self, command: ChatCommand, text: str) -> None:
        """Post plain text as a reply to the command (in its thread), escaped for the chat
        system's markup and with no mention in effect."""

    @abc.abstractmethod
    async def announce(self, text: str) -> None:
        """Post plain text, escaped the same way, to every configured room."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Disconnect (after ``listen`` was cancelled)."""

"""Chat systems the bot can serve: the interface (``base``) and its adapters."""
from .base import ChatAdapter, ChatCommand

__all__ = ["ChatAdapter", "ChatCommand"]

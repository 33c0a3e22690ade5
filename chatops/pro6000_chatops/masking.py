"""Secret values never leave the bot in clear: every text it writes (chat replies, progress,
the audit log) goes through a Masker that knows the configured secrets' values."""
from __future__ import annotations

from collections.abc import Iterable

REDACTED = "**redacted**"


class Masker:
    def __init__(self, secret_values: Iterable[str] = ()):
        # Longest first, so that a secret that contains another is masked whole.
        self._values = sorted({value for value in secret_values if value}, key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, REDACTED)
        return text

    def value(self, value: object) -> object:
        """The same structure with every string (keys included) masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(key): self.value(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(item) for item in value]
        return value

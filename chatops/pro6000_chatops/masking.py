"""Secret values never leave the bot in clear: every text it writes (chat replies, progress,
the audit log, its own log) goes through a Masker that knows the configured secrets' values.

A task that prints a secret rarely prints it verbatim only: it may be upper-cased, spaced out,
URL-encoded (a credential in a URL), base64-encoded (an ``Authorization: Basic`` header, a
Kubernetes secret, ``b64encode`` in a template) or hex-encoded. Each secret is matched in all of
these forms:

- the value itself, in any letter case, each character possibly percent-encoded (``%2F``,
  ``+`` for a space) and possibly separated from the next by whitespace (``h f _ a b c``);
- its base64 (standard and URL-safe alphabets) at each of the three alignments it can have
  inside a longer encoded text, cut to the characters that depend on the secret alone, so it
  is found whatever was encoded before or after it;
- its hex digits, in either case.

Encoded forms are looked for only for secrets of at least ``ENCODED_MINIMUM`` characters:
shorter ones would match ordinary text (the exact value is masked whatever its length).
The bot does not rely on masking alone: it withholds raw task output from chat and the audit
log (``summary.py``), because it cannot know every secret a host or a server prints.
"""
from __future__ import annotations

import base64
import re
from collections.abc import Iterable

REDACTED = "**redacted**"
# Secrets shorter than this are masked verbatim only.
ENCODED_MINIMUM = 8
# Whitespace allowed between two characters of a spaced-out secret.
_SPACING = r"\s{0,3}"


def _character(character: str) -> str:
    """The pattern of one character of a secret: itself or percent-encoded (any case)."""
    forms = [re.escape(character)] + ["".join(f"%{byte:02x}" for byte in character.encode())]
    if character == " ":
        forms.append(r"\+")
    return "(?:" + "|".join(forms) + ")"


def _base64_forms(value: bytes) -> set[str]:
    """The base64 characters that depend on ``value`` alone, at each alignment (0, 1 or 2
    bytes before it in the encoded text), in both alphabets."""
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + value + bytes(2)).decode()
        # Character i holds bits [6i, 6i + 6); the value's bits are [8 * offset, 8 * end).
        start = -(-8 * offset // 6)
        end = 8 * (offset + len(value)) // 6
        piece = encoded[start:end]
        forms.update({piece, piece.replace("+", "-").replace("/", "_")})
    return forms


def secret_pattern(value: str) -> str:
    """The regular expression (case-insensitive) that finds ``value`` in any of its forms."""
    if len(value) < ENCODED_MINIMUM:
        return re.escape(value)
    plain = _SPACING.join(_character(character) for character in value)
    # Base64 is case-sensitive: an upper-cased encoding is not the secret's encoding.
    forms = sorted(_base64_forms(value.encode()), key=len, reverse=True)
    encoded = "|".join(f"(?-i:{re.escape(form)})" for form in forms)
    return f"{plain}|{encoded}|{re.escape(value.encode().hex())}"


class Masker:
    def __init__(self, secret_values: Iterable[str] = ()):
        # Longest first, so that a secret that contains another is masked whole.
        values = sorted({value for value in secret_values if value}, key=len, reverse=True)
        self._pattern = re.compile("|".join(secret_pattern(value) for value in values),
                                   re.IGNORECASE) if values else None

    def text(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text) if self._pattern is not None else text

    def value(self, value: object) -> object:
        """The same structure with every string (keys included) masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(key): self.value(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(item) for item in value]
        return value

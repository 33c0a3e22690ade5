"""The secrets the playbooks read from their environment (``lookup('ansible.builtin.env', NAME)``).

The configuration's ``secrets`` names them. Under its systemd unit the bot finds each in the
directory that ``LoadCredential=NAME:FILE`` fills (``$CREDENTIALS_DIRECTORY/NAME``, a copy of a
root-only file that this service alone reads); elsewhere (the command line) in its own
environment. A named secret that cannot be found is a configuration error at start: a run
without it would fail later, on a host, or quietly use a default instead.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from .config import ConfigError
from .files import read_private_text

CREDENTIALS_DIRECTORY = "CREDENTIALS_DIRECTORY"


def find_secrets(names: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The value of each named secret; raises ConfigError naming every one that is missing."""
    directory = environ.get(CREDENTIALS_DIRECTORY)
    found: dict[str, str] = {}
    missing = []
    for name in names:
        value = _credential(Path(directory), name) if directory else environ.get(name, "")
        if value:
            found[name] = value
        else:
            missing.append(name)
    if missing:
        where = (f"as files in ${CREDENTIALS_DIRECTORY} ({directory}; the unit's LoadCredential=)"
                 if directory else "in the bot's environment")
        raise ConfigError(f"secrets names {', '.join(missing)}, not found {where} or empty: "
                          "give each a value, or leave it out of secrets")
    return found


def _credential(directory: Path, name: str) -> str:
    path = directory / name
    try:
        text = read_private_text(path, f"secret {name}")
    except FileNotFoundError:
        return ""
    except OSError as error:
        raise ConfigError(error.strerror or str(error)) from None
    return text.rstrip("\n")

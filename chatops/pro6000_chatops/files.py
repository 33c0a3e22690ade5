"""Open the bot's own state files (locks, audit log) so that nobody else can redirect or rewrite them.

``O_NOFOLLOW`` refuses a symbolic link planted where a file is expected (it would make the bot
write wherever the link points); the checks after opening refuse a file or folder that another
user owns or may write to, since its content (a lock holder, an audit record) could be forged.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeFile(OSError):
    """A state file or folder is a link, not a regular file, or writable by someone else."""


def check_owned(path: Path, status: os.stat_result, kind: str) -> None:
    """Refuse what another user owns or may write to (the bot's user alone may change it)."""
    if status.st_uid != os.geteuid():
        raise UnsafeFile(f"{kind} {path} belongs to uid {status.st_uid}, not to the bot's uid {os.geteuid()}")
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFile(f"{kind} {path} is writable by group or others "
                         f"(mode {stat.S_IMODE(status.st_mode):04o}); make it 0700 or stricter")


def check_folder(path: Path) -> None:
    """The folder must exist, be a real folder (not a link) and be the bot's alone to change."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"the folder {path} does not exist") from None
    if not stat.S_ISDIR(status.st_mode):
        raise UnsafeFile(f"{path} is not a folder (a link or a file is not accepted)")
    check_owned(path, status, "folder")


def open_private(path: Path, flags: int, mode: int, kind: str) -> int:
    """Open (creating with ``mode``) a regular file the bot alone owns; returns the descriptor."""
    try:
        descriptor = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as error:
        if os.path.islink(path):
            raise UnsafeFile(f"{kind} {path} is a symbolic link: refused") from None
        raise OSError(error.errno, f"{kind} {path} cannot be opened: {error.strerror}") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeFile(f"{kind} {path} is not a regular file")
        check_owned(path, status, kind)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def read_private_text(path: Path, kind: str) -> str:
    """The text of a file no other user may read (a credential); refuses a link. Raises
    FileNotFoundError when there is none."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise OSError(error.errno, f"{kind} {path}: {error.strerror}") from None
    with os.fdopen(descriptor, encoding="utf-8") as handle:
        if stat.S_IMODE(os.fstat(handle.fileno()).st_mode) & 0o007:
            raise UnsafeFile(f"{kind} {path} is readable by other users: make it mode 0600 or 0400")
        return handle.read()

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way the modules replace a file: durable, atomic, with the mode they ask for."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile


def replace_file(path, content, mode, move):
    """Write content (bytes) to a temporary file beside path, make it durable, and move it over
    path with move (the modules pass AnsibleModule.atomic_move, which keeps SELinux contexts).

    atomic_move gives a new file the umask's mode and an existing one its old mode, whatever the
    temporary file had, so the mode asked for is set once the file is in place: on the file opened
    without following a link (fchmod), so that a link planted at path is refused (ELOOP), never
    re-moded through.
    """
    descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        move(temporary, path)
        placed = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.fchmod(placed, mode)
        finally:
            os.close(placed)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)

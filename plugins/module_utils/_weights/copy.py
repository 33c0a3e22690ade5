# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copies from a local source tree (a path source): links in the source refused or resolved,
then a hard link, a reflink or a kernel copy hashed beside it, resuming a partial file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os

from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import PermanentError, WeightsError
from ansible_collections.pro6000.inference.plugins.module_utils._weights.files import CHUNK, new_hasher, open_regular, write_all
from ansible_collections.pro6000.inference.plugins.module_utils._weights.transfer import WriteBehind, finish_part, hash_range, open_part


# FICLONE from linux/fs.h: share the source's extents (btrfs, XFS with reflink, bcachefs).
FICLONE = 0x40049409
LINK_MODES = ("copy", "reflink", "hardlink")
SOURCE_SYMLINKS = ("refuse", "copy")


def _kernel_copy(src_fd, dst_fd, offset, count):
    """Copy count bytes at offset inside the kernel: copy_file_range, else sendfile, else pread/pwrite."""
    try:
        return os.copy_file_range(src_fd, dst_fd, count, offset, offset)
    except (AttributeError, OSError) as exc:
        if getattr(exc, "errno", None) not in (None, errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    try:
        os.lseek(dst_fd, offset, os.SEEK_SET)
        return os.sendfile(dst_fd, src_fd, offset, count)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EINVAL):
            raise
    data = os.pread(src_fd, min(count, CHUNK), offset)
    return write_all(dst_fd, data, offset) - offset if data else 0


def resolve_source(root, rel, symlinks="refuse"):
    """(path without links, whether links led there) of the file ``rel`` of a source tree.

    A weights source is data: a link in it (at the file or at a directory on the way) that
    leads outside the tree would publish a file from elsewhere in the served copy, so it is
    refused unless ``symlinks`` is "copy" (the bytes it leads to are then copied, never linked).
    """
    real_root = os.path.realpath(root)
    named = os.path.join(real_root, rel)
    real = os.path.realpath(named)
    if real == named:
        return real, False
    if not real.startswith(real_root + os.sep) and symlinks != "copy":
        raise WeightsError("%s in source_path %s is a symbolic link (or lies under one) leading to %s, outside "
                           "the source: refused, since the staged copy would publish a file from elsewhere; copy "
                           "that file into the source, or set source_symlinks: copy to stage the bytes it leads to"
                           % (rel, root, real))
    return real, True


def open_source(path):
    """An fd of the source file at ``path``, a path without links (the caller resolved them);
    refused when the file opened is not the one named, as when a directory on the way was
    swapped for a link meanwhile."""
    fd = open_regular(path)
    try:
        opened = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        opened = path  # no /proc: the O_NOFOLLOW open is the guard
    if opened != path:
        os.close(fd)
        raise WeightsError("%s changed while it was opened (it now leads to %s): refused" % (path, opened))
    return fd


def copy_local(src_path, part_path, entry, link_mode, on_bytes, owner=None):
    """Stage a local file at copy speed, checking its digest; returns how it was staged.

    link_mode "hardlink" links the source itself and "reflink" shares its extents (both only
    where the source lies on the same file system and the site allows it); otherwise, and as
    the fallback, the kernel copies (copy_file_range/sendfile) while the same bytes, hot in the
    page cache, are hashed beside the copy, and each copied range goes to the disk at once
    (64 MiB steps: 1 MiB ones made the staging of 2 GiB a third slower in
    bench_weights_staging.py). A partial file from an earlier run is continued.

    A hard link is the source's own inode: changing its owner or mode would change the source.
    So a file is linked only where it already has ``owner`` (uid, gid, mode), and a linked file
    is only read (hashed), never written, truncated or re-owned; otherwise it is copied.
    """
    src_fd = open_source(src_path)
    try:
        src = os.fstat(src_fd)
        if link_mode == "hardlink" and (owner is None or (src.st_uid, src.st_gid, src.st_mode & 0o7777) == owner):
            if os.path.lexists(part_path):
                os.unlink(part_path)
            try:
                os.link(src_path, part_path, follow_symlinks=False)
            except OSError:
                pass
            else:
                return _check_hardlink(src_fd, src, part_path, entry, src_path, on_bytes)
        fd, have, hasher = open_part(part_path, entry)
        used = "copy"
        if link_mode == "reflink" and have == 0:
            try:
                fcntl.ioctl(fd, FICLONE, src_fd)
                used = "reflink"
                have = os.fstat(fd).st_size
                hash_range(fd, hasher, 0, have, bytearray(CHUNK))
                on_bytes(have)  # read here to be hashed
            except OSError:
                pass
        try:
            buf = bytearray(CHUNK)
            write_behind = WriteBehind(fd, have)
            while have < entry["size"]:
                copied = _kernel_copy(src_fd, fd, have, min(8 * CHUNK, entry["size"] - have))
                if not copied:
                    raise WeightsError("%s ended at byte %d of %d" % (src_path, have, entry["size"]))
                hash_range(src_fd, hasher, have, copied, buf)
                have += copied
                on_bytes(copied)
                write_behind.written(have)
            finish_part(fd, part_path, hasher, entry, src_path)
        finally:
            os.close(fd)
    finally:
        os.close(src_fd)
    return used


def _check_hardlink(src_fd, src, part_path, entry, src_path, on_bytes):
    """Hash a hard link just made from the source's fd (the source is read, never written)."""
    linked = os.lstat(part_path)
    if (linked.st_dev, linked.st_ino) != (src.st_dev, src.st_ino):
        os.unlink(part_path)
        raise WeightsError("%s changed while it was linked: refused" % src_path)
    if src.st_size != entry["size"]:
        os.unlink(part_path)
        raise WeightsError("%s: %d bytes, %d expected" % (src_path, src.st_size, entry["size"]))
    hasher = new_hasher(entry["algo"], entry["size"])
    hash_range(src_fd, hasher, 0, src.st_size, bytearray(CHUNK))
    on_bytes(src.st_size)  # read here to be hashed
    if hasher.hexdigest() != entry["digest"]:
        os.unlink(part_path)
        raise PermanentError("%s: %s %s does not match the expected %s"
                             % (src_path, entry["algo"], hasher.hexdigest(), entry["digest"]))
    return "hardlink"

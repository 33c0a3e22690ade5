# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""File primitives of the weights engine: opening without following links, digests, parallel
hashing, owning a file the module made, directories and the link it switches.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import os
import shutil
import stat as statmod
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError


CHUNK = 8 * 1024 * 1024
# Every file the module opens is opened without following a link at its last component; a
# FIFO in a source must not block the run, so reading opens never wait for a writer.
NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
NOFOLLOW_DIR = NOFOLLOW_READ | os.O_DIRECTORY


def new_hasher(algo, size):
    if algo == "sha256":
        return hashlib.sha256()
    if algo == "git_sha1":
        # A git blob id is the sha1 of "blob <size>\0" followed by the content.
        hasher = hashlib.sha1()
        hasher.update(("blob %d\0" % size).encode("ascii"))
        return hasher
    raise WeightsError("unknown digest algorithm %s" % algo)


def _hash_stream(stream, hasher, limit=None):
    """Feed hasher from stream (up to limit bytes); hashlib releases the GIL on big buffers."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    done = 0
    while limit is None or done < limit:
        want = CHUNK if limit is None else min(CHUNK, limit - done)
        got = stream.readinto(view[:want])
        if not got:
            break
        hasher.update(view[:got])
        done += got
    return done


def open_regular(path, flags=NOFOLLOW_READ):
    """An fd of the regular file at path, never through a link at its last component."""
    fd = os.open(path, flags)
    if not statmod.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WeightsError("%s is not a regular file" % path)
    return fd


def is_regular(path):
    """True for a regular file at path itself (a link to one is not)."""
    try:
        return statmod.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def file_digest(path, algo):
    with os.fdopen(open_regular(path), "rb", buffering=0) as stream:
        hasher = new_hasher(algo, os.fstat(stream.fileno()).st_size)
        _hash_stream(stream, hasher)
    return hasher.hexdigest()


def parallel_map(func, items, workers):
    """Run func over items on a thread pool; return {item: result or exception}."""
    results = {}
    items = list(items)
    if not items:
        return results
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        futures = dict((item, pool.submit(func, item)) for item in items)
        for item, future in futures.items():
            try:
                results[item] = future.result()
            except Exception as exc:  # noqa: BLE001  (reported per file by the caller)
                results[item] = exc
    return results


def write_all(fd, data, offset):
    """pwrite all of data at offset: one call may write less (a signal, a quota, a full disk)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(errno.EIO, "short write at byte %d" % offset)
        view = view[written:]
        offset += written
    return offset


def open_nofollow(path, flags=NOFOLLOW_READ, dir_fd=None):
    """os.open that refuses a link at path's last component with a WeightsError naming it; with
    dir_fd, the last component is opened relative to that directory (openat)."""
    try:
        return os.open(path if dir_fd is None else os.path.basename(path), flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        # O_NOFOLLOW answers ELOOP for a link; with O_DIRECTORY, ENOTDIR.
        if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR and os.path.islink(path):
            raise WeightsError("%s is a symbolic link: refused (root never writes through a link; the copies hold "
                               "only files and directories the module made; remove it)" % path)
        raise


def apply_ownership(path, uid, gid, mode, dry_run=False, shared=(), dir_fd=None):
    """chown/chmod one file or directory the module made (or only tell, with dry_run) on the fd
    it opens without following a link (path relative to dir_fd when given); return True when
    something differs.

    A link is refused (WeightsError); an inode in ``shared`` (hard links of files outside the
    module's copies, see outside_links) is left as it is, since changing it changes them too.
    """
    fd = open_nofollow(path, dir_fd=dir_fd)
    try:
        stat = os.fstat(fd)
        if (stat.st_dev, stat.st_ino) in shared:
            return False
        wrong_owner = (uid is not None and stat.st_uid != uid) or (gid is not None and stat.st_gid != gid)
        wrong_mode = stat.st_mode & 0o7777 != mode
        if not dry_run:
            if wrong_owner:
                os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
            if wrong_mode:
                os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return wrong_owner or wrong_mode


def make_parents(root, rel):
    """Create the directories of rel under root (a tree the module made), replacing any link or
    file found on the way, so that a listed name can never lead out of the tree."""
    path = root
    for part in rel.split("/")[:-1]:
        path = os.path.join(path, part)
        try:
            stat = os.lstat(path)
        except OSError:
            os.mkdir(path)
            continue
        if not statmod.S_ISDIR(stat.st_mode):
            os.unlink(path)
            os.mkdir(path)


def free_bytes(path):
    """Free bytes on the file system that holds path (or its nearest existing parent)."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return shutil.disk_usage(probe).free, probe


def switch_link(link, target):
    """Point link at target atomically (a new link renamed over the old one)."""
    tmp = "%s.switch-%d" % (link, os.getpid())
    try:
        os.unlink(tmp)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
    os.symlink(target, tmp)
    os.replace(tmp, link)
    fsync_dir(os.path.dirname(link))


def fsync_dir(path):
    # Only read: the model root (the link's directory) may itself be a link to a larger disk.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def human_bytes(count):
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return "%d B" % count if unit == "B" else "%.1f %s" % (value, unit)

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The trees model_stage keeps under <dest>.revs: the names it reserves there, a verified copy's
marker, a staging copy's journal, the quick check against a marker, a tree's ownership, the
lock of <dest>.revs, and the files of verified copies that a new copy can hard-link.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import stat as statmod
import threading

from ansible_collections.pro6000.inference.plugins.module_utils._files import replace_file
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError
from ansible_collections.pro6000.inference.plugins.module_utils._weights.files import (
    NOFOLLOW_DIR, apply_ownership, file_digest, is_regular, open_nofollow, open_regular, parallel_map,
)


MARKER_NAME = ".model_weights.json"
JOURNAL_NAME = ".model_weights.staging.json"
LOCK_NAME = ".lock"
# The module's own records in a copy: owned by the user the module runs as, whatever owns the files.
RECORD_MODES = {MARKER_NAME: None, JOURNAL_NAME: 0o600}
STAGING_PREFIX = ".staging-"


def verify_files(root, files, paths, workers):
    """Hash paths under root in parallel; return the sorted list of paths that do not match."""
    def check(path):
        full = os.path.join(root, path)
        entry = files[path]
        if not is_regular(full) or os.path.getsize(full) != entry["size"]:
            return False
        return file_digest(full, entry["algo"]) == entry["digest"]

    results = parallel_map(check, paths, workers)
    return sorted(path for path, ok in results.items() if ok is not True)


def read_json(path):
    """The JSON document in the regular file at path; None for anything else (a link is not followed)."""
    try:
        with os.fdopen(open_regular(path), "rb") as stream:
            return json.loads(stream.read().decode("utf-8"))
    except (IOError, OSError, ValueError, WeightsError):
        return None


def marker_identity(source, repo_id, revision, allow_patterns, ignore_patterns):
    """What a staged copy's marker says it is a copy of: model_stage writes these keys into the
    marker and keeps the copy only while they still hold."""
    return {"source": source, "repo_id": repo_id, "revision": str(revision),
            "allow_patterns": sorted(allow_patterns or []), "ignore_patterns": sorted(ignore_patterns or [])}


def link_target(dest):
    """The normalised path the link dest points at, relative links resolved against its directory."""
    return os.path.normpath(os.path.join(os.path.dirname(dest), os.readlink(dest)))


def copy_marker(copy):
    """The marker of a verified copy (a mapping with its files), None for anything else."""
    marker = read_json(os.path.join(copy, MARKER_NAME)) if os.path.isdir(copy) else None
    return marker if isinstance(marker, dict) and isinstance(marker.get("files"), dict) else None


def write_json_atomic(path, document, mode, move):
    """Replace path with document as JSON (module_utils/_files.py: durable, atomic, this mode)."""
    replace_file(path, (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8"), mode, move)


def file_state(path):
    """Size and modification time of the regular file at path; OSError for anything else (a link)."""
    stat = os.lstat(path)
    if not statmod.S_ISREG(stat.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class Journal:
    """Files already verified in a staging directory, so that a resumed run skips them."""

    def __init__(self, staging, move=os.replace):
        self.path = os.path.join(staging, JOURNAL_NAME)
        self.move = move
        self.lock = threading.Lock()
        document = read_json(self.path)
        self.entries = document.get("files", {}) if isinstance(document, dict) else {}

    def trusted(self, staging, path, entry):
        recorded = self.entries.get(path)
        full = os.path.join(staging, path)
        if not recorded or not is_regular(full):
            return False
        return (recorded.get("digest") == entry["digest"] and file_state(full) == {
            "size": recorded.get("size"), "mtime_ns": recorded.get("mtime_ns")})

    def record(self, staging, path, entry):
        state = file_state(os.path.join(staging, path))
        with self.lock:
            self.entries[path] = dict(state, digest=entry["digest"])
            write_json_atomic(self.path, {"files": self.entries}, 0o600, self.move)


def quick_check(root, marker, verify_all, workers):
    """Check a verified tree against its marker: sizes and mtimes, hashes only where needed.

    Returns (the sorted files that are missing or whose content no longer matches, {path: new
    state} of the files that were touched but still match, for the marker to record so that
    they are not hashed again on every run).
    """
    files = marker["files"]
    suspects = []
    bad = []
    for path, recorded in files.items():
        full = os.path.join(root, path)
        try:
            state = file_state(full)
        except OSError:
            bad.append(path)
            continue
        if state["size"] != recorded["size"]:
            bad.append(path)
        elif verify_all or state["mtime_ns"] != recorded.get("mtime_ns"):
            suspects.append(path)
    mismatched = verify_files(root, files, suspects, workers)
    refreshed = {}
    for path in set(suspects) - set(mismatched):
        state = file_state(os.path.join(root, path))
        if state["mtime_ns"] != files[path].get("mtime_ns"):
            refreshed[path] = state
    return sorted(bad + mismatched), refreshed


def apply_tree_ownership(root, uid, gid, dir_mode, file_mode, dry_run=False, shared=(), links="refuse"):
    """Own a tree the module keeps: the files by uid, the directories and the module's records
    (marker, journal) by the user the module runs as (root), since root later creates, renames
    and writes there; all by gid. Walked from directory descriptors (os.fwalk, each one opened
    without following a link and only descended into where it is the directory listed), so a
    link swapped in anywhere cannot lead root's fchown/fchmod out of the tree. A link found is
    refused (WeightsError), or with links="remove" (a staging directory, whose links are
    leftovers) unlinked, never followed. Returns whether anything differs (or would, dry_run).
    """
    owner = os.geteuid()
    changed = apply_ownership(root, owner, gid, dir_mode, dry_run)
    for base, dirs, names, base_fd in os.fwalk(root):
        for name in list(dirs) + names:
            if links == "remove" and statmod.S_ISLNK(os.lstat(name, dir_fd=base_fd).st_mode):
                changed = True
                if not dry_run:
                    os.unlink(name, dir_fd=base_fd)
                if name in dirs:
                    dirs.remove(name)
                continue
            if name in dirs:
                changed = apply_ownership(os.path.join(base, name), owner, gid, dir_mode, dry_run,
                                          dir_fd=base_fd) or changed
                continue
            record = base == root and name in RECORD_MODES
            changed = apply_ownership(os.path.join(base, name), owner if record else uid, gid,
                                      RECORD_MODES[name] or file_mode if record else file_mode, dry_run, shared,
                                      dir_fd=base_fd) or changed
    return changed


def outside_links(root):
    """(dev, ino) of the regular files under root that have hard links outside root as well: a
    file hard-linked from a source path (link_mode hardlink) is the source's inode."""
    counts = {}
    links = {}
    for base, _dirs, names in os.walk(root):
        for name in names:
            stat = os.lstat(os.path.join(base, name))
            if statmod.S_ISREG(stat.st_mode):
                inode = (stat.st_dev, stat.st_ino)
                counts[inode] = counts.get(inode, 0) + 1
                links[inode] = stat.st_nlink
    return set(inode for inode, count in counts.items() if links[inode] > count)


def open_lock(revs):
    """The fd of <revs>/.lock for flock, opened for writing from a descriptor of revs without
    following a link at either: a link (or anything but a regular file) planted there is refused,
    and the file it leads to is left as it is (never truncated: the lock is opened, not emptied)."""
    path = os.path.join(revs, LOCK_NAME)
    dir_fd = open_nofollow(revs, NOFOLLOW_DIR)
    try:
        fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                           dir_fd=dir_fd)
    except OSError as exc:  # a FIFO without a reader (ENXIO), a directory (EISDIR)
        raise WeightsError("%s cannot be opened as the module's lock: %s" % (path, exc.strerror))
    finally:
        os.close(dir_fd)
    if not statmod.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WeightsError("%s is not a regular file: refused as the module's lock" % path)
    os.fchown(fd, os.geteuid(), os.getegid())
    os.fchmod(fd, 0o600)
    return fd


def remove_strays(staging, files):
    """Leave exactly the manifest's files: leftovers of earlier attempts go."""
    for base, dirs, names in os.walk(staging, topdown=False):
        for name in names:
            full = os.path.join(base, name)
            rel = os.path.relpath(full, staging)
            if rel not in files and rel != JOURNAL_NAME:
                os.unlink(full)
        for name in dirs:
            full = os.path.join(base, name)
            if os.path.islink(full):
                os.unlink(full)
            elif not os.listdir(full):
                os.rmdir(full)


def digest_key(entry):
    return entry["algo"], entry["digest"], entry["size"]


class Donors:
    """The files of the verified copies in <dest>.revs that a staging copy may hard-link instead
    of fetching. Inodes hashed and found good (or bad) in this run are noted: a hard link
    shares its inode's fate. With verify_all (verify full), only a donor whose content was
    hashed and matched is used."""

    def __init__(self, revs, verify_all):
        self.revs = revs
        self.verify_all = verify_all
        self.good_inodes = set()
        self.bad_inodes = set()

    def note(self, root, paths, good):
        for path in paths:
            try:
                stat = os.lstat(os.path.join(root, path))
            except OSError:
                continue
            (self.good_inodes if good else self.bad_inodes).add((stat.st_dev, stat.st_ino))

    def verified_copies(self):
        """(directory, marker) of every verified copy in <dest>.revs."""
        for name in sorted(os.listdir(self.revs)):
            full = os.path.join(self.revs, name)
            marker = copy_marker(full) if not name.startswith(".") and not os.path.islink(full) else None
            if marker is not None:
                yield full, marker

    def index(self):
        """(algo, digest, size) -> [(path, inode)] of files in verified copies that still match
        their markers by size and time; the damaged files' inodes are left out."""
        donors = {}
        for root, marker in self.verified_copies():
            for path, recorded in marker["files"].items():
                full = os.path.join(root, path)
                if not is_regular(full):
                    continue
                stat = os.lstat(full)
                inode = (stat.st_dev, stat.st_ino)
                if inode not in self.bad_inodes and (stat.st_size, stat.st_mtime_ns) == (
                        recorded["size"], recorded.get("mtime_ns")):
                    donors.setdefault(digest_key(recorded), []).append((full, inode))
        return donors

    def sound(self, candidates, entry):
        """A donor to link: with verify full, one whose content was hashed (here or earlier in
        this run) and matched; a hard link of damaged data must not "repair" anything."""
        for full, inode in candidates:
            if inode in self.bad_inodes:
                continue
            if self.verify_all and inode not in self.good_inodes:
                good = file_digest(full, entry["algo"]) == entry["digest"]
                (self.good_inodes if good else self.bad_inodes).add(inode)
                if not good:
                    continue
            return full
        return None

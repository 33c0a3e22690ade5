# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staging of model weight trees: manifests, digests, resumable transfers, markers.

Standard library only: this code runs on the managed host inside the model_stage module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import socket
import ssl
import stat as statmod
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit
from urllib.request import HTTPRedirectHandler, HTTPSHandler, ProxyHandler, Request, build_opener

from ansible_collections.pro6000.inference.plugins.module_utils._files import replace_file

MARKER_NAME = ".model_weights.json"
JOURNAL_NAME = ".model_weights.staging.json"
LOCK_NAME = ".lock"
# The module's own records in a copy: owned by the user the module runs as, whatever owns the files.
RECORD_MODES = {MARKER_NAME: None, JOURNAL_NAME: 0o600}
STAGING_PREFIX = ".staging-"
CHUNK = 8 * 1024 * 1024
# Transfers move 1 MiB at a time: a piece that stays in the core's L2 cache between landing in
# the file and being hashed (8 MiB pieces cost about twice the kernel time on 2 cores).
PIECE = 1024 * 1024
# Written ranges of this size are handed to the disk at once (write-behind), not at the fsync.
WRITE_BEHIND = 16 * 1024 * 1024
SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h
F_SETPIPE_SZ = 1031  # linux/fcntl.h
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
# The hub's repository id rule (huggingface_hub utils/_validators.py, validate_repo_id): an
# optional namespace and a name of ASCII letters, digits, "_", "-", "." (at most 96 each), not
# starting or ending with "-" or ".", without "--" or "..", not ending in ".git".
REPO_ID_RE = re.compile(r"^(?:[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?/)?[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?$",
                        re.ASCII)
# A revision is a commit or a git ref name (git check-ref-format): no "..", "//", "@{", control
# characters, spaces or ~^:?*[\ ; no component starting with "." or ending in ".lock".
REVISION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,254}$")
# A query string may carry a signature (signed CDN URLs: sig=, X-Amz-Signature=, Signature=).
URL_QUERY_RE = re.compile(r"((?:https?|ftp|file)://[^\s?#'\"<>]*)\?[^\s'\"<>]*")
# FICLONE from linux/fs.h: share the source's extents (btrfs, XFS with reflink, bcachefs).
FICLONE = 0x40049409
LINK_MODES = ("copy", "reflink", "hardlink")
SOURCE_SYMLINKS = ("refuse", "copy")
# Every file the module opens is opened without following a link at its last component; a
# FIFO in a source must not block the run, so reading opens never wait for a writer.
NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
NOFOLLOW_DIR = NOFOLLOW_READ | os.O_DIRECTORY


class WeightsError(Exception):
    """A failure the module reports as is (the message names what and why)."""


class PermanentError(WeightsError):
    """A failure that another attempt cannot fix (HTTP 404, 403, a wrong digest): never retried."""


def mask_secrets(text):
    """Drop the query string of every URL in text: signed CDN URLs must not reach task output."""
    return URL_QUERY_RE.sub(r"\1?<query hidden>", text)


def check_repo_id(repo_id, name="repo_id"):
    if not isinstance(repo_id, str) or not REPO_ID_RE.match(repo_id) or "--" in repo_id or ".." in repo_id \
            or repo_id.endswith(".git"):
        raise WeightsError("%s %r is not a hub repository id: [namespace/]name of letters, digits, '_', '-' and '.', "
                           "not starting or ending with '-' or '.', without '--' or '..'" % (name, repo_id))
    return repo_id


def check_revision(revision, name="revision"):
    parts = revision.split("/") if isinstance(revision, str) else []
    if (not REVISION_RE.match(revision or "") or ".." in revision or "//" in revision or "@{" in revision
            or revision.endswith("/") or any(p.startswith(".") or p.endswith(".lock") for p in parts)):
        raise WeightsError("%s %r is not a commit or a git ref name (letters, digits, '_', '-', '.', '/'; no '..', "
                           "no component starting with '.')" % (name, revision))
    return revision


def passes(check, value):
    """Whether a string passes one of the check_* rules (Ansible test plugins ask it)."""
    if not isinstance(value, str):
        return False
    try:
        check(value)
    except WeightsError:
        return False
    return True


def check_dir_path(path, name):
    """An absolute, normalised directory path below / of printable UTF-8 (a newline would end a
    line of what names it, "/" would make the model root the file system's)."""
    if (not isinstance(path, str) or not path.startswith("/") or path == "/" or os.path.normpath(path) != path
            or not path.isprintable() or not utf8(path)):
        raise WeightsError("%s %r must be an absolute, normalised directory path other than '/', without '~', '..', "
                           "'.', a trailing '/' or control characters" % (name, path))
    return path


def check_manifest_name(manifest_name, name="manifest_name"):
    """A manifest is read from inside the source: a relative path that stays there."""
    parts = manifest_name.split("/") if isinstance(manifest_name, str) else [""]
    if (not isinstance(manifest_name, str) or manifest_name.startswith("/") or any(part in ("", ".", "..") for part in parts)
            or not manifest_name.isprintable() or "\\" in manifest_name or not utf8(manifest_name)):
        raise WeightsError("%s %r must be a file name inside the mirror's revision or the source path: relative, "
                           "without '..', '.', empty parts or control characters" % (name, manifest_name))
    return manifest_name


def utf8(text):
    """Whether text encodes as UTF-8 (a file name of undecodable bytes carries lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_url(url, name):
    """Only http and https: urllib would read file:// and ftp:// as well."""
    scheme = urlsplit(url or "").scheme.lower()
    if scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise WeightsError("%s %r must be an http:// or https:// URL" % (name, mask_secrets(url or "")))
    return url


# --------------------------------------------------------------------------- manifests

def check_relpath(path):
    """Return a repository-relative path, refusing anything that could leave the tree."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or not utf8(path) \
            or not path.isprintable():
        raise WeightsError("unsafe file path in manifest: %r" % (path,))
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise WeightsError("unsafe file path in manifest: %r" % (path,))
    if parts[0] in (MARKER_NAME, JOURNAL_NAME) or parts[0].startswith(STAGING_PREFIX) or path.endswith(".part"):
        # <file>.part is where a file is written before it is checked: a listed name must not be one.
        raise WeightsError("reserved file name in manifest: %r" % (path,))
    return path


def normalize_manifest(entries):
    """Turn a list of {path, size, sha256 | git_sha1} into {path: {size, algo, digest}}."""
    if not isinstance(entries, list) or not entries:
        raise WeightsError("the manifest lists no files")
    files = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise WeightsError("manifest entry is not an object: %r" % (entry,))
        path = check_relpath(entry.get("path"))
        if path in files:
            raise WeightsError("duplicate path in manifest: %s" % path)
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise WeightsError("manifest entry %s has no valid size" % path)
        sha256 = (entry.get("sha256") or "").lower()
        git_sha1 = (entry.get("git_sha1") or "").lower()
        if SHA256_RE.match(sha256):
            files[path] = {"size": size, "algo": "sha256", "digest": sha256}
        elif SHA1_RE.match(git_sha1):
            files[path] = {"size": size, "algo": "git_sha1", "digest": git_sha1}
        else:
            raise WeightsError("manifest entry %s has neither a sha256 nor a git blob sha1" % path)
    for path in files:
        for parent in parents_of(path):
            if parent in files:
                raise WeightsError("manifest lists %s both as a file and as a directory" % parent)
    return files


def parents_of(path):
    """The directories of a relative path, outermost first: a/b/c -> a, a/b."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]


def parse_manifest_document(text, origin, repo_id=None, revision=None):
    """Parse a manifest (JSON object with a "files" list) read from origin; the repo_id and
    revision it names, when it names them, must be the ones asked for."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise WeightsError("manifest %s is not valid JSON: %s" % (origin, exc))
    if not isinstance(document, dict) or "files" not in document:
        raise WeightsError("manifest %s has no \"files\" list" % origin)
    for key, wanted in (("repo_id", repo_id), ("revision", revision)):
        if wanted is not None and document.get(key, wanted) != wanted:
            raise PermanentError("manifest %s describes %s %r, not %r" % (origin, key, document[key], wanted))
    return normalize_manifest(document["files"])


def lock_files(lock, repo_id, revision):
    """{path: entry} of a site's lock file (repo_id, commit, files with path, size, sha256).

    The lock must be for this repository and, when revision is a commit, for that commit."""
    if not isinstance(lock, dict) or not isinstance(lock.get("files"), list):
        raise WeightsError("lock: not a lock file (an object with repo_id, commit and files)")
    if repo_id is not None and lock.get("repo_id") != repo_id:
        raise WeightsError("lock: the lock file is for repository %r, not %r" % (lock.get("repo_id"), repo_id))
    commit = lock.get("commit")
    if not isinstance(commit, str) or not COMMIT_RE.match(commit):
        raise WeightsError("lock: commit %r is not a 40-hex commit" % (commit,))
    if COMMIT_RE.match(revision) and commit != revision:
        raise WeightsError("lock: the lock file pins commit %s, the revision asked for is %s" % (commit, revision))
    if any(not SHA256_RE.match(str(entry.get("sha256", ""))) for entry in lock["files"] if isinstance(entry, dict)):
        raise WeightsError("lock: every file needs a sha256")
    return commit, normalize_manifest(lock["files"])


def check_against_lock(offered, locked, origin):
    """Fail, naming each file, where what the source offers differs from the site's lock.

    offered: {path: entry} from the source's listing or manifest (sha256 or git blob id)."""
    problems = []
    for path in sorted(set(offered) | set(locked)):
        have, want = offered.get(path), locked.get(path)
        if want is None:
            problems.append("%s is offered but not in the lock file" % path)
        elif have is None:
            problems.append("%s is in the lock file but not offered" % path)
        elif have["size"] != want["size"]:
            problems.append("%s: size %d, the lock file says %d" % (path, have["size"], want["size"]))
        elif have["algo"] == "sha256" and have["digest"] != want["digest"]:
            problems.append("%s: sha256 %s, the lock file says %s" % (path, have["digest"], want["digest"]))
    if problems:
        raise PermanentError("%s differs from the lock file: %s" % (origin, "; ".join(problems)))


def manifest_bytes(files):
    return sum(entry["size"] for entry in files.values())


# --------------------------------------------------------------------------- digests

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


# --------------------------------------------------------------------------- transfers

def hash_range(fd, hasher, offset, length, buf):
    """Feed hasher with length bytes of fd from offset (pread: the file offset stays put)."""
    view = memoryview(buf)
    end = offset + length
    while offset < end:
        got = os.preadv(fd, [view[:min(len(buf), end - offset)]], offset)
        if not got:
            raise WeightsError("file ended at byte %d of %d while hashing" % (offset, end))
        hasher.update(view[:got])
        offset += got


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


def _sync_file_range():
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux: the fsync at the end does all the work
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return function


class WriteBehind:
    """Starts the disk writing each finished WRITE_BEHIND range of a file while the rest arrives
    (sync_file_range(2) with SYNC_FILE_RANGE_WRITE: initiate write-out, do not wait), so that the
    fsync that makes the file durable finds little left to write. Only a hint to the kernel."""

    start_writeback = staticmethod(_sync_file_range())

    def __init__(self, fd, offset):
        self.fd = fd
        self.started = offset

    def written(self, end):
        if end - self.started >= WRITE_BEHIND and self.start_writeback is not None:
            self.start_writeback(self.fd, self.started, end - self.started, SYNC_FILE_RANGE_WRITE)
            self.started = end


class Body:
    """The body of one answer, placed into a file piece by piece: read into a buffer, then
    written (every write checked)."""

    def __init__(self, stream):
        self.stream = stream
        self.view = memoryview(bytearray(PIECE))

    def move(self, fd, offset, count):
        """Place up to count bytes at offset of fd; return how many (0: the body ended)."""
        got = self.stream.readinto(self.view[:min(count, PIECE)])
        if got:
            write_all(fd, self.view[:got], offset)
        return got

    def close(self):
        self.stream.close()


class SplicedBody(Body):
    """A plain-HTTP body moved from the socket into the file by the kernel (splice(2): socket to
    pipe without a copy, pipe to file), the receiving side of the sendfile(2) that static
    servers send with; the bytes never pass through Python."""

    def __init__(self, response, timeout):
        Body.__init__(self, response)
        self.socket_fd = response.fileno()
        self.timeout = timeout
        self.buffered = True  # http.client may have read the first body bytes with the headers
        self.left = None  # body bytes the socket still owes (Content-Length), once spliced
        try:
            self.pipe_read, self.pipe_write = os.pipe()
        except OSError:
            response.close()
            raise
        try:
            fcntl.fcntl(self.pipe_write, F_SETPIPE_SZ, PIECE)
        except OSError:  # above fs.pipe-max-size: the default pipe only moves less per call
            pass

    def move(self, fd, offset, count):
        if self.stream.fp is None:  # http.client closed it: the body (as long as announced) is over
            return 0
        if self.buffered:
            waiting = len(self.stream.fp.peek(1))  # what the reader holds, or one read of the socket
            self.buffered = waiting > count
            return Body.move(self, fd, offset, min(count, waiting))
        if self.left is None:
            self.left = self.stream.length  # None without a Content-Length: up to the end of the connection
        if self.left is not None:
            count = min(count, self.left)
            if not count:
                return 0
        while True:
            try:
                moved = os.splice(self.socket_fd, self.pipe_write, min(count, PIECE))
                break
            except BlockingIOError:  # a socket with a timeout is non-blocking underneath
                poller = select.poll()
                poller.register(self.socket_fd, select.POLLIN)
                if not poller.poll(self.timeout * 1000):
                    raise socket.timeout("no data for %s s" % self.timeout)
        landed = 0
        while landed < moved:
            written = os.splice(self.pipe_read, fd, moved - landed, offset_dst=offset + landed)
            if written <= 0:
                raise OSError(errno.EIO, "short write at byte %d" % (offset + landed))
            landed += written
        if self.left is not None:
            self.left -= moved
        return moved

    def close(self):
        os.close(self.pipe_read)
        os.close(self.pipe_write)
        Body.close(self)


class Source:
    """Opens one manifest file at a byte offset; returns (stream, offset the stream starts at)."""

    def open_at(self, path, offset):
        raise NotImplementedError

    def describe(self, path):
        raise NotImplementedError

    def body(self, stream):
        return Body(stream)


class _HttpOnlyRedirects(HTTPRedirectHandler):
    """urllib follows redirects to ftp:// too; a weight source stays on http and https."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise PermanentError("%s redirected to %s: only http:// and https:// are followed"
                                 % (mask_secrets(req.full_url), mask_secrets(newurl)))
        return HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)


def url_opener(ca_file=None):
    """An opener that honours the proxy environment and an optional extra CA bundle."""
    context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    return build_opener(ProxyHandler(), HTTPSHandler(context=context), _HttpOnlyRedirects())


class HttpSource(Source):
    def __init__(self, base_url, timeout=60, ca_file=None, headers=None):
        self.base_url = check_url(base_url, "mirror_url").rstrip("/") + "/"
        self.timeout = timeout
        self.opener = url_opener(ca_file)
        self.headers = dict(headers or {})

    def url(self, path):
        return self.base_url + quote(path, safe="/")

    def describe(self, path):
        return mask_secrets(self.url(path))

    def get(self, path, offset=0):
        headers = dict(self.headers)
        headers["Accept-Encoding"] = "identity"
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        try:
            return self.opener.open(Request(self.url(path), headers=headers), timeout=self.timeout)
        except HTTPError as exc:
            # A client error other than a timeout or a rate limit stays the same on every attempt.
            error = PermanentError if 400 <= exc.code < 500 and exc.code not in (408, 429) else WeightsError
            raise error("GET %s answered HTTP %s %s" % (self.describe(path), exc.code, exc.reason))
        except URLError as exc:
            raise WeightsError("GET %s failed: %s" % (self.describe(path), exc.reason))

    def open_at(self, path, offset):
        response = self.get(path, offset)
        if offset and response.status == 206:
            content_range = response.headers.get("Content-Range", "")
            match = re.match(r"bytes (\d+)-", content_range)
            if not match or int(match.group(1)) != offset:
                response.close()
                raise WeightsError("%s answered a range that was not asked for: %s" % (self.describe(path),
                                                                                       content_range))
            return response, offset
        # 200: the server ignored Range (or there was nothing to resume): start again at 0.
        return response, 0

    def body(self, stream):
        """Plain HTTP is spliced; a TLS or chunked body is not the bytes on the socket."""
        if hasattr(os, "splice") and urlsplit(stream.geturl()).scheme == "http" and not stream.chunked:
            return SplicedBody(stream, self.timeout)
        return Body(stream)

    def read_text(self, path):
        response = self.get(path)
        try:
            return response.read().decode("utf-8")
        finally:
            response.close()


def open_part(part_path, entry):
    """(fd, bytes already there, hasher fed with them) of a partial file, created when absent;
    anything but a regular file found there (a planted link) is removed, never followed."""
    if os.path.lexists(part_path) and not is_regular(part_path):
        os.unlink(part_path)
    fd = os.open(part_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    have = os.fstat(fd).st_size
    if have > entry["size"]:
        os.ftruncate(fd, 0)
        have = 0
    hasher = new_hasher(entry["algo"], entry["size"])
    hash_range(fd, hasher, 0, have, bytearray(CHUNK))
    return fd, have, hasher


def finish_part(fd, part_path, hasher, entry, origin):
    """Make the partial file durable and check it: complete on disk and matching its digest."""
    os.fsync(fd)
    on_disk = os.fstat(fd).st_size
    if on_disk != entry["size"]:
        raise WeightsError("%s: %d bytes on disk after the transfer, %d expected" % (origin, on_disk, entry["size"]))
    digest = hasher.hexdigest()
    if digest != entry["digest"]:
        os.unlink(part_path)
        raise PermanentError("%s: %s %s does not match the expected %s"
                             % (origin, entry["algo"], digest, entry["digest"]))


def transfer(source, path, part_path, entry, retries, on_bytes):
    """Fetch one file into part_path, resuming what is there, hashing each piece as it lies in
    the file right after it landed (still in the CPU cache).

    Returns the number of bytes read from the source. A failed attempt is retried from what is
    on disk; retries counts attempts in a row that brought no new byte (progress resets it). A
    permanent failure (HTTP 404, a wrong digest) is never retried; a wrong file is removed so
    that the next attempt starts clean.
    """
    size = entry["size"]
    origin = source.describe(path)
    fd, have, hasher = open_part(part_path, entry)
    transferred = 0
    failures = 0
    buf = bytearray(PIECE)
    try:
        while have < size:
            before = have
            try:
                stream, start = source.open_at(path, have)
                body = source.body(stream)
                try:
                    if start != have:
                        os.ftruncate(fd, start)
                        hasher = new_hasher(entry["algo"], size)
                        hash_range(fd, hasher, 0, start, buf)
                        have = start
                    write_behind = WriteBehind(fd, have)
                    while have < size:
                        got = body.move(fd, have, size - have)
                        if not got:
                            break
                        hash_range(fd, hasher, have, got, buf)
                        have += got
                        transferred += got
                        on_bytes(got)
                        write_behind.written(have)
                finally:
                    body.close()
                if have < size:
                    raise WeightsError("%s: connection ended at byte %d of %d" % (origin, have, size))
            except PermanentError:
                raise
            except Exception as exc:  # noqa: BLE001  (OSError, http.client.IncompleteRead, timeouts: retried)
                failures = 1 if have > before else failures + 1
                if failures > retries:
                    raise WeightsError("%s: giving up after %d attempt(s) without progress: %s"
                                       % (origin, failures, mask_secrets(str(exc))))
                time.sleep(min(2 ** failures, 30) * 0.25)
        finish_part(fd, part_path, hasher, entry, origin)
    finally:
        os.close(fd)
    return transferred


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


# --------------------------------------------------------------------------- tree state

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


# --------------------------------------------------------------------------- model configs

def load_config(root):
    path = os.path.join(root, "config.json")
    try:
        with open(path) as stream:
            config = json.load(stream)
    except (IOError, OSError) as exc:
        raise WeightsError("%s cannot be read: %s" % (path, exc))
    except ValueError as exc:
        raise WeightsError("%s is not valid JSON: %s" % (path, exc))
    if not isinstance(config, dict):
        raise WeightsError("%s is not a JSON object" % path)
    return config


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# SGLang's get_context_length (python/sglang/srt/utils/hf_transformers/common.py of 0.5.23,
# hf_transformers_utils.py before): the first of these keys, times the rope scaling factor
# unless the scaling keeps the original length; 2048 when none is set.
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")


def context_length(config):
    """The context a checkpoint declares, as SGLang derives it from its (text) config."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    rope = text.get("rope_scaling") if isinstance(text.get("rope_scaling"), dict) else {}
    keeps = "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3"
    factor = 1 if keeps else rope.get("factor", 1)
    for key in CONTEXT_LENGTH_KEYS:
        if text.get(key) is not None:
            return int(factor * text[key])
    return 2048


def target_facts(config, origin):
    """model_type and layer count of a target config (top level or text_config, as Qwen3.5 has it)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    if not _int(layers) or layers < 1:
        raise WeightsError("%s: num_hidden_layers is missing or not a positive integer" % origin)
    return {
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures") or [],
        "num_hidden_layers": layers,
        "context_length": context_length(config),
    }


def drafter_facts(config, origin, target_layers):
    """The DFlash fields a drafter must carry; target_layers (or None) bounds target_layer_ids."""
    architectures = config.get("architectures") or []
    auto_map = config.get("auto_map") or {}
    mapped = [str(value) for value in auto_map.values()] if isinstance(auto_map, dict) else []
    if "DFlashDraftModel" not in architectures and not any(v.endswith("DFlashDraftModel") for v in mapped):
        raise WeightsError("%s is not a DFlash drafter: architectures %s and auto_map %s name no DFlashDraftModel"
                           % (origin, architectures, mapped))
    dflash = config.get("dflash_config")
    if not isinstance(dflash, dict):
        raise WeightsError("%s: dflash_config is missing" % origin)
    block_size = dflash.get("block_size", config.get("block_size"))
    if not _int(block_size) or block_size < 2:
        raise WeightsError("%s: block_size is missing or not an integer >= 2 (found %r)" % (origin, block_size))
    layer_ids = dflash.get("target_layer_ids")
    if not isinstance(layer_ids, list) or not layer_ids or not all(_int(i) for i in layer_ids):
        raise WeightsError("%s: dflash_config.target_layer_ids must be a non-empty list of integers" % origin)
    if target_layers is not None:
        outside = [i for i in layer_ids if i < 0 or i >= target_layers]
        if outside:
            raise WeightsError("%s: dflash_config.target_layer_ids %s lie outside the target's %d layers (0..%d)"
                               % (origin, outside, target_layers, target_layers - 1))
    mask_token_id = dflash.get("mask_token_id", config.get("mask_token_id"))
    if not _int(mask_token_id):
        raise WeightsError("%s: dflash_config.mask_token_id is missing" % origin)
    return {
        "block_size": block_size,
        "target_layer_ids": layer_ids,
        "mask_token_id": mask_token_id,
        "layer_types": config.get("layer_types") or [],
        "sliding_window": config.get("sliding_window"),
        "num_hidden_layers": config.get("num_hidden_layers"),
        "context_length": context_length(config),
    }

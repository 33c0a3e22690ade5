# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resumable transfers from an HTTP mirror into a partial file, hashed piece by piece as each
lands (spliced from the socket where the body is plain HTTP).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import errno
import fcntl
import os
import re
import select
import socket
import ssl
import time
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit
from urllib.request import HTTPRedirectHandler, HTTPSHandler, ProxyHandler, Request, build_opener

from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import check_url
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import PermanentError, WeightsError, mask_secrets
from ansible_collections.pro6000.inference.plugins.module_utils._weights.files import CHUNK, is_regular, new_hasher, write_all


# Transfers move 1 MiB at a time: a piece that stays in the core's L2 cache between landing in
# the file and being hashed (8 MiB pieces cost about twice the kernel time on 2 cores).
PIECE = 1024 * 1024
# Written ranges of this size are handed to the disk at once (write-behind), not at the fsync.
WRITE_BEHIND = 16 * 1024 * 1024
SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h
F_SETPIPE_SZ = 1031  # linux/fcntl.h


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

"""Resumable transfers from a mirror: retries, resumes, short writes, spliced bodies, write-behind."""
import http.server
import io
import os
import threading
import time

import pytest
from support import manifest_entry

from ansible_collections.pro6000.inference.plugins.module_utils._weights import copy
from ansible_collections.pro6000.inference.plugins.module_utils._weights import errors
from ansible_collections.pro6000.inference.plugins.module_utils._weights import files
from ansible_collections.pro6000.inference.plugins.module_utils._weights import transfer


class FlakySource(transfer.Source):
    """Serves data from an offset; the first opens end early after `cut` bytes."""

    def __init__(self, data, cuts):
        self.data = data
        self.cuts = list(cuts)
        self.opened_at = []

    def open_at(self, path, offset):
        self.opened_at.append(offset)
        end = offset + self.cuts.pop(0) if self.cuts else len(self.data)
        return io.BytesIO(self.data[offset:end]), offset

    def describe(self, path):
        return path


def test_transfer_resumes_from_the_partial_file_and_counts_only_new_bytes(tmp_path):
    data = os.urandom(3 * files.CHUNK + 5)
    part = tmp_path / "f.part"
    part.write_bytes(data[:1000])
    source = FlakySource(data, [])
    got = []
    assert transfer.transfer(source, "f", str(part), manifest_entry(data), 0, got.append) == len(data) - 1000
    assert source.opened_at == [1000]
    assert part.read_bytes() == data and sum(got) == len(data) - 1000


def test_transfer_retries_a_dropped_stream_from_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer.time, "sleep", lambda s: None)
    data = os.urandom(2 * files.CHUNK)
    source = FlakySource(data, [files.CHUNK + 7])
    part = tmp_path / "f.part"
    assert transfer.transfer(source, "f", str(part), manifest_entry(data), 1, lambda n: None) == len(data)
    assert source.opened_at == [0, files.CHUNK + 7]
    assert part.read_bytes() == data


def test_transfer_gives_up_after_the_retries_and_keeps_the_partial_file(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer.time, "sleep", lambda s: None)
    data = os.urandom(1000)
    part = tmp_path / "f.part"
    with pytest.raises(errors.WeightsError, match="2 attempt.* connection ended at byte 100 of 1000"):
        transfer.transfer(FlakySource(data, [100, 0, 0]), "f", str(part), manifest_entry(data), 1, lambda n: None)
    assert part.read_bytes() == data[:100]


def test_transfer_drops_a_file_whose_digest_does_not_match(tmp_path):
    data = b"x" * 100
    part = tmp_path / "f.part"
    wrong = dict(manifest_entry(data), digest="0" * 64)
    with pytest.raises(errors.WeightsError, match="does not match"):
        transfer.transfer(FlakySource(data, []), "f", str(part), wrong, 0, lambda n: None)
    assert not part.exists()


def test_transfer_starts_over_when_the_server_ignores_range(tmp_path):
    data = os.urandom(5000)

    class NoRange(FlakySource):
        def open_at(self, path, offset):
            self.opened_at.append(offset)
            return io.BytesIO(self.data), 0

    part = tmp_path / "f.part"
    part.write_bytes(b"garbage!" * 10)
    source = NoRange(data, [])
    assert transfer.transfer(source, "f", str(part), manifest_entry(data), 0, lambda n: None) == len(data)
    assert part.read_bytes() == data


def test_the_retry_budget_starts_again_after_each_attempt_that_made_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer.time, "sleep", lambda s: None)
    data = os.urandom(1000)
    source = FlakySource(data, [100, 100, 100, 100])
    part = tmp_path / "f.part"
    assert transfer.transfer(source, "f", str(part), manifest_entry(data), 1, lambda n: None) == 1000
    assert source.opened_at == [0, 100, 200, 300, 400]


def test_a_client_error_is_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer.time, "sleep", lambda s: None)

    class Gone(FlakySource):
        def open_at(self, path, offset):
            self.opened_at.append(offset)
            raise errors.PermanentError("GET f answered HTTP 404 Not Found")

    source = Gone(b"x", [])
    with pytest.raises(errors.PermanentError, match="404"):
        transfer.transfer(source, "f", str(tmp_path / "f.part"), manifest_entry(b"x"), 3, lambda n: None)
    assert source.opened_at == [0]


def test_short_writes_are_continued_until_every_byte_is_on_disk(tmp_path, monkeypatch):
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real(fd, bytes(data[:1000]), offset))
    data = os.urandom(files.CHUNK + 4321)
    part = tmp_path / "f.part"
    transfer.transfer(FlakySource(data, []), "f", str(part), manifest_entry(data), 0, lambda n: None)
    assert part.read_bytes() == data


def test_a_file_that_ends_short_on_disk_is_not_reported_complete(tmp_path, monkeypatch):
    real = os.pwrite

    def losing(fd, data, offset):
        """A file system that acknowledges bytes past 500 and loses them."""
        if offset > 500:
            return len(data)
        return real(fd, bytes(data[:501 - offset]), offset)

    monkeypatch.setattr(os, "pwrite", losing)
    data = os.urandom(1000)
    # Each piece is hashed as it lies in the file, so the loss shows at the first piece past it.
    with pytest.raises(errors.WeightsError, match="file ended at byte 501 of 1000 while hashing"):
        transfer.transfer(FlakySource(data, []), "f", str(tmp_path / "f.part"), manifest_entry(data), 0, lambda n: None)


@pytest.mark.parametrize("url", ["file:///etc", "ftp://mirror/models", "mirror/models", "http://", ""])
def test_only_http_and_https_mirrors_are_accepted(url):
    with pytest.raises(errors.WeightsError, match="mirror_url .* must be an http:// or https:// URL"):
        transfer.HttpSource(url)


def test_a_redirect_to_another_scheme_is_refused():
    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's naming)
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1/secret?sig=abc")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.handle_request, daemon=True).start()
    source = transfer.HttpSource("http://127.0.0.1:%d/m" % server.server_port, timeout=5)
    with pytest.raises(errors.PermanentError, match=r"redirected to ftp://127.0.0.1/secret\?<query hidden>: only"):
        source.read_text("manifest.json")
    server.server_close()


class BodyServer:
    """One file over real HTTP on loopback, with Range; chunked or stalling when asked. A stall
    holds the connection for HOLD seconds, far longer than any client timeout here, so that a
    bound on a test's time tells a client that waited from one on a loaded machine."""

    HOLD = 30

    def __init__(self, data, chunked=False, stall_after=None, first_short_by=0):
        self.ranges = []
        self.short_by = first_short_by
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802  (http.server's naming)
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"][len("bytes="):-1])
                owner.ranges.append(self.headers.get("Range"))
                body = data[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for piece in range(0, len(body), 100000):
                        block = body[piece:piece + 100000]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if owner.short_by:  # announces and sends less, then keeps the connection open
                    body, owner.short_by = body[:-owner.short_by], 0
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                    time.sleep(owner.HOLD)
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if stall_after is None:
                    self.wfile.write(body)
                else:
                    self.wfile.write(body[:stall_after])
                    self.wfile.flush()
                    time.sleep(owner.HOLD)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/m" % self.server.server_port

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def splices(monkeypatch):
    """Every os.splice call as (to a file: offset_dst given)."""
    calls = []
    real = os.splice

    def counting(src, dst, count, offset_src=None, offset_dst=None, flags=0):
        calls.append(offset_dst is not None)
        return real(src, dst, count, offset_src, offset_dst, flags)

    monkeypatch.setattr(os, "splice", counting)
    return calls


def test_a_plain_http_body_goes_from_the_socket_into_the_file_by_splice_and_resumes_with_range(tmp_path, splices):
    data = os.urandom(3 * transfer.PIECE + 12345)
    server = BodyServer(data)
    part = tmp_path / "f.part"
    part.write_bytes(data[:1000])
    try:
        got = transfer.transfer(transfer.HttpSource(server.url, timeout=5), "f", str(part), manifest_entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert got == len(data) - 1000 and part.read_bytes() == data
    assert server.ranges == ["bytes=1000-"]
    assert splices.count(True) >= 3   # at least one splice into the file per piece


def test_a_spliced_body_ends_where_its_content_length_says_and_the_rest_comes_with_range(tmp_path, splices):
    data = os.urandom(transfer.PIECE + 5000)
    server = BodyServer(data, first_short_by=4000)
    part = tmp_path / "f.part"
    started = time.monotonic()
    try:
        transfer.transfer(transfer.HttpSource(server.url, timeout=5), "f", str(part), manifest_entry(data), 1, lambda n: None)
    finally:
        server.close()
    assert time.monotonic() - started < 5   # the client's timeout: no wait for the socket's end
    assert server.ranges == [None, "bytes=%d-" % (len(data) - 4000)] and part.read_bytes() == data


def test_a_chunked_body_is_read_and_written_not_spliced(tmp_path, splices):
    data = os.urandom(transfer.PIECE + 777)
    server = BodyServer(data, chunked=True)
    part = tmp_path / "f.part"
    try:
        transfer.transfer(transfer.HttpSource(server.url, timeout=5), "f", str(part), manifest_entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert part.read_bytes() == data and splices == []   # the chunk framing never reaches the file


def test_short_splices_into_the_file_are_continued(tmp_path, monkeypatch):
    real = os.splice

    def short(src, dst, count, offset_src=None, offset_dst=None, flags=0):
        return real(src, dst, min(count, 1000) if offset_dst is not None else count, offset_src, offset_dst, flags)

    monkeypatch.setattr(os, "splice", short)
    data = os.urandom(transfer.PIECE + 4321)
    server = BodyServer(data)
    part = tmp_path / "f.part"
    try:
        transfer.transfer(transfer.HttpSource(server.url, timeout=5), "f", str(part), manifest_entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert part.read_bytes() == data


def test_a_spliced_body_that_stalls_fails_after_the_timeout_and_keeps_what_arrived(tmp_path, splices):
    data = os.urandom(transfer.PIECE)
    server = BodyServer(data, stall_after=300000)
    part = tmp_path / "f.part"
    started = time.monotonic()
    try:
        with pytest.raises(errors.WeightsError, match="giving up after 1 attempt.*no data for 1 s"):
            transfer.transfer(transfer.HttpSource(server.url, timeout=1), "f", str(part), manifest_entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert time.monotonic() - started < server.HOLD
    assert splices and part.read_bytes() == data[:300000]


@pytest.mark.parametrize("staging", ["transfer", "copy"])
def test_finished_ranges_are_handed_to_the_disk_while_the_rest_arrives(tmp_path, monkeypatch, staging):
    started = []
    monkeypatch.setattr(transfer, "WRITE_BEHIND", 2 * transfer.PIECE)
    monkeypatch.setattr(transfer.WriteBehind, "start_writeback",
                        staticmethod(lambda fd, offset, count, flags: started.append((offset, count, flags))))
    data = os.urandom(5 * transfer.PIECE + 3)
    part = tmp_path / "f.part"
    if staging == "transfer":
        transfer.transfer(FlakySource(data, []), "f", str(part), manifest_entry(data), 0, lambda n: None)
        assert started == [(0, 2 * transfer.PIECE, transfer.SYNC_FILE_RANGE_WRITE),
                           (2 * transfer.PIECE, 2 * transfer.PIECE, transfer.SYNC_FILE_RANGE_WRITE)]
    else:
        (tmp_path / "src").write_bytes(data)
        copy.copy_local(str(tmp_path / "src"), str(part), manifest_entry(data), "copy", lambda n: None)
        assert started == [(0, len(data), transfer.SYNC_FILE_RANGE_WRITE)]   # one kernel copy step
    assert part.read_bytes() == data

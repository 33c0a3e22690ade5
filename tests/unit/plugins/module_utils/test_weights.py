"""Manifests, digests, resumable transfers, markers and config checks of _weights."""
import errno
import hashlib
import http.server
import io
import json
import os
import threading
import time

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils import _weights as w


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def entry(data, algo="sha256"):
    digest = sha256(data) if algo == "sha256" else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return {"size": len(data), "algo": algo, "digest": digest}


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "a//b", "", ".model_weights.json",
                                  ".staging-abc/x", "a\\b"])
def test_manifest_refuses_paths_that_leave_the_tree_or_clash_with_bookkeeping(path):
    with pytest.raises(w.WeightsError):
        w.normalize_manifest([{"path": path, "size": 1, "sha256": "0" * 64}])


def test_manifest_takes_sha256_or_git_blob_ids_and_refuses_duplicates_and_missing_digests():
    files = w.normalize_manifest([{"path": "a/b.safetensors", "size": 3, "sha256": "A" * 64},
                                  {"path": "config.json", "size": 2, "git_sha1": "b" * 40}])
    assert files["a/b.safetensors"] == {"size": 3, "algo": "sha256", "digest": "a" * 64}
    assert files["config.json"]["algo"] == "git_sha1"
    with pytest.raises(w.WeightsError, match="duplicate"):
        w.normalize_manifest([{"path": "x", "size": 1, "sha256": "0" * 64}] * 2)
    with pytest.raises(w.WeightsError, match="neither"):
        w.normalize_manifest([{"path": "x", "size": 1, "sha256": "short"}])
    with pytest.raises(w.WeightsError, match="size"):
        w.normalize_manifest([{"path": "x", "size": True, "sha256": "0" * 64}])
    with pytest.raises(w.WeightsError, match="no files"):
        w.normalize_manifest([])


def test_git_blob_digest_is_the_one_git_computes(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert w.file_digest(str(empty), "git_sha1") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    hello = tmp_path / "hello"
    hello.write_bytes(b"hello\n")
    assert w.file_digest(str(hello), "git_sha1") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_verify_files_reports_only_mismatches(tmp_path):
    (tmp_path / "good").write_bytes(b"good")
    (tmp_path / "bad").write_bytes(b"bad!")
    files = {"good": entry(b"good"), "bad": entry(b"bad?")}
    assert w.verify_files(str(tmp_path), files, ["good", "bad"], 4) == ["bad"]


class FlakySource(w.Source):
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
    data = os.urandom(3 * w.CHUNK + 5)
    part = tmp_path / "f.part"
    part.write_bytes(data[:1000])
    source = FlakySource(data, [])
    got = []
    assert w.transfer(source, "f", str(part), entry(data), 0, got.append) == len(data) - 1000
    assert source.opened_at == [1000]
    assert part.read_bytes() == data and sum(got) == len(data) - 1000


def test_transfer_retries_a_dropped_stream_from_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(w.time, "sleep", lambda s: None)
    data = os.urandom(2 * w.CHUNK)
    source = FlakySource(data, [w.CHUNK + 7])
    part = tmp_path / "f.part"
    assert w.transfer(source, "f", str(part), entry(data), 1, lambda n: None) == len(data)
    assert source.opened_at == [0, w.CHUNK + 7]
    assert part.read_bytes() == data


def test_transfer_gives_up_after_the_retries_and_keeps_the_partial_file(tmp_path, monkeypatch):
    monkeypatch.setattr(w.time, "sleep", lambda s: None)
    data = os.urandom(1000)
    part = tmp_path / "f.part"
    with pytest.raises(w.WeightsError, match="2 attempt.* connection ended at byte 100 of 1000"):
        w.transfer(FlakySource(data, [100, 0, 0]), "f", str(part), entry(data), 1, lambda n: None)
    assert part.read_bytes() == data[:100]


def test_transfer_drops_a_file_whose_digest_does_not_match(tmp_path):
    data = b"x" * 100
    part = tmp_path / "f.part"
    wrong = dict(entry(data), digest="0" * 64)
    with pytest.raises(w.WeightsError, match="does not match"):
        w.transfer(FlakySource(data, []), "f", str(part), wrong, 0, lambda n: None)
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
    assert w.transfer(source, "f", str(part), entry(data), 0, lambda n: None) == len(data)
    assert part.read_bytes() == data


def test_quick_check_hashes_only_touched_files_and_reports_their_new_times(tmp_path, monkeypatch):
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode() * 10)
    marker = {"files": {name: dict(entry(name.encode() * 10), **w.file_state(str(tmp_path / name)))
                        for name in ("a", "b", "c")}}
    hashed = []
    real = w.file_digest
    monkeypatch.setattr(w, "file_digest", lambda path, algo: hashed.append(os.path.basename(path)) or real(path, algo))
    assert w.quick_check(str(tmp_path), marker, False, 2) == ([], {})
    assert hashed == []
    (tmp_path / "b").write_bytes(b"B" * 10)          # same size, new content and mtime
    (tmp_path / "c").unlink()
    assert w.quick_check(str(tmp_path), marker, False, 2) == (["b", "c"], {})
    assert hashed == ["b"]
    hashed.clear()
    os.utime(tmp_path / "a", ns=(1, 1))               # touched but identical: hashed, still good
    bad, refreshed = w.quick_check(str(tmp_path), marker, False, 2)
    assert bad == ["b", "c"] and refreshed == {"a": {"size": 10, "mtime_ns": 1}}
    assert sorted(hashed) == ["a", "b"]
    hashed.clear()
    w.quick_check(str(tmp_path), marker, True, 2)
    assert sorted(hashed) == ["a", "b"]               # full: every present file


def test_journal_trusts_only_unchanged_recorded_files(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    journal = w.Journal(str(tmp_path))
    journal.record(str(tmp_path), "f", entry(b"abc"))
    again = w.Journal(str(tmp_path))
    assert again.trusted(str(tmp_path), "f", entry(b"abc"))
    assert not again.trusted(str(tmp_path), "f", entry(b"abd"))
    (tmp_path / "f").write_bytes(b"abd")
    os.utime(tmp_path / "f", ns=(5, 5))
    assert not again.trusted(str(tmp_path), "f", entry(b"abc"))


def test_apply_ownership_reports_and_fixes_modes(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"")
    os.chmod(f, 0o600)
    assert w.apply_ownership(str(f), None, None, 0o644, dry_run=True)
    assert os.stat(f).st_mode & 0o777 == 0o600
    assert w.apply_ownership(str(f), None, None, 0o644)
    assert not w.apply_ownership(str(f), None, None, 0o644)


def test_free_bytes_walks_up_to_an_existing_directory(tmp_path):
    free, where = w.free_bytes(str(tmp_path / "not" / "yet"))
    assert where == str(tmp_path) and free > 0


def test_switch_link_replaces_the_link_atomically(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = str(tmp_path / "model")
    w.switch_link(link, "a")
    w.switch_link(link, "b")
    assert os.readlink(link) == "b"
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "model"]


TARGET = {"model_type": "qwen3_5", "text_config": {"num_hidden_layers": 64}}
DRAFTER = {"architectures": ["DFlashDraftModel"], "block_size": 16,
           "dflash_config": {"target_layer_ids": [1, 16, 31, 46, 61], "mask_token_id": 7},
           "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 2048}


def test_target_layer_count_is_read_from_the_top_level_or_text_config():
    assert w.target_facts(TARGET, "t")["num_hidden_layers"] == 64
    assert w.target_facts({"num_hidden_layers": 48}, "t")["num_hidden_layers"] == 48
    with pytest.raises(w.WeightsError, match="num_hidden_layers"):
        w.target_facts({"model_type": "x"}, "t")


@pytest.mark.parametrize("config, declared", [
    ({"text_config": {"max_position_embeddings": 262144}}, 262144),  # Qwen3.6 keeps it in text_config
    ({"max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0, "rope_type": "yarn"}}, 131072),
    ({"max_position_embeddings": 32768,
      "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 8192}}, 32768),
    ({"seq_length": 8192, "max_position_embeddings": 4096}, 8192),  # the first key SGLang looks at wins
    ({}, 2048),  # SGLang's fallback
])
def test_the_declared_context_is_derived_as_sglang_derives_it(config, declared):
    # get_context_length, python/sglang/srt/utils/hf_transformers/common.py of 0.5.23.
    assert w.context_length(config) == declared
    assert w.target_facts(dict(config, num_hidden_layers=4), "t")["context_length"] == declared
    assert w.drafter_facts(dict(DRAFTER, **config), "d", 64)["context_length"] == declared


def test_a_dflash_drafter_is_recognised_and_its_fields_reported():
    facts = w.drafter_facts(DRAFTER, "d", 64)
    assert facts["block_size"] == 16 and facts["target_layer_ids"] == [1, 16, 31, 46, 61]
    assert facts["mask_token_id"] == 7 and facts["sliding_window"] == 2048
    via_auto_map = dict(DRAFTER, architectures=["Other"], auto_map={"AutoModel": "dflash.DFlashDraftModel"})
    assert w.drafter_facts(via_auto_map, "d", 64)["block_size"] == 16
    nested = dict(DRAFTER, block_size=None, dflash_config=dict(DRAFTER["dflash_config"], block_size=8))
    assert w.drafter_facts(nested, "d", 64)["block_size"] == 8


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["LlamaForCausalLM"]}, "not a DFlash drafter"),
    ({"block_size": 1}, "block_size"),
    ({"block_size": "16"}, "block_size"),
    ({"dflash_config": {"target_layer_ids": [1, 64], "mask_token_id": 7}}, r"\[64\] lie outside the target's 64"),
    ({"dflash_config": {"target_layer_ids": [], "mask_token_id": 7}}, "non-empty"),
    ({"dflash_config": {"target_layer_ids": [1]}}, "mask_token_id"),
    ({"dflash_config": None}, "dflash_config is missing"),
])
def test_a_bad_drafter_config_fails_with_the_reason(change, message):
    with pytest.raises(w.WeightsError, match=message):
        w.drafter_facts(dict(DRAFTER, **change), "d", 64)


def test_load_config_names_the_file_when_it_is_not_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(w.WeightsError, match="config.json is not valid JSON"):
        w.load_config(str(tmp_path))


def test_the_retry_budget_starts_again_after_each_attempt_that_made_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(w.time, "sleep", lambda s: None)
    data = os.urandom(1000)
    source = FlakySource(data, [100, 100, 100, 100])
    part = tmp_path / "f.part"
    assert w.transfer(source, "f", str(part), entry(data), 1, lambda n: None) == 1000
    assert source.opened_at == [0, 100, 200, 300, 400]


def test_a_client_error_is_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(w.time, "sleep", lambda s: None)

    class Gone(FlakySource):
        def open_at(self, path, offset):
            self.opened_at.append(offset)
            raise w.PermanentError("GET f answered HTTP 404 Not Found")

    source = Gone(b"x", [])
    with pytest.raises(w.PermanentError, match="404"):
        w.transfer(source, "f", str(tmp_path / "f.part"), entry(b"x"), 3, lambda n: None)
    assert source.opened_at == [0]


def test_short_writes_are_continued_until_every_byte_is_on_disk(tmp_path, monkeypatch):
    real = os.pwrite
    monkeypatch.setattr(w.os, "pwrite", lambda fd, data, offset: real(fd, bytes(data[:1000]), offset))
    data = os.urandom(w.CHUNK + 4321)
    part = tmp_path / "f.part"
    w.transfer(FlakySource(data, []), "f", str(part), entry(data), 0, lambda n: None)
    assert part.read_bytes() == data


def test_a_file_that_ends_short_on_disk_is_not_reported_complete(tmp_path, monkeypatch):
    real = os.pwrite

    def losing(fd, data, offset):
        """A file system that acknowledges bytes past 500 and loses them."""
        if offset > 500:
            return len(data)
        return real(fd, bytes(data[:501 - offset]), offset)

    monkeypatch.setattr(w.os, "pwrite", losing)
    data = os.urandom(1000)
    # Each piece is hashed as it lies in the file, so the loss shows at the first piece past it.
    with pytest.raises(w.WeightsError, match="file ended at byte 501 of 1000 while hashing"):
        w.transfer(FlakySource(data, []), "f", str(tmp_path / "f.part"), entry(data), 0, lambda n: None)


@pytest.mark.parametrize("mode", ["copy", "reflink", "hardlink"])
def test_copy_local_copies_checks_the_digest_and_resumes(tmp_path, mode):
    data = os.urandom(3 * w.CHUNK + 17)
    src = tmp_path / "src"
    src.write_bytes(data)
    part = tmp_path / "dst.part"
    part.write_bytes(data[:w.CHUNK + 5])              # left by an earlier run
    counted = []
    used = w.copy_local(str(src), str(part), entry(data), mode, counted.append)
    assert part.read_bytes() == data
    assert used in ("copy", mode)
    if used == "hardlink":
        assert os.stat(src).st_ino == os.stat(part).st_ino
    else:
        assert sum(counted) == len(data) - (w.CHUNK + 5)
    with pytest.raises(w.PermanentError, match="does not match"):
        w.copy_local(str(src), str(tmp_path / "other.part"), dict(entry(data), digest="0" * 64), mode, counted.append)
    assert not (tmp_path / "other.part").exists()


def test_copy_local_falls_back_to_sendfile_where_copy_file_range_is_refused(tmp_path, monkeypatch):
    def refuse(*args):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(w.os, "copy_file_range", refuse)
    data = os.urandom(100000)
    (tmp_path / "src").write_bytes(data)
    w.copy_local(str(tmp_path / "src"), str(tmp_path / "dst.part"), entry(data), "copy", lambda n: None)
    assert (tmp_path / "dst.part").read_bytes() == data


def test_signed_urls_lose_their_query_strings():
    text = "404 for url 'https://cdn.example/blob/abc?name=x&sig=SECRET&X-Amz-Signature=S2' then http://h/p"
    masked = w.mask_secrets(text)
    assert "SECRET" not in masked and "S2" not in masked and "sig=" not in masked
    assert "https://cdn.example/blob/abc?<query hidden>" in masked and masked.endswith("http://h/p")


@pytest.mark.parametrize("repo_id", ["Qwen/Qwen3.6-27B", "gpt2", "z-lab/Qwen3.6-27B-DFlash", "a_b/c.d"])
def test_hub_repository_ids_are_accepted(repo_id):
    assert w.check_repo_id(repo_id) == repo_id


@pytest.mark.parametrize("repo_id", ["../..", "a/../b", "a/b/c", "a//b", "-a/b", "a/b.", "a--b/c", "a/b.git",
                                     "/a/b", "a/b ", "", "a/" + "b" * 97])
def test_repository_ids_outside_the_hub_syntax_are_refused(repo_id):
    with pytest.raises(w.WeightsError, match="repo_id"):
        w.check_repo_id(repo_id)


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "0123456789abcdef0123456789abcdef01234567"])
def test_revisions_that_are_commits_or_ref_names_are_accepted(revision):
    assert w.check_revision(revision) == revision


@pytest.mark.parametrize("revision", ["../..", "a/../b", "..", "a/.hidden", "/main", "main/", "a b", "x.lock",
                                      "a@{1}", "a//b", "~1", ""])
def test_revisions_that_could_leave_a_path_or_are_no_ref_names_are_refused(revision):
    with pytest.raises(w.WeightsError, match="revision"):
        w.check_revision(revision)


@pytest.mark.parametrize("url", ["file:///etc", "ftp://mirror/models", "mirror/models", "http://", ""])
def test_only_http_and_https_mirrors_are_accepted(url):
    with pytest.raises(w.WeightsError, match="mirror_url .* must be an http:// or https:// URL"):
        w.HttpSource(url)


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
    source = w.HttpSource("http://127.0.0.1:%d/m" % server.server_port, timeout=5)
    with pytest.raises(w.PermanentError, match=r"redirected to ftp://127.0.0.1/secret\?<query hidden>: only"):
        source.read_text("manifest.json")
    server.server_close()


class BodyServer:
    """One file over real HTTP on loopback, with Range; chunked or stalling when asked."""

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
                    time.sleep(3)
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if stall_after is None:
                    self.wfile.write(body)
                else:
                    self.wfile.write(body[:stall_after])
                    self.wfile.flush()
                    time.sleep(3)

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

    monkeypatch.setattr(w.os, "splice", counting)
    return calls


def test_a_plain_http_body_goes_from_the_socket_into_the_file_by_splice_and_resumes_with_range(tmp_path, splices):
    data = os.urandom(3 * w.PIECE + 12345)
    server = BodyServer(data)
    part = tmp_path / "f.part"
    part.write_bytes(data[:1000])
    try:
        got = w.transfer(w.HttpSource(server.url, timeout=5), "f", str(part), entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert got == len(data) - 1000 and part.read_bytes() == data
    assert server.ranges == ["bytes=1000-"]
    assert splices.count(True) >= 3   # at least one splice into the file per piece


def test_a_spliced_body_ends_where_its_content_length_says_and_the_rest_comes_with_range(tmp_path, splices):
    data = os.urandom(w.PIECE + 5000)
    server = BodyServer(data, first_short_by=4000)
    part = tmp_path / "f.part"
    started = time.monotonic()
    try:
        w.transfer(w.HttpSource(server.url, timeout=5), "f", str(part), entry(data), 1, lambda n: None)
    finally:
        server.close()
    assert time.monotonic() - started < 2   # no wait for the socket's end after the announced length
    assert server.ranges == [None, "bytes=%d-" % (len(data) - 4000)] and part.read_bytes() == data


def test_a_chunked_body_is_read_and_written_not_spliced(tmp_path, splices):
    data = os.urandom(w.PIECE + 777)
    server = BodyServer(data, chunked=True)
    part = tmp_path / "f.part"
    try:
        w.transfer(w.HttpSource(server.url, timeout=5), "f", str(part), entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert part.read_bytes() == data and splices == []   # the chunk framing never reaches the file


def test_short_splices_into_the_file_are_continued(tmp_path, monkeypatch):
    real = os.splice

    def short(src, dst, count, offset_src=None, offset_dst=None, flags=0):
        return real(src, dst, min(count, 1000) if offset_dst is not None else count, offset_src, offset_dst, flags)

    monkeypatch.setattr(w.os, "splice", short)
    data = os.urandom(w.PIECE + 4321)
    server = BodyServer(data)
    part = tmp_path / "f.part"
    try:
        w.transfer(w.HttpSource(server.url, timeout=5), "f", str(part), entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert part.read_bytes() == data


def test_a_spliced_body_that_stalls_fails_after_the_timeout_and_keeps_what_arrived(tmp_path, splices):
    data = os.urandom(w.PIECE)
    server = BodyServer(data, stall_after=300000)
    part = tmp_path / "f.part"
    started = time.monotonic()
    try:
        with pytest.raises(w.WeightsError, match="giving up after 1 attempt.*no data for 1 s"):
            w.transfer(w.HttpSource(server.url, timeout=1), "f", str(part), entry(data), 0, lambda n: None)
    finally:
        server.close()
    assert time.monotonic() - started < 2.5
    assert splices and part.read_bytes() == data[:300000]


@pytest.mark.parametrize("staging", ["transfer", "copy"])
def test_finished_ranges_are_handed_to_the_disk_while_the_rest_arrives(tmp_path, monkeypatch, staging):
    started = []
    monkeypatch.setattr(w, "WRITE_BEHIND", 2 * w.PIECE)
    monkeypatch.setattr(w.WriteBehind, "start_writeback",
                        staticmethod(lambda fd, offset, count, flags: started.append((offset, count, flags))))
    data = os.urandom(5 * w.PIECE + 3)
    part = tmp_path / "f.part"
    if staging == "transfer":
        w.transfer(FlakySource(data, []), "f", str(part), entry(data), 0, lambda n: None)
        assert started == [(0, 2 * w.PIECE, w.SYNC_FILE_RANGE_WRITE),
                           (2 * w.PIECE, 2 * w.PIECE, w.SYNC_FILE_RANGE_WRITE)]
    else:
        (tmp_path / "src").write_bytes(data)
        w.copy_local(str(tmp_path / "src"), str(part), entry(data), "copy", lambda n: None)
        assert started == [(0, len(data), w.SYNC_FILE_RANGE_WRITE)]   # one kernel copy step
    assert part.read_bytes() == data


LOCK = {"repo_id": "org/model", "commit": "c" * 40, "files": [
    {"path": "config.json", "size": 2, "sha256": "1" * 64}, {"path": "w.safetensors", "size": 9, "sha256": "2" * 64}]}


def test_a_lock_file_must_be_for_the_repository_and_commit_asked_for():
    commit, files = w.lock_files(LOCK, "org/model", "c" * 40)
    assert commit == "c" * 40 and files["w.safetensors"] == {"size": 9, "algo": "sha256", "digest": "2" * 64}
    with pytest.raises(w.WeightsError, match="lock file is for repository 'org/model', not 'org/other'"):
        w.lock_files(LOCK, "org/other", "c" * 40)
    with pytest.raises(w.WeightsError, match="pins commit c+, the revision asked for is d+"):
        w.lock_files(LOCK, "org/model", "d" * 40)
    with pytest.raises(w.WeightsError, match="every file needs a sha256"):
        w.lock_files(dict(LOCK, files=[{"path": "a", "size": 1, "git_sha1": "e" * 40}]), "org/model", "c" * 40)


def test_a_source_that_differs_from_the_lock_is_refused_naming_each_file():
    _commit, locked = w.lock_files(LOCK, "org/model", "c" * 40)
    blob_id = {"size": 2, "algo": "git_sha1", "digest": "f" * 40}   # a small hub file: its size is compared
    w.check_against_lock({"config.json": blob_id, "w.safetensors": locked["w.safetensors"]}, locked, "the mirror")
    offered = {"config.json": blob_id, "w.safetensors": {"size": 9, "algo": "sha256", "digest": "3" * 64},
               "extra.bin": {"size": 1, "algo": "sha256", "digest": "4" * 64}}
    with pytest.raises(w.PermanentError) as failure:
        w.check_against_lock(offered, locked, "the mirror")
    message = str(failure.value)
    assert message.startswith("the mirror differs from the lock file: ")
    assert "w.safetensors: sha256 3333" in message and "extra.bin is offered but not in the lock file" in message
    assert "config.json" not in message
    with pytest.raises(w.PermanentError, match="config.json: size 3, the lock file says 2"):
        w.check_against_lock(dict(locked, **{"config.json": dict(blob_id, size=3)}), locked, "the hub")


def test_a_manifest_for_another_repository_or_revision_is_refused():
    text = json.dumps({"repo_id": "org/model", "revision": "c" * 40, "files": LOCK["files"]})
    assert len(w.parse_manifest_document(text, "m", "org/model", "c" * 40)) == 2
    with pytest.raises(w.PermanentError, match="describes revision"):
        w.parse_manifest_document(text, "m", "org/model", "d" * 40)
    with pytest.raises(w.PermanentError, match="describes repo_id"):
        w.parse_manifest_document(text, "m", "org/else", "c" * 40)


# ----------------------------------------------------------------- root never follows a link (issue 36, finding 2)

def root_file(tmp_path, mode, data=b"root's own file\n"):
    """A file root owns outside every tree the module keeps, as /etc/shadow is."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    target = outside / ("file-%o" % mode)
    target.write_bytes(data)
    target.chmod(mode)
    return target


def state_of(path):
    stat = os.lstat(path)
    return stat.st_uid, stat.st_gid, stat.st_mode & 0o7777, path.read_bytes()


def test_a_link_planted_at_the_lock_is_refused_and_its_target_is_not_truncated(tmp_path):
    revs = tmp_path / "model.revs"
    revs.mkdir()
    target = root_file(tmp_path, 0o600)
    (revs / ".lock").symlink_to(target)
    before = state_of(target)
    with pytest.raises(w.WeightsError, match=r"\.lock is a symbolic link: refused"):
        w.open_lock(str(revs))
    assert state_of(target) == before and (revs / ".lock").is_symlink()


def test_a_link_as_the_directory_of_the_lock_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "model.revs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(w.WeightsError, match="model.revs is a symbolic link: refused"):
        w.open_lock(str(tmp_path / "model.revs"))
    assert os.listdir(tmp_path / "elsewhere") == []


def test_the_lock_is_roots_regular_file_and_opening_it_keeps_its_content(tmp_path):
    revs = tmp_path / "model.revs"
    revs.mkdir()
    (revs / ".lock").write_bytes(b"kept")
    os.chmod(revs / ".lock", 0o666)
    fd = w.open_lock(str(revs))
    os.close(fd)
    assert state_of(revs / ".lock") == (os.geteuid(), os.getegid(), 0o600, b"kept")
    os.unlink(revs / ".lock")
    os.mkfifo(revs / ".lock")
    with pytest.raises(w.WeightsError, match="cannot be opened as the module's lock"):
        w.open_lock(str(revs))


def racing_move(link_to):
    """atomic_move, then what another account that could write the directory does in the window
    before the mode is set: it puts a link where the file just landed."""
    def move(src, dest):
        os.replace(src, dest)
        os.unlink(dest)
        os.symlink(link_to, dest)
    return move


@pytest.mark.parametrize("name, mode", [(w.JOURNAL_NAME, 0o600), (w.MARKER_NAME, 0o644)],
                         ids=["journal", "marker"])
def test_a_link_swapped_in_before_the_mode_is_set_is_refused_and_its_target_keeps_its_mode(tmp_path, name, mode):
    # The records were chmodded by path: a root file was re-moded through the link (0600 to 0644
    # exposes it, 0644 to 0600 breaks it).
    target = root_file(tmp_path, 0o640)
    before = state_of(target)
    with pytest.raises(OSError) as raised:
        w.write_json_atomic(str(tmp_path / name), {"files": {}}, mode, racing_move(target))
    assert raised.value.errno == errno.ELOOP
    assert state_of(target) == before


def test_a_journal_planted_as_a_link_is_not_read(tmp_path):
    # A journal is what lets a resumed run trust a file without hashing it: one read through a
    # link could vouch for anything (and reads a root-only file).
    forged = tmp_path / "forged.json"
    (tmp_path / "staging").mkdir()
    staging = tmp_path / "staging"
    (staging / "f").write_bytes(b"bad")
    state = w.file_state(str(staging / "f"))
    forged.write_text(json.dumps({"files": {"f": dict(state, digest=entry(b"good")["digest"])}}))
    (staging / w.JOURNAL_NAME).symlink_to(forged)
    journal = w.Journal(str(staging))
    assert journal.entries == {} and not journal.trusted(str(staging), "f", entry(b"good"))
    # Recording replaces the link by the journal itself; the forged file stays as it was.
    before = state_of(forged)
    journal.record(str(staging), "f", entry(b"bad"))
    assert not (staging / w.JOURNAL_NAME).is_symlink() and state_of(forged) == before
    assert w.read_json(str(staging / w.JOURNAL_NAME))["files"]["f"]["digest"] == entry(b"bad")["digest"]


def test_a_marker_planted_as_a_link_is_no_verified_copy(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"files": {}, "repo_id": "root-only"}))
    elsewhere.chmod(0o600)
    (copy / w.MARKER_NAME).symlink_to(elsewhere)
    assert w.copy_marker(str(copy)) is None


def test_tree_ownership_gives_directories_and_records_to_root_and_files_to_the_owner(tmp_path):
    tree = tmp_path / "copy"
    (tree / "sub").mkdir(parents=True)
    for name in ("a", "sub/b", w.MARKER_NAME, w.JOURNAL_NAME):
        (tree / name).write_bytes(b"x")
    nobody = 65534
    os.chown(tree, nobody, nobody)
    os.chown(tree / "sub", nobody, nobody)
    assert w.apply_tree_ownership(str(tree), nobody, 0, 0o750, 0o640)
    owners = {str(p.relative_to(tree)): (os.lstat(p).st_uid, os.lstat(p).st_gid, os.lstat(p).st_mode & 0o7777)
              for p in [tree] + sorted(tree.rglob("*"))}
    assert owners == {".": (0, 0, 0o750), "sub": (0, 0, 0o750), "a": (nobody, 0, 0o640), "sub/b": (nobody, 0, 0o640),
                      w.MARKER_NAME: (0, 0, 0o640), w.JOURNAL_NAME: (0, 0, 0o600)}
    assert not w.apply_tree_ownership(str(tree), nobody, 0, 0o750, 0o640)


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_link_in_a_tree_is_refused_or_removed_never_followed(tmp_path, kind):
    target = root_file(tmp_path, 0o600)
    tree = tmp_path / "copy"
    tree.mkdir()
    (tree / "planted").symlink_to(target if kind == "file" else target.parent)
    before = state_of(target), os.lstat(target.parent)
    with pytest.raises(w.WeightsError, match="planted is a symbolic link: refused"):
        w.apply_tree_ownership(str(tree), 65534, 65534, 0o755, 0o644)
    assert w.apply_tree_ownership(str(tree), 65534, 65534, 0o755, 0o644, links="remove")
    assert not os.path.lexists(tree / "planted")
    assert (state_of(target), os.lstat(target.parent)) == before


@pytest.mark.parametrize("value", ["/", "srv/models", "/srv/models/", "/srv/../etc", "/srv/models\n/x", "/srv/\x00m",
                                   "/srv/m\udcff"])
def test_a_model_root_must_be_a_plain_absolute_directory(value):
    with pytest.raises(w.WeightsError, match="must be an absolute, normalised directory path other than '/'"):
        w.check_dir_path(value, "model_weights_root")
    assert w.check_dir_path("/srv/models", "model_weights_root") == "/srv/models"


@pytest.mark.parametrize("value", ["/etc/shadow", "../manifest.json", "a/../../b", "m\nx.json", "", "./m.json",
                                   "m\udcff.json", None])
def test_a_manifest_name_must_stay_inside_the_source(value):
    with pytest.raises(w.WeightsError, match="must be a file name inside the mirror's revision or the source path"):
        w.check_manifest_name(value)
    assert w.check_manifest_name("sub/manifest.json") == "sub/manifest.json"


def test_a_manifest_path_that_is_not_utf8_or_holds_a_control_character_is_refused():
    for path in ("m\udcff.bin", "a\nb.bin"):
        with pytest.raises(w.WeightsError, match="unsafe file path in manifest"):
            w.normalize_manifest([{"path": path, "size": 1, "sha256": "0" * 64}])

"""Manifests, digests, resumable transfers, markers and config checks of _weights."""
import hashlib
import io
import os

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
    with pytest.raises(w.WeightsError, match="connection ended at byte 100 of 1000"):
        w.transfer(FlakySource(data, [100, 0]), "f", str(part), entry(data), 1, lambda n: None)
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


def test_quick_check_hashes_only_touched_files(tmp_path, monkeypatch):
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode() * 10)
    marker = {"files": {name: dict(entry(name.encode() * 10), **w.file_state(str(tmp_path / name)))
                        for name in ("a", "b", "c")}}
    hashed = []
    real = w.file_digest
    monkeypatch.setattr(w, "file_digest", lambda path, algo: hashed.append(os.path.basename(path)) or real(path, algo))
    assert w.quick_check(str(tmp_path), marker, False, 2) == []
    assert hashed == []
    (tmp_path / "b").write_bytes(b"B" * 10)          # same size, new content and mtime
    (tmp_path / "c").unlink()
    assert w.quick_check(str(tmp_path), marker, False, 2) == ["b", "c"]
    assert hashed == ["b"]
    hashed.clear()
    os.utime(tmp_path / "a", ns=(1, 1))               # touched but identical: hashed, still good
    assert w.quick_check(str(tmp_path), marker, False, 2) == ["b", "c"]
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

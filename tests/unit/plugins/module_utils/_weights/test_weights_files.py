"""Digests, ownership, free space and the link switch of the weights engine's file primitives."""
import os


from ansible_collections.pro6000.inference.plugins.module_utils._weights import files


def test_git_blob_digest_is_the_one_git_computes(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert files.file_digest(str(empty), "git_sha1") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    hello = tmp_path / "hello"
    hello.write_bytes(b"hello\n")
    assert files.file_digest(str(hello), "git_sha1") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_apply_ownership_reports_and_fixes_modes(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"")
    os.chmod(f, 0o600)
    assert files.apply_ownership(str(f), None, None, 0o644, dry_run=True)
    assert os.stat(f).st_mode & 0o777 == 0o600
    assert files.apply_ownership(str(f), None, None, 0o644)
    assert not files.apply_ownership(str(f), None, None, 0o644)


def test_free_bytes_walks_up_to_an_existing_directory(tmp_path):
    free, where = files.free_bytes(str(tmp_path / "not" / "yet"))
    assert where == str(tmp_path) and free > 0


def test_switch_link_replaces_the_link_atomically(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = str(tmp_path / "model")
    files.switch_link(link, "a")
    files.switch_link(link, "b")
    assert os.readlink(link) == "b"
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "model"]

"""The trees model_stage keeps: markers, journals, the quick check, ownership, the lock of
<dest>.revs, and links planted anywhere refused, never followed."""
import errno
import json
import os

import pytest
from support import manifest_entry

from ansible_collections.pro6000.inference.plugins.module_utils._weights import errors
from ansible_collections.pro6000.inference.plugins.module_utils._weights import files
from ansible_collections.pro6000.inference.plugins.module_utils._weights import tree


def test_verify_files_reports_only_mismatches(tmp_path):
    (tmp_path / "good").write_bytes(b"good")
    (tmp_path / "bad").write_bytes(b"bad!")
    manifest = {"good": manifest_entry(b"good"), "bad": manifest_entry(b"bad?")}
    assert tree.verify_files(str(tmp_path), manifest, ["good", "bad"], 4) == ["bad"]


def test_quick_check_hashes_only_touched_files_and_reports_their_new_times(tmp_path, monkeypatch):
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode() * 10)
    marker = {"files": {name: dict(manifest_entry(name.encode() * 10), **tree.file_state(str(tmp_path / name)))
                        for name in ("a", "b", "c")}}
    hashed = []
    real = files.file_digest
    monkeypatch.setattr(tree, "file_digest", lambda path, algo: hashed.append(os.path.basename(path)) or real(path, algo))
    assert tree.quick_check(str(tmp_path), marker, False, 2) == ([], {})
    assert hashed == []
    (tmp_path / "b").write_bytes(b"B" * 10)          # same size, new content and mtime
    (tmp_path / "c").unlink()
    assert tree.quick_check(str(tmp_path), marker, False, 2) == (["b", "c"], {})
    assert hashed == ["b"]
    hashed.clear()
    os.utime(tmp_path / "a", ns=(1, 1))               # touched but identical: hashed, still good
    bad, refreshed = tree.quick_check(str(tmp_path), marker, False, 2)
    assert bad == ["b", "c"] and refreshed == {"a": {"size": 10, "mtime_ns": 1}}
    assert sorted(hashed) == ["a", "b"]
    hashed.clear()
    tree.quick_check(str(tmp_path), marker, True, 2)
    assert sorted(hashed) == ["a", "b"]               # full: every present file


def test_journal_trusts_only_unchanged_recorded_files(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    journal = tree.Journal(str(tmp_path))
    journal.record(str(tmp_path), "f", manifest_entry(b"abc"))
    again = tree.Journal(str(tmp_path))
    assert again.trusted(str(tmp_path), "f", manifest_entry(b"abc"))
    assert not again.trusted(str(tmp_path), "f", manifest_entry(b"abd"))
    (tmp_path / "f").write_bytes(b"abd")
    os.utime(tmp_path / "f", ns=(5, 5))
    assert not again.trusted(str(tmp_path), "f", manifest_entry(b"abc"))


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
    with pytest.raises(errors.WeightsError, match=r"\.lock is a symbolic link: refused"):
        tree.open_lock(str(revs))
    assert state_of(target) == before and (revs / ".lock").is_symlink()


def test_a_link_as_the_directory_of_the_lock_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "model.revs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(errors.WeightsError, match="model.revs is a symbolic link: refused"):
        tree.open_lock(str(tmp_path / "model.revs"))
    assert os.listdir(tmp_path / "elsewhere") == []


def test_the_lock_is_roots_regular_file_and_opening_it_keeps_its_content(tmp_path):
    revs = tmp_path / "model.revs"
    revs.mkdir()
    (revs / ".lock").write_bytes(b"kept")
    os.chmod(revs / ".lock", 0o666)
    fd = tree.open_lock(str(revs))
    os.close(fd)
    assert state_of(revs / ".lock") == (os.geteuid(), os.getegid(), 0o600, b"kept")
    os.unlink(revs / ".lock")
    os.mkfifo(revs / ".lock")
    with pytest.raises(errors.WeightsError, match="cannot be opened as the module's lock"):
        tree.open_lock(str(revs))


def racing_move(link_to):
    """atomic_move, then what another account that could write the directory does in the window
    before the mode is set: it puts a link where the file just landed."""
    def move(src, dest):
        os.replace(src, dest)
        os.unlink(dest)
        os.symlink(link_to, dest)
    return move


@pytest.mark.parametrize("name, mode", [(tree.JOURNAL_NAME, 0o600), (tree.MARKER_NAME, 0o644)],
                         ids=["journal", "marker"])
def test_a_link_swapped_in_before_the_mode_is_set_is_refused_and_its_target_keeps_its_mode(tmp_path, name, mode):
    # The records were chmodded by path: a root file was re-moded through the link (0600 to 0644
    # exposes it, 0644 to 0600 breaks it).
    target = root_file(tmp_path, 0o640)
    before = state_of(target)
    with pytest.raises(OSError) as raised:
        tree.write_json_atomic(str(tmp_path / name), {"files": {}}, mode, racing_move(target))
    assert raised.value.errno == errno.ELOOP
    assert state_of(target) == before


def test_a_journal_planted_as_a_link_is_not_read(tmp_path):
    # A journal is what lets a resumed run trust a file without hashing it: one read through a
    # link could vouch for anything (and reads a root-only file).
    forged = tmp_path / "forged.json"
    (tmp_path / "staging").mkdir()
    staging = tmp_path / "staging"
    (staging / "f").write_bytes(b"bad")
    state = tree.file_state(str(staging / "f"))
    forged.write_text(json.dumps({"files": {"f": dict(state, digest=manifest_entry(b"good")["digest"])}}))
    (staging / tree.JOURNAL_NAME).symlink_to(forged)
    journal = tree.Journal(str(staging))
    assert journal.entries == {} and not journal.trusted(str(staging), "f", manifest_entry(b"good"))
    # Recording replaces the link by the journal itself; the forged file stays as it was.
    before = state_of(forged)
    journal.record(str(staging), "f", manifest_entry(b"bad"))
    assert not (staging / tree.JOURNAL_NAME).is_symlink() and state_of(forged) == before
    assert tree.read_json(str(staging / tree.JOURNAL_NAME))["files"]["f"]["digest"] == manifest_entry(b"bad")["digest"]


def test_a_marker_planted_as_a_link_is_no_verified_copy(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"files": {}, "repo_id": "root-only"}))
    elsewhere.chmod(0o600)
    (copy / tree.MARKER_NAME).symlink_to(elsewhere)
    assert tree.copy_marker(str(copy)) is None


def test_tree_ownership_gives_directories_and_records_to_root_and_files_to_the_owner(tmp_path):
    root = tmp_path / "copy"
    (root / "sub").mkdir(parents=True)
    for name in ("a", "sub/b", tree.MARKER_NAME, tree.JOURNAL_NAME):
        (root / name).write_bytes(b"x")
    nobody = 65534
    os.chown(root, nobody, nobody)
    os.chown(root / "sub", nobody, nobody)
    assert tree.apply_tree_ownership(str(root), nobody, 0, 0o750, 0o640)
    owners = {str(p.relative_to(root)): (os.lstat(p).st_uid, os.lstat(p).st_gid, os.lstat(p).st_mode & 0o7777)
              for p in [root] + sorted(root.rglob("*"))}
    assert owners == {".": (0, 0, 0o750), "sub": (0, 0, 0o750), "a": (nobody, 0, 0o640), "sub/b": (nobody, 0, 0o640),
                      tree.MARKER_NAME: (0, 0, 0o640), tree.JOURNAL_NAME: (0, 0, 0o600)}
    assert not tree.apply_tree_ownership(str(root), nobody, 0, 0o750, 0o640)


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_link_in_a_tree_is_refused_or_removed_never_followed(tmp_path, kind):
    target = root_file(tmp_path, 0o600)
    root = tmp_path / "copy"
    root.mkdir()
    (root / "planted").symlink_to(target if kind == "file" else target.parent)
    before = state_of(target), os.lstat(target.parent)
    with pytest.raises(errors.WeightsError, match="planted is a symbolic link: refused"):
        tree.apply_tree_ownership(str(root), 65534, 65534, 0o755, 0o644)
    assert tree.apply_tree_ownership(str(root), 65534, 65534, 0o755, 0o644, links="remove")
    assert not os.path.lexists(root / "planted")
    assert (state_of(target), os.lstat(target.parent)) == before

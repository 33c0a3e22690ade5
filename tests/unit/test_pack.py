"""tests/scripts/pack.py, the one archive per set of files that a prepare playbook unpacks in a
container: what it holds, where it puts it, and when it is built again."""
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import time

import pytest

PACK = pathlib.Path(__file__).resolve().parents[2] / "tests" / "scripts" / "pack.py"


def pack(cache, name, *pairs):
    run = subprocess.run([sys.executable, str(PACK), str(cache), name, *pairs],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture
def sources(tmp_path):
    tree = tmp_path / "double"
    (tree / "pkg" / "__pycache__").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("print('double')\n")
    (tree / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0cache")
    (tree / "stray.pyc").write_bytes(b"\0cache")
    tool = tree / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    single = tmp_path / "load.py"
    single.write_text("load\n")
    return tree, single


def test_each_source_goes_to_its_destination_with_its_modes_and_no_caches(tmp_path, sources):
    tree, single = sources
    packed = pack(tmp_path / "cache", "set", "%s=/usr/local/src/double" % tree, "%s=/usr/local/bin/load" % single)
    assert packed["built"] is True
    with tarfile.open(packed["path"]) as tar:
        members = {member.name: member for member in tar.getmembers()}
        assert sorted(members) == ["usr/local/bin/load", "usr/local/src/double", "usr/local/src/double/pkg",
                                   "usr/local/src/double/pkg/mod.py", "usr/local/src/double/tool"]
        assert {(member.uid, member.gid, member.uname) for member in members.values()} == {(0, 0, "root")}
        assert members["usr/local/src/double/tool"].mode == 0o755
        root = tmp_path / "root"
        tar.extractall(root, filter="tar")
    assert (root / "usr/local/src/double/pkg/mod.py").read_text() == "print('double')\n"
    assert (root / "usr/local/bin/load").read_text() == "load\n"
    assert os.access(root / "usr/local/src/double/tool", os.X_OK)


def test_the_archive_is_built_again_only_when_a_member_changes(tmp_path, sources):
    tree, _single = sources
    pair = "%s=/srv/double" % tree
    first = pack(tmp_path / "cache", "set", pair)
    again = pack(tmp_path / "cache", "set", pair)
    assert again == dict(first, built=False)
    # A cache the controller's Python writes is no input.
    (tree / "pkg" / "__pycache__" / "other.cpython-311.pyc").write_bytes(b"\0more")
    assert pack(tmp_path / "cache", "set", pair) == again
    (tree / "tool").chmod(0o644)
    mode_changed = pack(tmp_path / "cache", "set", pair)
    assert mode_changed["built"] is True and mode_changed["path"] != first["path"]
    (tree / "pkg" / "mod.py").write_text("print('changed')\n")
    content_changed = pack(tmp_path / "cache", "set", pair)
    assert content_changed["built"] is True and content_changed["path"] not in (first["path"], mode_changed["path"])
    assert sorted(path.name for path in (tmp_path / "cache").iterdir()) == sorted(
        pathlib.Path(packed["path"]).name for packed in (first, mode_changed, content_changed))


def test_a_new_archive_removes_those_of_its_name_no_run_packed_for_an_hour(tmp_path, sources):
    tree, single = sources
    cache = tmp_path / "cache"
    old = pack(cache, "set", "%s=/srv/double" % tree)["path"]
    reused = pack(cache, "set", "%s=/srv/double" % single)["path"]
    other_name = pack(cache, "set-other", "%s=/srv/double" % tree)["path"]
    hours_ago = time.time() - 2 * 3600
    for path in (old, reused, other_name):
        os.utime(path, (hours_ago, hours_ago))
    # Packed again unchanged by a run: that run may be about to unpack it.
    assert pack(cache, "set", "%s=/srv/double" % single) == {"path": reused, "built": False}
    (tree / "pkg" / "mod.py").write_text("print('changed')\n")
    new = pack(cache, "set", "%s=/srv/double" % tree)["path"]
    assert sorted(path.name for path in cache.iterdir()) == sorted(
        pathlib.Path(path).name for path in (reused, other_name, new))


@pytest.mark.parametrize("pair, said", [
    ("{tree}=srv/double", "is not an absolute path in the container"),
    ("{tree}/missing=/srv/double", "does not exist"),
])
def test_a_bad_pair_stops_before_anything_is_written(tmp_path, sources, pair, said):
    tree, _single = sources
    run = subprocess.run([sys.executable, str(PACK), str(tmp_path / "cache"), "set", pair.format(tree=tree)],
                         capture_output=True, text=True, check=False)
    assert run.returncode != 0 and said in run.stderr
    assert not (tmp_path / "cache").exists()

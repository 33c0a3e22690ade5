"""Copies from a local source: every link mode checks the digest and resumes; sendfile stands in
where copy_file_range is refused."""
import errno
import os

import pytest
from support import manifest_entry

from ansible_collections.pro6000.inference.plugins.module_utils._weights import copy
from ansible_collections.pro6000.inference.plugins.module_utils._weights import errors
from ansible_collections.pro6000.inference.plugins.module_utils._weights import files


@pytest.mark.parametrize("mode", ["copy", "reflink", "hardlink"])
def test_copy_local_copies_checks_the_digest_and_resumes(tmp_path, mode):
    data = os.urandom(3 * files.CHUNK + 17)
    src = tmp_path / "src"
    src.write_bytes(data)
    part = tmp_path / "dst.part"
    part.write_bytes(data[:files.CHUNK + 5])              # left by an earlier run
    counted = []
    used = copy.copy_local(str(src), str(part), manifest_entry(data), mode, counted.append)
    assert part.read_bytes() == data
    assert used in ("copy", mode)
    if used == "hardlink":
        assert os.stat(src).st_ino == os.stat(part).st_ino
    else:
        assert sum(counted) == len(data) - (files.CHUNK + 5)
    with pytest.raises(errors.PermanentError, match="does not match"):
        copy.copy_local(str(src), str(tmp_path / "other.part"), dict(manifest_entry(data), digest="0" * 64), mode, counted.append)
    assert not (tmp_path / "other.part").exists()


def test_copy_local_falls_back_to_sendfile_where_copy_file_range_is_refused(tmp_path, monkeypatch):
    def refuse(*args):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    data = os.urandom(100000)
    (tmp_path / "src").write_bytes(data)
    copy.copy_local(str(tmp_path / "src"), str(tmp_path / "dst.part"), manifest_entry(data), "copy", lambda n: None)
    assert (tmp_path / "dst.part").read_bytes() == data

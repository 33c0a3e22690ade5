"""Manifests and the site's lock files: what a copy must hold, and a source that differs refused."""
import json

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils._weights import errors
from ansible_collections.pro6000.inference.plugins.module_utils._weights import lock


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "a//b", "", ".model_weights.json",
                                  ".staging-abc/x", "a\\b"])
def test_manifest_refuses_paths_that_leave_the_tree_or_clash_with_bookkeeping(path):
    with pytest.raises(errors.WeightsError):
        lock.normalize_manifest([{"path": path, "size": 1, "sha256": "0" * 64}])


def test_manifest_takes_sha256_or_git_blob_ids_and_refuses_duplicates_and_missing_digests():
    files = lock.normalize_manifest([{"path": "a/b.safetensors", "size": 3, "sha256": "A" * 64},
                                     {"path": "config.json", "size": 2, "git_sha1": "b" * 40}])
    assert files["a/b.safetensors"] == {"size": 3, "algo": "sha256", "digest": "a" * 64}
    assert files["config.json"]["algo"] == "git_sha1"
    with pytest.raises(errors.WeightsError, match="duplicate"):
        lock.normalize_manifest([{"path": "x", "size": 1, "sha256": "0" * 64}] * 2)
    with pytest.raises(errors.WeightsError, match="neither"):
        lock.normalize_manifest([{"path": "x", "size": 1, "sha256": "short"}])
    with pytest.raises(errors.WeightsError, match="size"):
        lock.normalize_manifest([{"path": "x", "size": True, "sha256": "0" * 64}])
    with pytest.raises(errors.WeightsError, match="no files"):
        lock.normalize_manifest([])


def test_a_manifest_path_that_is_not_utf8_or_holds_a_control_character_is_refused():
    for path in ("m\udcff.bin", "a\nb.bin"):
        with pytest.raises(errors.WeightsError, match="unsafe file path in manifest"):
            lock.normalize_manifest([{"path": path, "size": 1, "sha256": "0" * 64}])


LOCK = {"repo_id": "org/model", "commit": "c" * 40, "files": [
    {"path": "config.json", "size": 2, "sha256": "1" * 64}, {"path": "w.safetensors", "size": 9, "sha256": "2" * 64}]}


def test_a_lock_file_must_be_for_the_repository_and_commit_asked_for():
    commit, files = lock.lock_files(LOCK, "org/model", "c" * 40)
    assert commit == "c" * 40 and files["w.safetensors"] == {"size": 9, "algo": "sha256", "digest": "2" * 64}
    with pytest.raises(errors.WeightsError, match="lock file is for repository 'org/model', not 'org/other'"):
        lock.lock_files(LOCK, "org/other", "c" * 40)
    with pytest.raises(errors.WeightsError, match="pins commit c+, the revision asked for is d+"):
        lock.lock_files(LOCK, "org/model", "d" * 40)
    with pytest.raises(errors.WeightsError, match="every file needs a sha256"):
        lock.lock_files(dict(LOCK, files=[{"path": "a", "size": 1, "git_sha1": "e" * 40}]), "org/model", "c" * 40)


def test_a_source_that_differs_from_the_lock_is_refused_naming_each_file():
    _commit, locked = lock.lock_files(LOCK, "org/model", "c" * 40)
    blob_id = {"size": 2, "algo": "git_sha1", "digest": "f" * 40}   # a small hub file: its size is compared
    lock.check_against_lock({"config.json": blob_id, "w.safetensors": locked["w.safetensors"]}, locked, "the mirror")
    offered = {"config.json": blob_id, "w.safetensors": {"size": 9, "algo": "sha256", "digest": "3" * 64},
               "extra.bin": {"size": 1, "algo": "sha256", "digest": "4" * 64}}
    with pytest.raises(errors.PermanentError) as failure:
        lock.check_against_lock(offered, locked, "the mirror")
    message = str(failure.value)
    assert message.startswith("the mirror differs from the lock file: ")
    assert "w.safetensors: sha256 3333" in message and "extra.bin is offered but not in the lock file" in message
    assert "config.json" not in message
    with pytest.raises(errors.PermanentError, match="config.json: size 3, the lock file says 2"):
        lock.check_against_lock(dict(locked, **{"config.json": dict(blob_id, size=3)}), locked, "the hub")


def test_a_manifest_for_another_repository_or_revision_is_refused():
    text = json.dumps({"repo_id": "org/model", "revision": "c" * 40, "files": LOCK["files"]})
    assert len(lock.parse_manifest_document(text, "m", "org/model", "c" * 40)) == 2
    with pytest.raises(errors.PermanentError, match="describes revision"):
        lock.parse_manifest_document(text, "m", "org/model", "d" * 40)
    with pytest.raises(errors.PermanentError, match="describes repo_id"):
        lock.parse_manifest_document(text, "m", "org/else", "c" * 40)

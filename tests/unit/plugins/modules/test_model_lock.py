"""model_lock against the hub double (tests/fixtures/hub_double) through the real huggingface_hub
client of the test environment. The truths: the commits and files tests/fixtures/weights/generate.py
wrote (its mirror manifests carry every file's size and sha256), and the text the collection's
helper prints for the same commit (`_weights_hub_helper.py lock`)."""
import contextlib
import io
import json
import os
import pathlib
import sys
from unittest import mock

import pytest
from ansible.module_utils import _internal as module_utils_internal
from ansible.module_utils.testing import patch_module_args

from ansible_collections.pro6000.inference.plugins.modules import model_lock
from support import HubDouble, as_the_controller_takes, weights_commit as commit

TOKEN = "hf_lock_unit_token"
TARGET = "Qwen/Qwen3.6-27B"
DRAFTER = "z-lab/Qwen3.6-27B-DFlash"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    double = HubDouble(tmp_path_factory.mktemp("hub"), TOKEN)
    yield double
    double.shutdown()


@pytest.fixture
def lock_dir(tmp_path, hub):
    hub.clear()
    return tmp_path


def run(args, check_mode=False, diff=False):
    extra = dict(_ansible_check_mode=check_mode, _ansible_diff=diff)
    out = io.StringIO()
    with patch_module_args(dict(args, **extra)), contextlib.redirect_stdout(out), pytest.raises(SystemExit), \
            mock.patch.object(module_utils_internal, "is_controller", False):
        model_lock.main()
    return as_the_controller_takes(json.loads(out.getvalue()))


def lock_args(hub, lock_dir, repo_id=TARGET, revision="main", **extra):
    args = dict(repo_id=repo_id, revision=revision, dest=str(lock_dir / "model_weights_target_lock.json"),
                var="model_weights_target_lock", hub_python=sys.executable, hub_endpoint=hub.url, hub_token=TOKEN)
    args.update(extra)
    return args


def test_a_branch_resolves_to_its_commit_and_the_file_is_the_helpers_text(hub, lock_dir):
    result = run(lock_args(hub, lock_dir))
    v2 = commit(TARGET, "v2")
    assert result["changed"] and result["commit"] == v2 and result["differences"] == []
    written = pathlib.Path(result["path"]).read_text()
    assert written == hub.helper_text(TARGET, v2, "model_weights_target_lock")
    lock = json.loads(written)["model_weights_target_lock"]
    assert lock == {"repo_id": TARGET, "commit": v2, "files": hub.manifest(TARGET, "v2")}
    assert result["files"] == len(lock["files"]) and result["bytes"] == sum(f["size"] for f in lock["files"])
    assert oct(os.stat(result["path"]).st_mode & 0o777) == "0o644"
    assert TOKEN not in written and TOKEN not in json.dumps(result)
    # The token went to the hub; the large files were not downloaded (their sha256 is in the
    # hub's listing), only the small ones the hub describes by their git blob id.
    requests = [r for r in hub.requests() if r["path"].startswith("/api/models/") or "/resolve/" in r["path"]]
    assert requests and all(r["auth"] for r in requests)
    assert not [r for r in requests if r["listener"] == "cdn"]
    fetched = sorted(set(r["path"].split("/resolve/")[1].split("/", 1)[1] for r in requests
                         if "/resolve/" in r["path"] and r["method"] == "GET"))
    assert fetched == sorted(f["path"] for f in lock["files"] if not f["path"].endswith(".safetensors"))


def test_a_second_run_leaves_the_file_as_it_is(hub, lock_dir):
    first = run(lock_args(hub, lock_dir))
    before = os.stat(first["path"])
    second = run(lock_args(hub, lock_dir))
    assert not second["changed"] and second["commit"] == first["commit"]
    after = os.stat(first["path"])
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_check_mode_builds_the_lock_and_writes_nothing(hub, lock_dir):
    result = run(lock_args(hub, lock_dir), check_mode=True, diff=True)
    assert result["changed"] and result["commit"] == commit(TARGET, "v2")
    assert not (lock_dir / "model_weights_target_lock.json").exists()
    assert json.loads(result["diff"]["after"])["model_weights_target_lock"]["commit"] == commit(TARGET, "v2")
    assert sorted(os.listdir(lock_dir)) == []


def test_a_lock_of_another_commit_is_kept_unless_forced_and_the_differences_are_named(hub, lock_dir):
    v1 = commit(TARGET, "v1")
    run(lock_args(hub, lock_dir, revision=v1))
    path = lock_dir / "model_weights_target_lock.json"
    old = path.read_text()
    refused = run(lock_args(hub, lock_dir))
    assert refused["failed"] and path.read_text() == old
    wanted = [f"commit {v1} becomes {commit(TARGET, 'v2')}", "config.json changes size or sha256",
              "model-00002-of-00002.safetensors changes size or sha256"]
    assert refused["differences"] == wanted
    assert "force: true replaces it" in refused["msg"] and all(line in refused["msg"] for line in wanted)
    forced = run(lock_args(hub, lock_dir, force=True))
    assert forced["changed"] and forced["differences"] == wanted
    assert json.loads(path.read_text())["model_weights_target_lock"]["commit"] == commit(TARGET, "v2")


def test_a_trusted_copy_gives_the_same_lock_as_the_hub_without_asking_it(hub, lock_dir):
    v1 = commit(TARGET, "v1")
    from_hub = run(lock_args(hub, lock_dir, revision=v1, dest=str(lock_dir / "hub.json")))
    hub.clear()
    from_copy = run(lock_args(hub, lock_dir, revision=v1, dest=str(lock_dir / "copy.json"),
                              trusted_copy=str(hub.root / "mirror" / TARGET / v1)))
    assert hub.requests() == []
    assert from_copy["lock"] == from_hub["lock"]  # the copy's manifest.json is not pinned
    assert (lock_dir / "copy.json").read_bytes() == (lock_dir / "hub.json").read_bytes()


def test_include_and_exclude_pin_a_subset(hub, lock_dir):
    result = run(lock_args(hub, lock_dir, repo_id=DRAFTER, include=["*.json", "*.safetensors"],
                           exclude=["tokenizer*"]))
    paths = [f["path"] for f in result["lock"]["files"]]
    wanted = [f["path"] for f in hub.manifest(DRAFTER, "v1")
              if f["path"].endswith((".json", ".safetensors")) and not f["path"].startswith("tokenizer")]
    assert paths == wanted and result["commit"] == commit(DRAFTER, "v1")


@pytest.mark.parametrize("override, message", [
    ({"repo_id": "Qwen//x"}, "repo_id 'Qwen//x' is not a hub repository id"),
    ({"revision": "main..x"}, "revision 'main..x' is not a commit or a git ref name"),
    ({"dest": "relative/lock.json"}, "dest 'relative/lock.json' must be an absolute, normalised file path"),
    ({"dest": "/nonexistent-dir/lock.json"}, "its directory /nonexistent-dir does not exist"),
    ({"var": "model-weights"}, "var 'model-weights' is not a variable name"),
    ({"trusted_copy": "/"}, "revision 'main' must be the 40-hex commit of trusted_copy"),
    ({"trusted_copy": "/nonexistent-copy"}, "trusted_copy /nonexistent-copy is not a directory"),
    ({"hub_endpoint": "file:///srv/hub"}, "hub_endpoint 'file:///srv/hub' must be an http:// or https:// URL"),
    ({"timeout": 0}, "timeout must be at least 1"),
])
def test_bad_input_fails_before_the_hub_is_asked_or_a_file_written(hub, lock_dir, override, message):
    result = run(lock_args(hub, lock_dir, **override))
    assert result["failed"] and message in result["msg"]
    assert hub.requests() == [] and os.listdir(lock_dir) == []


def test_a_revision_the_hub_lacks_is_named_and_nothing_is_written(hub, lock_dir):
    result = run(lock_args(hub, lock_dir, revision="no-such-branch"))
    assert result["failed"] and f"hub lock of {TARGET} failed" in result["msg"] and "no-such-branch" in result["msg"]
    assert os.listdir(lock_dir) == []


def test_patterns_that_leave_nothing_fail_and_nothing_is_written(hub, lock_dir):
    result = run(lock_args(hub, lock_dir, include=["*.gguf"]))
    assert result["failed"] and "no file is left to pin" in result["msg"]
    assert os.listdir(lock_dir) == []


def test_a_file_that_is_no_lock_is_kept_and_named(hub, lock_dir):
    path = lock_dir / "model_weights_target_lock.json"
    path.write_text("model_weights_target_lock: edited by hand\n")
    result = run(lock_args(hub, lock_dir))
    assert result["failed"] and "the file is not a lock file (not JSON)" in result["msg"]
    assert path.read_text() == "model_weights_target_lock: edited by hand\n"

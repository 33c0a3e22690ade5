"""model_stage against the real test doubles: the HTTP mirror, a path, and the hub endpoint
driven by the real huggingface_hub client (installed in the test virtual environment)."""
import contextlib
import fcntl
import grp
import hashlib
import io
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from unittest import mock

import pytest
from ansible.module_utils import _internal as module_utils_internal
from ansible.module_utils.common import warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.pro6000.inference.plugins.module_utils._weights import stager
from ansible_collections.pro6000.inference.plugins.modules import model_stage
from support import as_the_controller_takes, free_port, load_module

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"
TOKEN = "hf_unit_token"
TARGET = "Qwen/Qwen3.6-27B"
DRAFTER = "z-lab/Qwen3.6-27B-DFlash"


def commit(repo_id, label):
    return hashlib.sha1(f"{repo_id}@{label}".encode()).hexdigest()


class Doubles:
    def __init__(self, root):
        self.root = root
        self.log = root / "requests.jsonl"
        load_module("generate", FIXTURES / "weights" / "generate.py").molecule_profile(str(root))
        server = load_module("hub_double_server", FIXTURES / "hub_double" / "server.py")
        ports = [free_port(), free_port(), free_port()]
        args = type("Args", (), dict(root=str(root), log=str(self.log), token=TOKEN,
                                     tree_page_size=2, bind="127.0.0.1", cdn_port=ports[2]))
        self.state = state = server.State(args)
        self.servers = [server.serve(server.MirrorHandler, state, "127.0.0.1", ports[0]),
                        server.serve(server.HubHandler, state, "127.0.0.1", ports[1]),
                        server.serve(server.CdnHandler, state, "127.0.0.1", ports[2])]
        self.mirror = f"http://127.0.0.1:{ports[0]}"
        self.hub = f"http://127.0.0.1:{ports[1]}"

    def requests(self):
        self.state.wait_idle()
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def clear(self):
        self.state.wait_idle()
        self.log.write_text("")

    def control(self, name, **query):
        urllib.request.urlopen(urllib.request.Request(
            f"{self.mirror}/_control/{name}?{urllib.parse.urlencode(query)}", method="POST")).read()

    def drop(self, match, after):
        self.control("drop", match=match, after=after)


@pytest.fixture(scope="module")
def doubles(tmp_path_factory):
    doubles = Doubles(tmp_path_factory.mktemp("weights"))
    yield doubles
    for server in doubles.servers:
        server.shutdown()


@pytest.fixture
def models(tmp_path, doubles):
    doubles.clear()
    return tmp_path / "models"


def run(args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    warnings._global_warnings.clear()  # each run in this process reports its own warnings only
    out = io.StringIO()
    # Once another test has loaded controller code into this process, module warnings would go to
    # the controller's display instead of the result, as they never do where a module runs.
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit), \
            mock.patch.object(module_utils_internal, "is_controller", False):
        model_stage.main()
    return as_the_controller_takes(json.loads(out.getvalue()))


def mirror_args(doubles, models, repo_id=TARGET, label="v1", **extra):
    args = dict(dest=str(models / repo_id.split("/")[1]), source="mirror", mirror_url=doubles.mirror,
                repo_id=repo_id, revision=commit(repo_id, label), kind="target" if repo_id == TARGET else "other",
                owner=pwd.getpwuid(os.getuid()).pw_name, group=grp.getgrgid(os.getgid()).gr_name)
    args.update(extra)
    return args


def hub_args(doubles, models, label="v1", **extra):
    args = mirror_args(doubles, models, label=label, **extra)
    args.update(source="hub", mirror_url=None, hub_python=sys.executable, hub_endpoint=doubles.hub, hub_token=TOKEN)
    return args


def gets(doubles, listener=None):
    return [r for r in doubles.requests() if r["method"] == "GET" and listener in (None, r["listener"])]


def file_bytes(doubles):
    """Bytes of file content the doubles sent (API answers left out): the truth for fetched_bytes."""
    return sum(r["bytes"] for r in gets(doubles) if "/resolve/" in r["path"] or r["path"].startswith("/cdn/"))


def test_mirror_stage_switches_a_link_to_a_verified_copy_and_a_rerun_sends_no_request(doubles, models):
    result = run(mirror_args(doubles, models))
    dest = models / "Qwen3.6-27B"
    assert result["changed"] and result["files"] == 6 and result["fetched_bytes"] == result["bytes"]
    assert os.readlink(dest) == f"Qwen3.6-27B.revs/{commit(TARGET, 'v1')}"
    assert result["config"]["num_hidden_layers"] == 64
    assert sorted(os.listdir(dest)) == sorted(["config.json", "tokenizer.json", "README.md", ".model_weights.json",
                                               "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                               "model.safetensors.index.json"])
    doubles.clear()
    again = run(mirror_args(doubles, models))
    assert not again["changed"] and again["fetched_bytes"] == 0
    assert again["verified_at"] == result["verified_at"]
    assert doubles.requests() == []


def test_the_fact_entry_is_what_role_model_weights_records(doubles, models):
    """The entry the role writes to its local fact (it was built in Jinja before): the staged
    copy's identity, the target's config keys beside them, the drafter's dflash block."""
    target = run(mirror_args(doubles, models))
    assert target["fact_key"] == "target"
    assert target["fact"] == {
        "path": str(models / "Qwen3.6-27B"), "source": "mirror", "repo_id": TARGET,
        "revision": commit(TARGET, "v1"), "commit": None, "bytes": target["bytes"], "files": 6,
        "digest_source": "source", "verified_at": target["verified_at"],
        "model_type": target["config"]["model_type"], "architectures": target["config"]["architectures"],
        "num_hidden_layers": 64, "context_length": target["config"]["context_length"]}
    drafter = run(mirror_args(doubles, models, repo_id=DRAFTER, kind="drafter",
                              target_config=str(models / "Qwen3.6-27B" / "config.json")))
    assert drafter["fact_key"] == "drafter" and drafter["fact"]["dflash"] == drafter["dflash"]
    assert "num_hidden_layers" not in drafter["fact"] and drafter["fact"]["repo_id"] == DRAFTER
    other = run(mirror_args(doubles, models, repo_id=DRAFTER, dest=str(models / "extra")))
    assert other["fact_key"] == "extra" and "dflash" not in other["fact"]
    assert other["fact"]["path"] == str(models / "extra")


def test_check_mode_on_a_fresh_host_reports_a_change_and_creates_nothing(doubles, models):
    result = run(mirror_args(doubles, models), check_mode=True)
    assert result["changed"]
    assert not models.exists() and doubles.requests() == []


def test_path_source_without_manifest_is_hashed_then_copied(doubles, models, tmp_path):
    source = tmp_path / "share"
    shutil.copytree(doubles.root / "mirror" / DRAFTER / commit(DRAFTER, "v1"), source)
    (source / "manifest.json").unlink()
    args = mirror_args(doubles, models, repo_id=DRAFTER, source="path", source_path=str(source),
                       kind="drafter", mirror_url=None)
    result = run(args)
    assert result["changed"] and result["dflash"]["block_size"] == 16
    assert (models / "Qwen3.6-27B-DFlash" / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()


def test_a_dropped_connection_is_resumed_with_range_within_the_run(doubles, models):
    doubles.drop("model-00001", 1_000_000)
    result = run(mirror_args(doubles, models))
    assert result["changed"]
    shard = [r for r in gets(doubles) if "model-00001" in r["path"]]
    assert [r["range"] for r in shard] == [None, "bytes=1000000-"]
    assert sum(r["bytes"] for r in shard) == 3 * 1024 * 1024


def test_an_interrupted_run_resumes_without_fetching_completed_files_again(doubles, models):
    doubles.drop("model-00001", 1_000_000)
    failed = run(mirror_args(doubles, models, retries=0))
    assert failed["failed"] and "connection ended at byte 1000000" in failed["msg"]
    assert not (models / "Qwen3.6-27B").exists()
    first = {r["path"] for r in gets(doubles)}
    doubles.clear()
    result = run(mirror_args(doubles, models))
    assert result["changed"]
    again = gets(doubles)
    fetched_again = [r["path"] for r in again if not r["path"].endswith("manifest.json")]
    assert fetched_again == [p for p in first if "model-00001" in p]
    assert again[-1]["range"] == "bytes=1000000-"


def test_a_corrupted_file_is_fetched_again_alone_and_the_damaged_copy_goes(doubles, models):
    run(mirror_args(doubles, models))
    shard = models / "Qwen3.6-27B" / "model-00002-of-00002.safetensors"
    with open(shard, "r+b") as stream:
        stream.seek(4096)
        stream.write(b"\0" * 16)
    doubles.clear()
    result = run(mirror_args(doubles, models))
    assert result["changed"] and result["repaired"] == ["model-00002-of-00002.safetensors"]
    assert [r["path"].rsplit("/", 1)[1] for r in doubles.requests()] == ["model-00002-of-00002.safetensors"]
    assert result["linked_files"] == 5
    assert sorted(os.listdir(models / "Qwen3.6-27B.revs")) == sorted([".lock", os.path.basename(result["revision_dir"])])


def test_a_revision_change_links_unchanged_files_and_keeps_the_previous_copy(doubles, models):
    first = run(mirror_args(doubles, models))
    doubles.clear()
    second = run(mirror_args(doubles, models, label="v2"))
    fetched = sorted(r["path"].rsplit("/", 1)[1] for r in gets(doubles))
    assert fetched == ["config.json", "manifest.json", "model-00002-of-00002.safetensors"]
    assert second["linked_files"] == 4
    assert os.path.isdir(first["revision_dir"])
    third = run(mirror_args(doubles, models, label="v1", keep_previous=0))
    assert third["linked_files"] == 6 and third["fetched_bytes"] == 0
    assert sorted(os.listdir(models / "Qwen3.6-27B.revs")) == [".lock", os.path.basename(third["revision_dir"])]


def test_a_bad_drafter_fails_before_the_switch(doubles, models):
    run(mirror_args(doubles, models))
    target_config = str(models / "Qwen3.6-27B" / "config.json")
    good = run(mirror_args(doubles, models, repo_id=DRAFTER, kind="drafter", target_config=target_config))
    bad = run(mirror_args(doubles, models, repo_id=DRAFTER, label="bad", kind="drafter", target_config=target_config))
    assert bad["failed"] and "target_layer_ids [70] lie outside the target's 64 layers" in bad["msg"]
    assert os.path.realpath(models / "Qwen3.6-27B-DFlash") == good["revision_dir"]


def test_not_enough_space_fails_before_any_transfer_naming_path_need_and_free(doubles, models):
    result = run(mirror_args(doubles, models, reserve_bytes=1 << 60))
    assert result["failed"]
    assert "not enough free space in " in result["msg"] and "need 115292150" in result["msg"]
    assert " free " in result["msg"]
    assert [r["path"].rsplit("/", 1)[1] for r in doubles.requests()] == ["manifest.json"]


def test_a_dest_that_is_a_real_directory_is_refused(doubles, models):
    (models / "Qwen3.6-27B").mkdir(parents=True)
    result = run(mirror_args(doubles, models))
    assert result["failed"] and "is not a link" in result["msg"]


def test_hub_stage_through_the_real_client_verifies_lfs_sha256_and_git_blob_ids(doubles, models):
    result = run(hub_args(doubles, models))
    assert result["changed"] and result["commit"] == commit(TARGET, "v1")
    marker = json.loads((models / "Qwen3.6-27B" / ".model_weights.json").read_text())
    assert marker["files"]["model-00001-of-00002.safetensors"]["algo"] == "sha256"
    assert marker["files"]["config.json"]["algo"] == "git_sha1"
    assert not (models / "Qwen3.6-27B" / ".cache").exists()
    log = doubles.requests()
    assert [r for r in log if r["listener"] == "cdn" and r["auth"]] == []
    assert all(r["auth"] for r in log if r["listener"] == "hub")
    assert len([r for r in log if "/tree/" in r["path"]]) == 3  # 6 files, 2 per page
    doubles.clear()
    assert not run(hub_args(doubles, models))["changed"]
    assert doubles.requests() == []


def test_a_floating_hub_revision_costs_one_api_request_when_unchanged(doubles, models):
    first = run(hub_args(doubles, models, revision="main"))
    assert first["commit"] == commit(TARGET, "v2")
    doubles.clear()
    again = run(hub_args(doubles, models, revision="main"))
    assert not again["changed"]
    assert [r["path"].split("?")[0] for r in doubles.requests()] == ["/api/models/Qwen/Qwen3.6-27B/revision/main"]


def test_a_wrong_hub_token_fails_clearly_and_the_token_never_reaches_disk(doubles, models):
    result = run(dict(hub_args(doubles, models), hub_token="hf_wrong"))
    assert result["failed"] and "Invalid credentials" in result["msg"]
    run(hub_args(doubles, models))
    for base, _dirs, names in os.walk(models):
        for name in names:
            assert TOKEN.encode() not in pathlib.Path(base, name).read_bytes()


def test_a_hub_download_cut_mid_file_is_resumed_with_range_and_verified(doubles, models):
    doubles.drop("/cdn/", 500_000)
    result = run(hub_args(doubles, models, workers=1))
    assert result["changed"] and not result.get("failed")
    cut = [r for r in gets(doubles, "cdn") if r["bytes"] == 500_000]
    assert len(cut) == 1
    again = [r for r in gets(doubles, "cdn") if r["path"] == cut[0]["path"]]
    assert [r["range"] for r in again] == [None, "bytes=500000-"]
    assert result["fetched_bytes"] == file_bytes(doubles) == result["bytes"]


HELPER = pathlib.Path(model_stage.__file__).resolve().parents[1] / "module_utils" / "_weights_hub_helper.py"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


def lock_of(directory, repo_id, label):
    """The lock file, written by the documented command from a trusted copy."""
    done = subprocess.run([sys.executable, str(HELPER), "lock", repo_id, commit(repo_id, label), "--dir",
                           str(directory)], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(done.stdout)


def genuine(doubles, repo_id=TARGET, label="v1"):
    return doubles.root / "mirror" / repo_id / commit(repo_id, label)


def tampered_mirror(doubles, name):
    """A mirror under <mirror>/<name>/ whose v1 has one shard altered and its manifest regenerated."""
    source = genuine(doubles)
    tree = doubles.root / "mirror" / name / TARGET / commit(TARGET, "v1")
    tree.mkdir(parents=True)
    for item in source.iterdir():
        os.link(item, tree / item.name)
    (tree / SHARD2).unlink()
    data = bytearray((source / SHARD2).read_bytes())
    data[4096] ^= 0xFF
    (tree / SHARD2).write_bytes(bytes(data))
    manifest = json.loads((source / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == SHARD2:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
    (tree / "manifest.json").unlink()
    (tree / "manifest.json").write_text(json.dumps(manifest))
    return f"{doubles.mirror}/{name}"


def test_a_tampered_mirror_fails_against_the_lock_before_the_switch_naming_the_file(doubles, models):
    lock = lock_of(genuine(doubles), TARGET, "v1")
    url = tampered_mirror(doubles, "tampered")
    serving = run(mirror_args(doubles, models, label="v2"))
    doubles.clear()
    failed = run(mirror_args(doubles, models, mirror_url=url, lock=lock))
    assert failed["failed"] and "differs from the lock file" in failed["msg"]
    assert f"{SHARD2}: sha256 " in failed["msg"] and SHARD1 not in failed["msg"]
    assert os.path.realpath(models / "Qwen3.6-27B") == serving["revision_dir"]
    assert [r["path"].rsplit("/", 1)[1] for r in doubles.requests()] == ["manifest.json"]
    # The same mirror without a lock file: staged, and the result says whom it trusted.
    unpinned = run(mirror_args(doubles, models, mirror_url=url, dest=str(models / "unpinned")))
    assert unpinned["changed"] and unpinned["digest_source"] == "source"
    assert "came from the source itself" in json.dumps(unpinned["warnings"])


def test_bytes_that_differ_from_the_lock_fail_even_when_the_manifest_agrees(doubles, models):
    lock = lock_of(genuine(doubles), TARGET, "v1")
    forged = dict(lock, files=[dict(entry, sha256="0" * 64) if entry["path"] == SHARD1 else entry
                               for entry in lock["files"]])
    tree = doubles.root / "mirror" / "forged" / TARGET / commit(TARGET, "v1")
    tree.mkdir(parents=True)
    for item in genuine(doubles).iterdir():
        os.link(item, tree / item.name)
    manifest = json.loads((tree / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == SHARD1:
            entry["sha256"] = "0" * 64
    (tree / "manifest.json").unlink()
    (tree / "manifest.json").write_text(json.dumps(manifest))
    failed = run(mirror_args(doubles, models, mirror_url=f"{doubles.mirror}/forged", lock=forged))
    assert failed["failed"] and f"{SHARD1}: sha256 " in failed["msg"] and "does not match the expected 0000" in failed["msg"]
    assert not (models / "Qwen3.6-27B").exists()


def test_a_lock_pins_every_hub_file_by_sha256_and_a_moved_branch_is_refused(doubles, models):
    lock = lock_of(genuine(doubles, label="v2"), TARGET, "v2")
    result = run(hub_args(doubles, models, label="v2", lock=lock))
    assert result["changed"] and result["digest_source"] == "lock" and not result.get("warnings")
    marker = json.loads((models / "Qwen3.6-27B" / ".model_weights.json").read_text())
    assert {entry["algo"] for entry in marker["files"].values()} == {"sha256"}
    doubles.clear()
    assert not run(hub_args(doubles, models, label="v2", lock=lock))["changed"] and doubles.requests() == []
    moved = run(hub_args(doubles, models, revision="main", lock=lock_of(genuine(doubles), TARGET, "v1"),
                         dest=str(models / "floating")))
    assert moved["failed"] and f"main resolves to commit {commit(TARGET, 'v2')}, the lock file pins" in moved["msg"]


def test_full_verify_does_not_repair_a_file_from_a_hard_link_of_the_same_damage(doubles, models):
    run(mirror_args(doubles, models))
    run(mirror_args(doubles, models, label="v2"))
    live = models / "Qwen3.6-27B" / "tokenizer.json"   # shared by v1 and v2 through a hard link
    before = os.stat(live)
    data = bytearray(live.read_bytes())
    data[3] ^= 0x01
    with open(live, "r+b") as stream:
        stream.write(bytes(data))
    os.utime(live, ns=(before.st_atime_ns, before.st_mtime_ns))
    doubles.clear()
    result = run(mirror_args(doubles, models, label="v2", verify="full"))
    assert result["repaired"] == ["tokenizer.json"]
    assert [r["path"].rsplit("/", 1)[1] for r in gets(doubles)] == ["tokenizer.json"]
    manifest = json.loads((genuine(doubles, label="v2") / "manifest.json").read_text())
    wanted = [entry["sha256"] for entry in manifest["files"] if entry["path"] == "tokenizer.json"][0]
    assert hashlib.sha256((models / "Qwen3.6-27B" / "tokenizer.json").read_bytes()).hexdigest() == wanted


def test_a_touched_but_intact_file_is_hashed_once_not_on_every_run(doubles, models, monkeypatch):
    from ansible_collections.pro6000.inference.plugins.module_utils._weights import files, tree
    first = run(mirror_args(doubles, models))
    os.utime(models / "Qwen3.6-27B" / SHARD1, ns=(1, 1))
    hashed = []
    real = files.file_digest
    monkeypatch.setattr(tree, "file_digest", lambda path, algo: hashed.append(path) or real(path, algo))
    again = run(mirror_args(doubles, models))
    assert not again["changed"] and again["repaired"] == [] and len(hashed) == 1
    hashed.clear()
    assert not run(mirror_args(doubles, models))["changed"] and hashed == []
    assert again["verified_at"] == first["verified_at"]


def test_a_client_error_from_the_mirror_is_not_retried(doubles, models):
    doubles.control("fail", match=SHARD1, status=404, count=1)
    result = run(mirror_args(doubles, models, retries=3))
    assert result["failed"] and "HTTP 404" in result["msg"]
    assert len([r for r in gets(doubles) if SHARD1 in r["path"]]) == 1


def test_a_hub_client_error_is_not_retried_and_its_signed_url_stays_out_of_the_output(doubles, models):
    doubles.control("fail", match=f"name={SHARD1}", status=404, count=1)
    result = run(hub_args(doubles, models, retries=3))
    assert result["failed"] and "404" in result["msg"]
    assert "sig=" not in json.dumps(result) and "?<query hidden>" in result["msg"]
    assert len([r for r in gets(doubles, "cdn") if r["status"] == 404]) == 1
    assert len(gets(doubles, "cdn")) == 2  # the other shard only, once


def test_the_hub_client_gets_the_modules_timeout_and_retries(doubles, models):
    # A stall far longer than the run may take on a loaded machine: a client without the
    # module's 1 s timeout would wait it out (the stall ends when the client hangs up).
    stall = 120
    doubles.control("stall", match=f"name={SHARD1}", seconds=stall)
    started = time.monotonic()
    result = run(hub_args(doubles, models, timeout=1, retries=0))
    assert result["failed"] and "giving up after 1 attempt(s) without progress" in result["msg"]
    assert "Timeout" in result["msg"] and time.monotonic() - started < stall


def start_module(args, workdir):
    args_file = workdir / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(FIXTURES.parents[1] / "collections"))
    return subprocess.Popen([sys.executable, model_stage.__file__, str(args_file)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def descendants(pid):
    children = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stream:
            return stream.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def lock_is_free(lock):
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(lock, fcntl.LOCK_UN)
    return True


def wait_for(condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_killed_hub_run_takes_its_helper_along_and_the_next_run_resumes_the_file(doubles, models, tmp_path):
    doubles.control("slow", match=f"name={SHARD1}", rate=1_000_000)
    args = hub_args(doubles, models)
    part = models / "Qwen3.6-27B.revs" / f".staging-{commit(TARGET, 'v1')}" / f"{SHARD1}.part"
    module = start_module(args, tmp_path)
    try:
        assert wait_for(lambda: part.exists() and part.stat().st_size > 300_000, 20)
        helpers = descendants(module.pid)
        assert helpers
        module.kill()
        module.wait(5)
        assert wait_for(lambda: not any(alive(pid) for pid in helpers), 5), "the hub helper outlived the module"
    finally:
        module.kill()
        doubles.control("slow", rate=0)
    # Nobody holds the module's lock any more. A killed multi-threaded helper shows as a zombie
    # while its other threads still exit holding its files, so give the kernel a moment.
    with open(models / "Qwen3.6-27B.revs" / ".lock") as lock:
        assert wait_for(lambda: lock_is_free(lock), 5), "the module's lock outlived the module and its helper"
    kept = part.stat().st_size
    doubles.clear()
    result = run(args)
    assert result["changed"] and not result.get("failed")
    shard = [r for r in gets(doubles, "cdn") if r["range"] is not None]
    assert [r["range"] for r in shard] == [f"bytes={kept}-"]
    assert result["fetched_bytes"] == file_bytes(doubles)
    assert hashlib.sha256((models / "Qwen3.6-27B" / SHARD1).read_bytes()).hexdigest() == \
        json.loads((models / "Qwen3.6-27B" / ".model_weights.json").read_text())["files"][SHARD1]["digest"]


@pytest.mark.parametrize("change, message", [
    ({"dest": "models/Qwen3.6-27B"}, "dest 'models/Qwen3.6-27B' must be an absolute"),
    ({"dest": "~/Qwen3.6-27B"}, "dest '~/Qwen3.6-27B' must be an absolute"),
    ({"dest": "/srv/models/../etc/m"}, "must be an absolute, normalised path"),
    ({"revision": "../../etc"}, "revision '../../etc' is not a commit or a git ref name"),
    ({"repo_id": "Qwen/../../etc", "dest": "/nonexistent/m"}, "repo_id 'Qwen/../../etc' is not a hub repository id"),
    ({"mirror_url": "file:///srv/fixtures"}, "mirror_url 'file:///srv/fixtures' must be an http:// or https://"),
    ({"mirror_url": "ftp://127.0.0.1/models"}, "mirror_url 'ftp://127.0.0.1/models' must be an http://"),
    ({"workers": 0}, "workers must be at least 1"),
    # Issue 36, finding 4: read from outside the source, a line break in a path, a group that may write.
    ({"manifest_name": "/etc/secret.json"}, "manifest_name '/etc/secret.json' must be a file name inside"),
    ({"manifest_name": "../../secret.json"}, "manifest_name '../../secret.json' must be a file name inside"),
    ({"dest": "/srv/models\nx"}, "must be an absolute, normalised path"),
    ({"dir_mode": "0775"}, "dir_mode 0775 lets the group or others write"),
    ({"file_mode": "0666"}, "file_mode 0666 lets the group or others write"),
])
def test_bad_options_are_refused_by_name_before_anything_happens(doubles, models, change, message):
    result = run(mirror_args(doubles, models, **change))
    assert result["failed"] and message in result["msg"]
    assert not models.exists() and doubles.requests() == []


def test_a_link_that_points_elsewhere_is_not_replaced(doubles, models, tmp_path):
    models.mkdir()
    (models / "Qwen3.6-27B").symlink_to(tmp_path)
    result = run(mirror_args(doubles, models))
    assert result["failed"] and f"is a link to {tmp_path}, not to a copy in" in result["msg"]
    assert os.readlink(models / "Qwen3.6-27B") == str(tmp_path)


@pytest.mark.parametrize("mode", ["copy", "hardlink"])
def test_path_staging_links_the_source_only_where_the_site_allows_it(doubles, models, mode):
    source = genuine(doubles, DRAFTER)
    args = mirror_args(doubles, models, repo_id=DRAFTER, source="path", source_path=str(source), mirror_url=None,
                       link_mode=mode)
    result = run(args)
    assert result["changed"] and result["fetched_bytes"] == result["bytes"]
    staged = models / "Qwen3.6-27B-DFlash" / "model.safetensors"
    shared = os.stat(source / "model.safetensors").st_ino == os.stat(staged).st_ino
    assert shared == (mode == "hardlink")


# ----------------------------------------------------------------- hostile sources (issue 20, row 1)

def root_only_file(tmp_path, data=b"root-only secret\n" * 64):
    """A file outside every source that only root may read, as /etc/shadow is."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_bytes(data)
    secret.chmod(0o600)
    return secret


def path_source(doubles, tmp_path, manifest=True):
    source = tmp_path / "share"
    shutil.copytree(genuine(doubles, DRAFTER), source)
    if not manifest:
        (source / "manifest.json").unlink()
    return source


def list_in_manifest(source, rel, data):
    document = json.loads((source / "manifest.json").read_text())
    document["files"].append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    (source / "manifest.json").write_text(json.dumps(document))


def ownership(path):
    stat = os.lstat(path)
    return stat.st_uid, stat.st_gid, stat.st_mode & 0o7777


def service_user_args(doubles, models, source, **extra):
    nobody = pwd.getpwnam("nobody")
    return mirror_args(doubles, models, repo_id=DRAFTER, source="path", source_path=str(source), mirror_url=None,
                       owner=nobody.pw_name, group=grp.getgrgid(nobody.pw_gid).gr_name, **extra)


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "hashed-tree"])
@pytest.mark.parametrize("mode", ["copy", "hardlink"])
@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_link_out_of_a_path_source_is_refused_and_nothing_outside_changes(doubles, models, tmp_path, mode,
                                                                            manifest, where):
    # The attack of issue 20 row 1: the source holds a link to a root-only file outside it. Before,
    # copy published the file's bytes at 0644 and hardlink chmodded the outside file to 0644 and
    # chowned the source's files to the service user.
    secret = root_only_file(tmp_path)
    source = path_source(doubles, tmp_path, manifest)
    rel = "secret.bin" if where == "file" else "sub/secret"
    if where == "file":
        (source / rel).symlink_to(secret)
    else:
        (source / "sub").symlink_to(secret.parent)
    if manifest:
        list_in_manifest(source, rel, secret.read_bytes())
    before = {p: ownership(p) for p in [secret] + sorted(source.iterdir())}
    result = run(service_user_args(doubles, models, source, link_mode=mode))
    assert result["failed"]
    where_to = secret if where == "file" or manifest else secret.parent
    assert (f"{rel if where == 'file' or manifest else 'sub'} in source_path {source} is a symbolic link "
            f"(or lies under one) leading to {where_to}, outside the source: refused") in result["msg"]
    assert "source_symlinks: copy" in result["msg"]
    assert {p: ownership(p) for p in before} == before
    assert not (models / "Qwen3.6-27B-DFlash").exists()
    assert not any(p.name == "secret" or p.name == "secret.bin" for p in models.rglob("*")) if models.exists() else True


def test_source_symlinks_copy_stages_new_files_and_leaves_the_target_alone(doubles, models, tmp_path):
    secret = root_only_file(tmp_path)
    source = path_source(doubles, tmp_path)
    (source / "secret.bin").symlink_to(secret)
    list_in_manifest(source, "secret.bin", secret.read_bytes())
    before = ownership(secret)
    result = run(service_user_args(doubles, models, source, link_mode="hardlink", source_symlinks="copy"))
    assert result["changed"], result.get("msg")
    staged = models / "Qwen3.6-27B-DFlash" / "secret.bin"
    assert not staged.is_symlink() and staged.read_bytes() == secret.read_bytes()
    assert os.stat(staged).st_ino != os.stat(secret).st_ino
    assert ownership(staged) == (65534, pwd.getpwnam("nobody").pw_gid, 0o644)
    assert ownership(secret) == before


def test_a_link_inside_the_source_is_staged_as_a_copy(doubles, models, tmp_path):
    source = path_source(doubles, tmp_path, manifest=False)
    (source / "alias.json").symlink_to("config.json")
    result = run(service_user_args(doubles, models, source, link_mode="hardlink"))
    assert result["changed"], result.get("msg")
    staged = models / "Qwen3.6-27B-DFlash" / "alias.json"
    assert not staged.is_symlink() and staged.read_bytes() == (source / "config.json").read_bytes()


def test_hardlink_never_changes_the_sources_owner_or_mode(doubles, models, tmp_path):
    source = path_source(doubles, tmp_path)
    before = {p: ownership(p) for p in source.iterdir()}
    # The service user differs from the source's owner: linking would re-own the source, so it copies.
    result = run(service_user_args(doubles, models, source, link_mode="hardlink"))
    assert result["changed"], result.get("msg")
    assert "copied instead of hard-linked" in json.dumps(result["warnings"])
    staged = models / "Qwen3.6-27B-DFlash"
    assert os.stat(staged / "model.safetensors").st_ino != os.stat(source / "model.safetensors").st_ino
    assert ownership(staged / "model.safetensors")[:2] == (65534, pwd.getpwnam("nobody").pw_gid)
    assert {p: ownership(p) for p in before} == before
    # Owner and mode as the source has them: linked; a later run asking for another mode leaves
    # the linked files (the source's inodes) as they are.
    shutil.rmtree(models)
    args = mirror_args(doubles, models, repo_id=DRAFTER, source="path", source_path=str(source), mirror_url=None,
                       link_mode="hardlink")
    assert run(args)["changed"]
    assert os.stat(staged / "model.safetensors").st_ino == os.stat(source / "model.safetensors").st_ino
    again = run(dict(args, file_mode="0600"))
    assert not again.get("failed"), again.get("msg")
    assert "hard links of files outside" in json.dumps(again["warnings"])
    assert {p: ownership(p) for p in before} == before


def test_a_link_planted_in_the_staging_directory_is_not_followed(doubles, models, tmp_path):
    # The staging directory belongs to the service user, who could leave a link where a part goes.
    outside = root_only_file(tmp_path, b"x" * (4 * 1024 * 1024))
    staging = models / "Qwen3.6-27B.revs" / f".staging-{commit(TARGET, 'v1')}"
    staging.mkdir(parents=True)
    (staging / f"{SHARD1}.part").symlink_to(outside)
    (staging / "config.json").symlink_to(outside)
    before = (ownership(outside), outside.read_bytes())
    result = run(mirror_args(doubles, models))
    assert result["changed"], result.get("msg")
    assert (ownership(outside), outside.read_bytes()) == before
    copy = models / "Qwen3.6-27B"
    assert not any(p.is_symlink() for p in copy.rglob("*"))
    assert (copy / SHARD1).read_bytes() == (genuine(doubles) / SHARD1).read_bytes()


@pytest.mark.parametrize("listed, message", [
    (["sub", "sub/x"], "manifest lists sub both as a file and as a directory"),
    (["a.part"], "reserved file name in manifest: 'a.part'"),
])
def test_a_listed_name_cannot_shadow_another(doubles, models, tmp_path, listed, message):
    source = path_source(doubles, tmp_path)
    for rel in listed:
        list_in_manifest(source, rel, b"")
    result = run(service_user_args(doubles, models, source))
    assert result["failed"] and message in result["msg"]
    assert not models.exists()


# ----------------------------------------------------------------- root never follows a link (issue 36, finding 2)

def tree_owners(root):
    """{relative path: (uid, gid, mode)} of root and everything under it, links included."""
    return {str(p.relative_to(root)): ownership(p) for p in [root] + sorted(root.rglob("*"))}


def earlier_layout(doubles, models, tmp_path):
    """A verified copy as the earlier layout left it: <dest>.revs, the copies and the lock owned by
    the service user (nobody here)."""
    args = mirror_args(doubles, models, owner="root", group=grp.getgrgid(pwd.getpwnam("nobody").pw_gid).gr_name)
    first = run(args)
    assert first["changed"], first.get("msg")
    revs = models / "Qwen3.6-27B.revs"
    for path in [revs] + sorted(revs.rglob("*")):
        os.lchown(path, 65534, 65534)
    doubles.clear()
    return args, revs, first


def test_an_earlier_layout_is_taken_over_without_a_new_download_and_a_rerun_changes_nothing(doubles, models,
                                                                                            tmp_path):
    args, revs, first = earlier_layout(doubles, models, tmp_path)
    result = run(args)
    assert result["changed"] and not result.get("failed"), result.get("msg")
    assert result["fetched_bytes"] == 0 and result["fetched_files"] == [] and doubles.requests() == []
    assert result["revision_dir"] == first["revision_dir"] and result["verified_at"] == first["verified_at"]
    gid = pwd.getpwnam("nobody").pw_gid
    owners = tree_owners(revs)
    assert owners.pop(".lock") == (0, 0, 0o600)
    dirs = {rel for rel in owners if (revs / rel).is_dir()}
    assert dirs == {".", os.path.basename(first["revision_dir"])}
    assert {owners[rel] for rel in dirs} == {(0, gid, 0o755)}
    assert {owners[rel] for rel in owners if rel not in dirs} == {(0, gid, 0o644)}
    again = run(args)
    assert not again["changed"] and doubles.requests() == []
    assert tree_owners(revs) == dict(owners, **{".lock": (0, 0, 0o600)})


def test_a_check_run_reports_the_takeover_and_changes_nothing(doubles, models, tmp_path):
    args, revs, _first = earlier_layout(doubles, models, tmp_path)
    before = tree_owners(revs)
    assert run(args, check_mode=True)["changed"]
    assert tree_owners(revs) == before


def root_files(tmp_path):
    """Two root files the service user must not reach: one 0600 (to be truncated), one 0644 (to
    be re-moded)."""
    secret = root_only_file(tmp_path)
    public = tmp_path / "outside" / "public"
    public.write_bytes(b"public\n")
    public.chmod(0o644)
    return [secret, public]


def file_states(paths):
    return {p: (ownership(p), p.read_bytes()) for p in paths}


def test_a_link_planted_at_the_lock_by_the_service_user_is_refused_and_its_target_untouched(doubles, models,
                                                                                            tmp_path):
    # The attack of issue 36, finding 2: the service user owned <dest>.revs and replaced the lock
    # by a link to a root 0600 file; the next run opened it for writing as root and truncated it.
    args, revs, first = earlier_layout(doubles, models, tmp_path)
    targets = root_files(tmp_path)
    (revs / ".lock").unlink()
    (revs / ".lock").symlink_to(targets[0])
    before = file_states(targets)
    result = run(dict(args, revision=commit(TARGET, "v2")))
    assert file_states(targets) == before
    assert result["failed"] and f"{revs}/.lock is a symbolic link: refused" in result["msg"]
    assert os.path.realpath(models / "Qwen3.6-27B") == first["revision_dir"]


@pytest.mark.parametrize("record", ["journal", "marker"])
def test_a_journal_or_marker_planted_as_a_link_is_neither_read_nor_re_moded(doubles, models, tmp_path, record):
    # A link in a staging directory is a leftover and goes; one in a verified copy fails the run
    # naming it (the copy is not what the module made). Either way its target stays as it was.
    args, revs, first = earlier_layout(doubles, models, tmp_path)
    targets = root_files(tmp_path)
    if record == "journal":
        place = revs / f".staging-{commit(TARGET, 'v2')}"
        place.mkdir()
        os.chown(place, 65534, 65534)
        name = ".model_weights.staging.json"
    else:
        place = pathlib.Path(first["revision_dir"])
        name = ".model_weights.json"
        (place / name).unlink()
    (place / name).symlink_to(targets[1 if record == "journal" else 0])
    before = file_states(targets)
    result = run(dict(args, revision=commit(TARGET, "v2")) if record == "journal" else args)
    assert file_states(targets) == before
    if record == "marker":
        assert result["failed"] and f"{place / name} is a symbolic link: refused" in result["msg"]
        return
    assert result["changed"] and not result.get("failed"), result.get("msg")
    assert not any(p.is_symlink() for p in revs.rglob("*"))
    assert all(ownership(p)[0] == 0 for p in [revs] + list(revs.rglob("*")))


def test_a_file_name_that_is_not_utf8_is_refused_before_anything_is_staged(doubles, models, tmp_path):
    # Issue 36, finding 4: such a name was published, then the task failed reporting it.
    source = path_source(doubles, tmp_path, manifest=False)
    (source / os.fsdecode(b"weights-\xff.bin")).write_bytes(b"x")
    result = run(service_user_args(doubles, models, source))
    assert result["failed"] and f"source_path {source} holds a name that is not UTF-8" in result["msg"]
    assert not models.exists()


def test_a_model_root_that_is_a_link_to_another_disk_still_works(doubles, models, tmp_path):
    # Links are refused inside <dest>.revs only: a site may keep the model root on a larger disk.
    (tmp_path / "disk").mkdir()
    models.symlink_to(tmp_path / "disk")
    result = run(mirror_args(doubles, models))
    assert result["changed"] and not result.get("failed"), result.get("msg")
    assert os.path.realpath(models / "Qwen3.6-27B") == str(tmp_path / "disk" / "Qwen3.6-27B.revs" / commit(TARGET, "v1"))


def test_a_slow_download_keeps_its_progress_file_current_and_removes_it_at_the_end(doubles, models, tmp_path):
    progress = tmp_path / "progress.json"
    # The mirror double's slow link (its /_control/slow): 5 MiB of shards at 1 MiB/s per transfer.
    doubles.control("slow", match="safetensors", rate=1024 * 1024)
    seen, done_running = [], threading.Event()

    def watch():
        while not done_running.is_set():
            document = progress_document(progress)
            if document and (not seen or document["updated"] != seen[-1]["updated"]):
                seen.append(document)
            time.sleep(0.05)

    # The module in the main thread, as where it runs: from ansible-core 2.22 on, AnsibleModule
    # sets a signal handler (SIGUSR1, for stack traces), which only the main thread may.
    watcher = threading.Thread(target=watch)
    try:
        watcher.start()
        outcome = run(mirror_args(doubles, models, progress_file=str(progress)))
    finally:
        done_running.set()
        watcher.join()
        doubles.control("slow", match="", rate=0)
    assert outcome["changed"] and outcome["fetched_bytes"] == outcome["bytes"]
    assert not progress.exists()
    assert len(seen) >= 2, seen
    done = [document["done_bytes"] for document in seen]
    assert done == sorted(done) and done[-1] > done[0]
    # The truth: every file of the revision was fetched, so the total is the manifest's bytes.
    assert {(d["total_bytes"], d["files_total"], d["start_bytes"], d["phase"]) for d in seen} == {
        (outcome["bytes"], outcome["files"], 0, "download")}


def test_nothing_to_fetch_writes_no_progress_file(doubles, models, tmp_path):
    progress = tmp_path / "progress.json"
    run(mirror_args(doubles, models))
    with mock.patch.object(stager, "ProgressWriter", side_effect=AssertionError("written")):
        again = run(mirror_args(doubles, models, progress_file=str(progress)))
    assert not again["changed"] and not progress.exists()


def progress_document(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

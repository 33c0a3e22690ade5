"""model_stage against the real test doubles: the HTTP mirror, a path, and the hub endpoint
driven by the real huggingface_hub client (installed in the test virtual environment)."""
import contextlib
import grp
import hashlib
import io
import json
import os
import pathlib
import pwd
import shutil
import sys
import urllib.request

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.pro6000.inference.plugins.modules import model_stage
from support import free_port, load_module

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
        args = type("Args", (), dict(root=str(root), wheels=None, log=str(self.log), token=TOKEN,
                                     tree_page_size=2, bind="127.0.0.1", cdn_port=ports[2]))
        state = server.State(args)
        self.servers = [server.serve(server.MirrorHandler, state, "127.0.0.1", ports[0]),
                        server.serve(server.HubHandler, state, "127.0.0.1", ports[1]),
                        server.serve(server.CdnHandler, state, "127.0.0.1", ports[2])]
        self.mirror = f"http://127.0.0.1:{ports[0]}"
        self.hub = f"http://127.0.0.1:{ports[1]}"

    def requests(self):
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def clear(self):
        self.log.write_text("")

    def drop(self, match, after):
        urllib.request.urlopen(urllib.request.Request(
            f"{self.mirror}/_control/drop?match={match}&after={after}", method="POST")).read()


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
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        model_stage.main()
    return json.loads(out.getvalue())


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


def test_a_hub_download_cut_mid_file_is_retried_by_the_client_and_verified(doubles, models):
    # huggingface_hub resumes from what it has written, in 10 MB chunks: a 3 MB shard cut after
    # 0.5 MB is fetched again from its start.
    doubles.drop("/cdn/", 500_000)
    result = run(hub_args(doubles, models, workers=1))
    assert result["changed"] and not result.get("failed")
    cut = [r for r in gets(doubles, "cdn") if r["bytes"] == 500_000]
    assert len(cut) == 1
    assert len([r for r in gets(doubles, "cdn") if r["path"] == cut[0]["path"]]) == 2

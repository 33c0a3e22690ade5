"""Fresh stage from the hub double and the mirror, then a no-op rerun that transferred nothing."""
import hashlib
import json
import os
import pathlib
import re

import pytest
import yaml

TOKEN = "hf_double_0123456789abcdef"
LOG = "/var/log/weights-doubles/requests.jsonl"
FACTS = "/etc/ansible/facts.d/model_weights.fact"
TARGET = ("Qwen/Qwen3.6-27B", hashlib.sha1(b"Qwen/Qwen3.6-27B@v1").hexdigest(), "/srv/models/Qwen3.6-27B")
DRAFTER = ("z-lab/Qwen3.6-27B-DFlash", hashlib.sha1(b"z-lab/Qwen3.6-27B-DFlash@v1").hexdigest(),
           "/srv/models/Qwen3.6-27B-DFlash")


def requests(host):
    return [json.loads(line) for line in host.file(LOG).content_string.splitlines() if line]


@pytest.mark.parametrize("repo_id, commit, path", [TARGET, DRAFTER])
def test_link_points_at_a_verified_copy_of_the_pinned_revision(host, repo_id, commit, path):
    link = host.file(path)
    assert link.is_symlink
    assert link.linked_to == f"{path}.revs/{commit}"
    marker = json.loads(host.file(f"{path}/.model_weights.json").content_string)
    assert marker["revision"] == commit and marker["repo_id"] == repo_id
    manifest = json.loads(host.file(f"/srv/fixtures/weights/mirror/{repo_id}/{commit}/manifest.json").content_string)
    assert sorted(marker["files"]) == sorted(entry["path"] for entry in manifest["files"])
    for entry in manifest["files"]:
        assert host.check_output(f"sha256sum {path}/{entry['path']}").split()[0] == entry["sha256"]


@pytest.mark.parametrize("path", [TARGET[2], DRAFTER[2]])
def test_copies_are_roots_and_read_by_the_service_group_only(host, path):
    # Issue 36, finding 2: the service account owns nothing root later writes in <dest>.revs.
    assert host.user("sglang").exists
    found = {}
    for line in host.check_output(f"find {path}.revs -printf '%P|%u %g %m %y\\n'").splitlines():
        name, owner = line.split("|")
        found[name] = owner
    assert found.pop(".lock") == "root root 600 f"
    assert found and all(owner in ("root sglang 750 d", "root sglang 640 f") for owner in found.values()), found
    assert host.run(f"runuser -u sglang -- cat {path}/config.json").rc == 0
    assert host.run(f"runuser -u nobody -- cat {path}/config.json").rc != 0


def test_no_staging_leftovers_or_client_caches(host):
    for path in (TARGET[2], DRAFTER[2]):
        names = host.check_output(f"find {path}.revs -mindepth 1 -maxdepth 2 -printf '%P\\n'").split()
        assert not [n for n in names if ".staging-" in n or n.endswith(".part") or n.startswith(".hf-home")]
        assert not host.file(f"{path}/.cache").exists


def test_every_file_matches_the_lab_lock_file(host):
    # The lock files on the controller are the truth here, not what the doubles served.
    lock_dir = pathlib.Path(__file__).resolve().parents[3] / "inventories/lab/group_vars/pro6000"
    for (_repo, _commit, path), name in ((TARGET, "target"), (DRAFTER, "drafter")):
        lock = json.loads((lock_dir / f"model_weights_{name}_lock.json").read_text())[f"model_weights_{name}_lock"]
        marker = json.loads(host.file(f"{path}/.model_weights.json").content_string)
        assert marker["digest_source"] == "lock" and sorted(marker["files"]) == sorted(f["path"] for f in lock["files"])
        for entry in lock["files"]:
            assert host.check_output(f"sha256sum {path}/{entry['path']}").split()[0] == entry["sha256"]


def test_hub_client_was_installed_from_the_local_index_at_the_pinned_version(host):
    version = host.check_output("/opt/pro6000/model-weights-venv/bin/python -c "
                                "'import huggingface_hub; print(huggingface_hub.__version__)'")
    assert version == "2.4.0"
    # The index double (http.server) logs each request to its unit's journal.
    served = host.check_output("journalctl --unit python-index.service --no-pager --output cat")
    assert '"GET /simple/huggingface-hub/ HTTP/1.1" 200' in served


def test_hub_files_came_through_the_real_client_with_the_token_and_lfs_redirects(host):
    log = requests(host)
    resolves = [r for r in log if r["listener"] == "hub" and "/resolve/" in r["path"]]
    assert resolves and all(r["auth"] for r in resolves)
    cdn = [r for r in log if r["listener"] == "cdn" and r["method"] == "GET"]
    assert len(cdn) == 2 and not any(r["auth"] for r in cdn)  # both shards, token not sent to the CDN
    assert all(r["status"] in (200, 206, 302) for r in log if r["listener"] in ("hub", "cdn"))


def test_the_token_is_not_written_anywhere(host):
    found = host.run(f"grep -rl {TOKEN} /srv/models /etc/ansible /opt/pro6000 /root /var/tmp")
    assert found.rc == 1, found.stdout


def test_rerun_transferred_nothing(host):
    # The facts file is written at the end of the converge; the idempotence run came after it.
    converged = float(host.check_output(f"stat -c %.6Y {FACTS}"))
    later = [r for r in requests(host) if r["t"] > converged]
    assert later == []


def test_facts_record_paths_revisions_and_the_drafter_config(host):
    models = json.loads(host.file(FACTS).content_string)["models"]
    target, drafter = models["target"], models["drafter"]
    assert target["path"] == TARGET[2] and target["revision"] == TARGET[1] and target["source"] == "hub"
    assert target["commit"] == TARGET[1]
    assert target["num_hidden_layers"] == 64 and target["model_type"] == "qwen3_5"
    assert target["files"] == 6 and target["bytes"] > 5 * 1024 * 1024
    assert drafter["path"] == DRAFTER[2] and drafter["source"] == "mirror"
    assert drafter["dflash"]["block_size"] == 16
    assert drafter["dflash"]["target_layer_ids"] == [1, 16, 31, 46, 61]
    assert drafter["dflash"]["mask_token_id"] == 248077
    assert target["verified_at"] and drafter["verified_at"]
    assert target["digest_source"] == drafter["digest_source"] == "lock"


def debug_messages(log):
    """The debug messages of each ansible run in the log (ANSIBLE_LOG_PATH), by process id, in
    order: a record starts with the log's prefix; a result's YAML follows its "=>" on the
    record's further lines, which carry no prefix."""
    runs, records = {}, []
    for line in log.splitlines():
        prefix = re.match(r"^\S+ \S+ p=(\d+) .*?\| (.*)$", line)
        if prefix:
            records.append((prefix.group(1), [prefix.group(2)]))
        elif records:
            records[-1][1].append(line)
    for pid, lines in records:
        runs.setdefault(pid, [])
        if lines[0].rstrip().endswith("=>") and len(lines) > 1:
            result = yaml.safe_load("\n".join(lines[1:]))
            if isinstance(result, dict) and isinstance(result.get("msg"), str):
                runs[pid].append(result["msg"])
    return runs


def test_the_download_printed_its_progress_every_few_seconds():
    # The runs' output (ANSIBLE_LOG_PATH, molecule.yml) against the doubles' slow link: in the
    # converge run, the target's 24 s download at a line every 2 s prints several lines with a
    # rate and a time left, the drafter's at least one; each model's last line says it finished.
    runs = list(debug_messages(pathlib.Path(os.environ["CONVERGE_LOG"]).read_text()).values())
    converge = max(number for number, lines in enumerate(runs) if "Qwen3.6-27B: finished" in lines)
    lines = runs[converge]
    measured = [line for line in lines if re.fullmatch(
        r"Qwen3\.6-27B: download [\d.]+ (KiB|MiB) of 5\.0 MiB \([\d.]+ %\), \d+/\d+ files, "
        r"[\d.]+ (B|KiB|MiB)/s, (\d+ min )?\d+ s left", line)]
    assert len(measured) >= 3, lines
    assert any(line.startswith("Qwen3.6-27B-DFlash: download") for line in lines), lines
    assert "Qwen3.6-27B-DFlash: finished" in lines, lines
    # The idempotence run after it, on the fast path, starts no background job and prints nothing.
    assert len(runs) > converge + 1
    assert not [line for later in runs[converge + 1:] for line in later if "download" in line or "finished" in line]

"""After the failures: the target is v2 and intact, v1 kept, the drafter unchanged, no leftovers."""
import hashlib
import json

TARGET = "/srv/models/Qwen3.6-27B"
DRAFTER = "/srv/models/Qwen3.6-27B-DFlash"
V1 = hashlib.sha1(b"Qwen/Qwen3.6-27B@v1").hexdigest()
V2 = hashlib.sha1(b"Qwen/Qwen3.6-27B@v2").hexdigest()
DRAFTER_V1 = hashlib.sha1(b"z-lab/Qwen3.6-27B-DFlash@v1").hexdigest()


def manifest(host, repo_id, commit):
    path = f"/srv/fixtures/weights/mirror/{repo_id}/{commit}/manifest.json"
    return json.loads(host.file(path).content_string)["files"]


def test_target_serves_v2_with_every_file_matching_its_digest(host):
    assert host.file(TARGET).linked_to.startswith(f"{TARGET}.revs/{V2}")
    for entry in manifest(host, "Qwen/Qwen3.6-27B", V2):
        assert host.check_output(f"sha256sum {TARGET}/{entry['path']}").split()[0] == entry["sha256"]


def test_unchanged_files_are_shared_with_the_previous_revision(host):
    # v2 kept v1's tokenizer by a hard link instead of a second download.
    assert host.file(f"{TARGET}.revs/{V1}/tokenizer.json").exists
    inode = host.check_output(f"stat -c %i {TARGET}/tokenizer.json")
    assert host.check_output(f"stat -c %i {TARGET}.revs/{V1}/tokenizer.json") == inode


def test_drafter_still_serves_v1(host):
    assert host.file(DRAFTER).linked_to == f"{DRAFTER}.revs/{DRAFTER_V1}"
    config = json.loads(host.file(f"{DRAFTER}/config.json").content_string)
    assert config["dflash_config"]["target_layer_ids"] == [1, 16, 31, 46, 61]


def test_only_the_current_and_one_previous_copy_remain(host):
    # The lock (absent since side_effect.yml removed the link planted there) is no copy.
    names = sorted(name for name in host.check_output(f"ls -A {TARGET}.revs").split() if name != ".lock")
    assert names == sorted([V1, host.file(TARGET).linked_to.rsplit("/", 1)[1]])


def test_facts_describe_the_copies_in_use(host):
    models = json.loads(host.file("/etc/ansible/facts.d/model_weights.fact").content_string)["models"]
    assert models["target"]["revision"] == V2 and models["target"]["source"] == "mirror"
    assert models["drafter"]["revision"] == DRAFTER_V1 and models["drafter"]["source"] == "path"
    assert models["drafter"]["dflash"]["block_size"] == 16


def test_the_earlier_layout_was_taken_over_roots_and_read_by_the_service_group(host):
    # Issue 36, finding 2: side_effect.yml gave the target's copies to the service user first.
    for path in (TARGET, DRAFTER):
        found = dict(line.split("|") for line in host.check_output(
            f"find {path}.revs -path '*/.staging-*' -prune -o -printf '%P|%u %g %m %y\\n'").splitlines())
        # The target's lock was the planted link, removed: a run that keeps the copy takes no lock.
        assert found.pop(".lock", None) in ((None, "root root 600 f") if path == TARGET else ("root root 600 f",))
        assert set(found.values()) == {"root sglang 750 d", "root sglang 640 f"}, found
    secret = host.file("/root/outside-secret")
    assert (secret.user, secret.mode, secret.content_string) == ("root", 0o600, "root-only secret\n")


def test_the_failed_bad_drafter_staging_is_kept_for_inspection_not_served(host):
    bad = hashlib.sha1(b"z-lab/Qwen3.6-27B-DFlash@bad").hexdigest()
    assert host.file(f"{DRAFTER}.revs/.staging-{bad}/config.json").exists

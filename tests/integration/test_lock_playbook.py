"""`ansible-playbook pro6000.inference.lock` as a user runs it: README's command as written, from
the collection built with ansible-galaxy and installed into a collections path of its own, in a
directory that is not the checkout, against the hub double and a local git repository. The truths: the text the
collection's helper prints for the same commits, the generator's commits, and git rev-parse."""
import os
import pathlib
import subprocess
import sys

import pytest

from support import REPO_ROOT, HubDouble, git, git_history, weights_commit

sys.path.insert(0, str(REPO_ROOT / "tests" / "scripts"))
from readme_block import readme_block  # noqa: E402

TOKEN = "hf_lock_playbook_token"
TARGET = "Qwen/Qwen3.6-27B"
DRAFTER = "z-lab/Qwen3.6-27B-DFlash"
BIN = pathlib.Path(sys.executable).parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A collections path holding the collection as `ansible-galaxy collection install` puts it."""
    work = tmp_path_factory.mktemp("galaxy")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(REPO_ROOT)],
                   check=True, capture_output=True, timeout=300, cwd=work)
    tarball = next(work.glob("pro6000-inference-*.tar.gz"))
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--force", "-p", str(work / "collections"),
                    str(tarball)], check=True, capture_output=True, timeout=300, cwd=work)
    return work / "collections"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    double = HubDouble(tmp_path_factory.mktemp("hub"), TOKEN)
    yield double
    double.shutdown()


@pytest.fixture(scope="module")
def sglang_repo(tmp_path_factory):
    """A repository with a branch, an annotated tag and a pull request's ref, as SGLang's has."""
    return git_history(tmp_path_factory.mktemp("sglang-git"), 2, {
        0: [["tag", "-a", "-m", "release", "v0.5.23"]], 1: [["update-ref", "refs/pull/29907/head", "HEAD"]]})


def play_env(installed, hub, cwd, sglang_repo=None):
    """The user's environment: the installed collection only, the hub (a mirror) and its token as
    the README says, and git sending SGLang's URL to the local repository (url.<base>.insteadOf, as
    a site's mirror can)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(installed), HF_ENDPOINT=hub.url, PRO6000_HUB_TOKEN=TOKEN,
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", HOME=str(cwd), PATH="%s:%s" % (BIN, os.environ["PATH"]))
    env.pop("ANSIBLE_CONFIG", None)
    env.pop("HF_TOKEN", None)
    if sglang_repo:
        env.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="url.%s.insteadOf" % sglang_repo,
                   GIT_CONFIG_VALUE_0="https://github.com/sgl-project/sglang.git")
    return env


def lock_play(installed, hub, cwd, *extra, check=False, sglang_repo=None):
    argv = [str(BIN / "ansible-playbook"), "pro6000.inference.lock"]
    argv += [arg for pair in extra for arg in ("-e", pair)] + (["--check"] if check else [])
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
                          env=play_env(installed, hub, cwd, sglang_repo))


def site(tmp_path):
    """A site's checkout of its inventory, where the user runs the command (not this checkout)."""
    (tmp_path / "inventories" / "production" / "group_vars" / "pro6000").mkdir(parents=True)
    return tmp_path, "lock_dir=inventories/production/group_vars/pro6000"


def test_the_readmes_command_resolves_every_pin_and_writes_the_helpers_lock_files(
        installed, hub, sglang_repo, tmp_path):
    cwd, _lock_dir = site(tmp_path)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", readme_block("lock")], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False, env=play_env(installed, hub, cwd, sglang_repo))
    assert done.returncode == 0, done.stdout + done.stderr
    group_vars = cwd / "inventories" / "production" / "group_vars" / "pro6000"
    assert sorted(os.listdir(group_vars)) == ["model_weights_drafter_lock.json", "model_weights_target_lock.json"]
    target, drafter = weights_commit(TARGET, "v2"), weights_commit(DRAFTER, "v1")
    assert (group_vars / "model_weights_target_lock.json").read_text() == \
        hub.helper_text(TARGET, target, "model_weights_target_lock")
    assert (group_vars / "model_weights_drafter_lock.json").read_text() == \
        hub.helper_text(DRAFTER, drafter, "model_weights_drafter_lock")
    for pin in ("sglang_source: git", "sglang_git_ref: refs/pull/29907/head",
                "sglang_git_commit: " + git(sglang_repo, "rev-parse", "refs/pull/29907/head"),
                "model_weights_target_revision: " + target, "model_weights_drafter_revision: " + drafter):
        assert pin in done.stdout, done.stdout
    assert TOKEN not in done.stdout

    # Again, with the SGLang ref an annotated tag: the same locks stand, and the tag gives its commit.
    again = lock_play(installed, hub, cwd, "lock_dir=inventories/production/group_vars/pro6000",
                      "lock_target_revision=main", "lock_drafter_revision=main", "lock_sglang_git_repo=%s" % sglang_repo,
                      "lock_sglang_git_ref=v0.5.23")
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout
    assert again.stdout.count(" unchanged") == 2
    tag_commit = git(sglang_repo, "rev-parse", "v0.5.23^{commit}")
    assert tag_commit != git(sglang_repo, "rev-parse", "v0.5.23")  # the tag object is not the answer
    assert "sglang_git_commit: " + tag_commit in again.stdout


def test_nothing_is_written_when_one_input_is_bad(installed, hub, sglang_repo, tmp_path):
    cwd, lock_dir = site(tmp_path)
    group_vars = cwd / "inventories" / "production" / "group_vars" / "pro6000"
    done = lock_play(installed, hub, cwd, lock_dir, "lock_target_revision=main", "lock_drafter_revision=main",
                     "lock_sglang_git_repo=%s" % sglang_repo, "lock_sglang_git_ref=v9.9.9")
    assert done.returncode != 0 and "lock_sglang_git_ref v9.9.9 names no commit in %s" % sglang_repo in done.stdout
    done = lock_play(installed, hub, cwd, lock_dir, "lock_target_revision=main", "lock_drafter_revision=no-such-branch")
    assert done.returncode != 0 and "hub lock of %s failed" % DRAFTER in done.stdout, done.stdout
    # Every bad input is named in the same run.
    done = lock_play(installed, hub, cwd, "lock_dir=no/such/dir", "lock_target_revision=main..x")
    assert done.returncode != 0 and 'lock_dir = "no/such/dir": must be an existing directory' in done.stdout
    assert ('lock_target_revision, lock_drafter_revision, lock_sglang_git_ref = ["main..x", "", ""]: '
            "must be commits or git ref names") in done.stdout, done.stdout
    assert os.listdir(group_vars) == []
    checked = lock_play(installed, hub, cwd, lock_dir, "lock_target_revision=main", check=True)
    assert checked.returncode == 0 and "to write" in checked.stdout and os.listdir(group_vars) == []


def test_a_differing_lock_is_kept_unless_forced(installed, hub, tmp_path):
    cwd, lock_dir = site(tmp_path)
    group_vars = cwd / "inventories" / "production" / "group_vars" / "pro6000"
    v1, v2 = weights_commit(TARGET, "v1"), weights_commit(TARGET, "v2")
    # The first lock from a trusted copy (a relative path, as a user types it): the hub's text.
    (cwd / "copy").symlink_to(hub.root / "mirror" / TARGET / v1)
    first = lock_play(installed, hub, cwd, lock_dir, "lock_target_revision=" + v1, "lock_target_trusted_copy=copy")
    assert first.returncode == 0, first.stdout
    old = (group_vars / "model_weights_target_lock.json").read_text()
    assert old == hub.helper_text(TARGET, v1, "model_weights_target_lock")
    refused = lock_play(installed, hub, cwd, lock_dir, "lock_target_revision=main", "lock_drafter_revision=main")
    assert refused.returncode != 0 and "commit %s becomes %s" % (v1, v2) in refused.stdout
    # The drafter's lock, which was fine, is not written either: the check comes before any write.
    assert os.listdir(group_vars) == ["model_weights_target_lock.json"]
    assert (group_vars / "model_weights_target_lock.json").read_text() == old
    forced = lock_play(installed, hub, cwd, lock_dir, "lock_target_revision=main", "lock_force=true")
    assert forced.returncode == 0 and "written (commit %s becomes %s" % (v1, v2) in forced.stdout, forced.stdout
    assert (group_vars / "model_weights_target_lock.json").read_text() == \
        hub.helper_text(TARGET, v2, "model_weights_target_lock")


def test_ansible_doc_shows_the_module_of_the_installed_collection(installed, tmp_path):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(installed), HOME=str(tmp_path), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    done = subprocess.run([str(BIN / "ansible-doc"), "pro6000.inference.model_lock"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and str(installed) in done.stdout and "trusted_copy" in done.stdout, done.stderr

"""The bot as users get it: the collection's Galaxy tarball ships its source, and a fresh virtual
environment installs it from there, offline, then runs it (issue #40 item 7).

Nothing here reaches an index: pip gets ``--no-index`` and no configuration, the bot's
dependencies and its build backend come from wheels collected once for this Python and this
list of dependencies (``.cache/chatops-bot-wheels-python<X.Y>-<hash of pyproject.toml>``, from
the configured package index; scenario chatops_bot collects the same for its host's Python)."""
import hashlib
import os
import subprocess
import sys
import tarfile

import pytest

from chatops_support import REPO_ROOT

# Wheels of another Python (binary ones, ansible-core's line) or of an older dependency list
# would not install: the folder is named by both.
WHEELS = REPO_ROOT / ".cache" / "chatops-bot-wheels-python{}.{}-{}".format(
    *sys.version_info[:2], hashlib.sha256((REPO_ROOT / "chatops" / "pyproject.toml").read_bytes()).hexdigest()[:16])
ANSIBLE_GALAXY = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
# The fresh environment's: no pip configuration (pip is told everything on its command line),
# and no PYTHONPATH that could import another copy of the bot.
FRESH = {**{name: value for name, value in os.environ.items() if not name.startswith("PIP_") and name != "PYTHONPATH"},
         "PIP_CONFIG_FILE": os.devnull}


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The collection built as Galaxy would publish it, unpacked."""
    folder = tmp_path_factory.mktemp("collection")
    subprocess.run([ANSIBLE_GALAXY, "collection", "build", "--output-path", str(folder), str(REPO_ROOT)],
                   check=True, capture_output=True, timeout=300)
    (tarball,) = folder.glob("pro6000-inference-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
        archive.extractall(folder / "unpacked", filter="data")
    return folder / "unpacked", names, tarball


@pytest.fixture(scope="module")
def wheels(unpacked):
    if not list(WHEELS.glob("setuptools-*.whl")):
        # As molecule/chatops_bot/prepare.yml collects them, for this Python.
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(WHEELS),
                        str(unpacked[0] / "chatops"), "setuptools"], check=True, capture_output=True, timeout=600)
    return WHEELS


def test_the_tarball_holds_the_bots_source_and_no_tests_or_build_outputs(unpacked):
    names = unpacked[1]
    chatops = sorted(name for name in names if name.startswith("chatops/"))
    package = sorted(str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "chatops" / "pro6000_chatops").rglob("*.py"))
    assert set(package) <= set(chatops)
    assert "chatops/pyproject.toml" in chatops and "chatops/README.md" in chatops
    assert "playbooks/chatops.yml" in names
    leftovers = [name for name in chatops if name.startswith(("chatops/tests", "chatops/build"))
                 or ".egg-info" in name or "__pycache__" in name or name.endswith(".pyc")]
    assert not leftovers


def test_a_fresh_environment_installs_the_bot_from_the_tarball_offline_and_runs_it(unpacked, wheels, tmp_path):
    root = unpacked[0]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--find-links", str(wheels),
                                str(root / "chatops")], env=FRESH, capture_output=True, text=True,
                               timeout=600, check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    # What runs is the tarball's source, built here, not a wheel of the cache.
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import pro6000_chatops.commands as m; print(m.__file__)"],
                           env=FRESH, capture_output=True, text=True, check=True, timeout=60, cwd=tmp_path).stdout.strip()
    assert where.startswith(str(venv))
    assert open(where, encoding="utf-8").read() == (root / "chatops" / "pro6000_chatops" / "commands.py").read_text()

    command = str(venv / "bin" / "pro6000-chatops")
    shown = subprocess.run([command, "serve", "--help"], env=FRESH, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0 and "--check" in shown.stdout
    # The example configuration, as the tarball ships it: its inventory and playbooks are the
    # collection's own, beside chatops/.
    checked = subprocess.run([command, "serve", "--check", "--config", str(root / "chatops" / "chatops.example.yml")],
                             env={**FRESH, "PRO6000_HUB_TOKEN": "hf_example", "PRO6000_SGLANG_API_KEY": "sk-example"},
                             capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stderr
    assert "the configuration is valid" in checked.stdout
    refused = subprocess.run([command, "serve", "--check", "--config", str(root / "MANIFEST.json")], env=FRESH,
                             capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2 and "configuration error: matrix is required to serve" in refused.stderr


def test_the_installed_collections_playbook_runs_the_role_and_checks_its_inputs_first(unpacked, tmp_path):
    """``ansible-playbook pro6000.inference.chatops`` from the collection installed from the
    tarball: an empty group is refused by name, and a host without the role's required inputs
    is stopped by the role's checks before it changes anything."""
    tarball = unpacked[2]
    subprocess.run([ANSIBLE_GALAXY, "collection", "install", "--offline", "--force", "-p", str(tmp_path / "collections"), str(tarball)],
                   check=True, capture_output=True, timeout=300)
    environment = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"), "ANSIBLE_NOCOLOR": "1"}
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

    def run(inventory):
        (tmp_path / "hosts.yml").write_text(inventory, encoding="utf-8")
        return subprocess.run([playbook, "pro6000.inference.chatops", "-i", str(tmp_path / "hosts.yml")], env=environment,
                              capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)

    empty = run("pro6000_chatops:\n  hosts: {}\n")
    assert empty.returncode == 2 and "Group pro6000_chatops of the inventory has no host" in empty.stdout
    bare = run("pro6000_chatops:\n  hosts:\n    bot-01:\n      ansible_connection: local\n"
               f"      ansible_python_interpreter: {sys.executable}\n")
    assert bare.returncode == 2
    assert "chatops_bot_config needs a matrix section (homeserver, user_id, rooms)" in bare.stdout
    assert "changed=0" in bare.stdout and "Create the bot's group" not in bare.stdout

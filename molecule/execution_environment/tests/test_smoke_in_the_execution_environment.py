"""playbooks/smoke.yml from the collection inside the execution environment, run by
ansible-navigator against this scenario's host over SSH (tests/scripts/ee.sh passes the image as
PRO6000_EE_IMAGE)."""
import json
import os
import pathlib
import subprocess

import pytest

IMAGE = os.environ.get("PRO6000_EE_IMAGE")
pytestmark = pytest.mark.skipif(not IMAGE, reason="PRO6000_EE_IMAGE names no image: run tests/scripts/ee.sh")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The navigator run and its artifact, from a directory that holds only the inventory and
    the key: no ansible.cfg and no collections, so the collection is the image's own."""
    instance = os.environ.get("PRO6000_EE_HOST", "pro6000-execution_environment")
    address = subprocess.run(["docker", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", instance],
                             check=True, capture_output=True, text=True).stdout.strip()
    work = tmp_path_factory.mktemp("navigator")
    key = work / "id_ed25519"
    key.write_bytes((pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "ee_id_ed25519").read_bytes())
    # ssh refuses a key that others can read (ansible-runner starts docker as this user).
    key.chmod(0o600)
    inventory = {"pro6000": {"hosts": {"lab-ee": {
        "ansible_host": address, "ansible_user": "root", "ansible_ssh_private_key_file": str(key),
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        # A server the collection did not deploy: the double the converge started.
        "smoke_url": "http://127.0.0.1:30000", "smoke_speculative_algorithm": "DFLASH",
        "smoke_model": "/srv/models/Qwen3.6-27B", "smoke_wait_timeout": 120,
        "smoke_bench_concurrency": 2, "smoke_bench_max_tokens": 64,
        "smoke_result_path": "/var/lib/pro6000/smoke/bench.json"}}}}
    (work / "inventory.json").write_text(json.dumps(inventory))
    # ansible-navigator takes a playbook file only; this one is the image's smoke playbook.
    (work / "smoke.yml").write_text("- name: Run the smoke playbook of the collection in the image\n"
                                    "  ansible.builtin.import_playbook: pro6000.inference.smoke\n")
    artifact = work / "artifact.json"
    # Without the ANSIBLE_* settings of this run (Molecule's collections path is the checkout),
    # which ansible-navigator would hand on to the image.
    environ = {name: value for name, value in os.environ.items() if not name.startswith("ANSIBLE_")}
    done = subprocess.run(
        ["ansible-navigator", "run", "smoke.yml", "-i", "inventory.json",
         "--ee", "true", "--ce", "docker", "--eei", IMAGE, "--pp", "never", "-m", "stdout",
         "--pae", "true", "--pas", str(artifact), "--lf", str(work / "navigator.log")],
        cwd=work, env=environ, capture_output=True, text=True, timeout=900, check=False)
    return done, json.loads(artifact.read_text()) if artifact.exists() else None


def test_the_smoke_playbook_passes_in_the_image(smoke_run):
    done = smoke_run[0]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "lab-ee" in done.stdout and "failed=0" in done.stdout


def test_the_benchmark_ran_on_the_host(host, smoke_run):
    done = smoke_run[0]
    assert done.returncode == 0
    result = json.loads(host.file("/var/lib/pro6000/smoke/bench.json").content_string)
    assert result["levels"]

"""playbooks/tune.yml refuses bad inputs before it reads or measures anything, naming every
broken one in one message (the rules idiom of every role, module host_state; issue #39 item 4):
more than one host, a tune_apply other than best or original, open-loop levels without a
latency objective. Real ansible-playbook on two local hosts; the run stops at its first task."""
import os
import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
HOST = "{ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}'}"


def tune(tmp_path, hosts, *extra_vars):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("pro6000:\n  hosts:\n" + "".join("    %s: %s\n" % (host, HOST) for host in hosts))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_FORCE_COLOR="0",
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    argv = [shutil.which("ansible-playbook", path=env["PATH"]), "-i", str(inventory), str(REPO / "playbooks" / "tune.yml")]
    for extra in extra_vars:
        argv += ["-e", extra]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    return done.returncode, " ".join(done.stdout.split())


def test_every_bad_input_is_named_before_anything_is_read(tmp_path):
    returncode, output = tune(tmp_path, ["gpu-01", "gpu-02"], "tune_apply=worst", '{"tune_request_rates": [2]}')
    assert returncode == 2, output
    assert 'tune_host = ["gpu-01", "gpu-02"]: tune.yml measures one host' in output
    assert 'tune_apply = "worst": must be best or original' in output
    assert "tune_request_rates = [2]: reports goodput" in output and "tune_max_ttft_p99_s" in output
    # Nothing after the check ran: not the read of what sglang_service recorded.
    assert "Read what role sglang_service recorded" not in output


def test_good_inputs_pass_the_check_and_reach_the_host(tmp_path):
    returncode, output = tune(tmp_path, ["gpu-01"], '{"tune_request_rates": [2], "tune_max_ttft_p99_s": 0.5}')
    # A host that sglang_service never deployed: the check passed and the next refusal speaks.
    assert returncode == 2, output
    assert "Refuse bad inputs before anything is measured" in output and "must be best or original" not in output
    assert "has no /etc/ansible/facts.d/sglang_service.fact" in output

"""Two rollouts with the default batching (a canary host, then the rest). The first, with the
second host broken: the canary took the new configuration and passed its gate before the second
host was touched, the second still serves its previous configuration, and the run failed naming
it. The second, with the canary broken: the run stopped before the second host was touched."""
import json
import os
import pathlib
import re

testinfra_hosts = ["pro6000-rolling-a", "pro6000-rolling-b"]

EPHEMERAL = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
CANARY, SECOND = testinfra_hosts
# The rollouts asked for draft length 8; the broken host never got past its weights, and the
# canary's second rollout failed at its weights too, so it still serves the first rollout's.
DRAFT_TOKENS_SERVED = {CANARY: 8, SECOND: 16}
GOOD_DRAFTER_COMMIT = "cf6d0e00da920b89734c0515362f5c47b795e30c"
# The smoke role's gate (roles/smoke/tasks/bench.yml).
GATE_TASK = "smoke : Run the smoke benchmark of the host and gate on its floors"


def rollout(broken):
    stdout = (EPHEMERAL / f"rollout-broken-{broken}.log").read_text()
    stderr = (EPHEMERAL / f"rollout-broken-{broken}.err").read_text()
    return stdout, stderr


def failed_count(recap, name):
    return int(re.search(re.escape(name) + r"\s*:.*?failed=(\d+)", recap, re.S).group(1))


def test_the_canary_passed_its_gate_before_the_second_host_was_touched():
    stdout, stderr = rollout("second")
    plays = re.findall(r"^PLAY \[Deploy weights and the inference service", stdout, re.M)
    assert len(plays) == 2, "one batch for the canary, one for the rest"
    gate = stdout.index(GATE_TASK)
    first_of_second = stdout.index(f"[{SECOND}]")
    assert stdout.index(f"ok: [{CANARY}]", gate) < first_of_second
    recap = stdout.split("PLAY RECAP", 1)[1]
    assert failed_count(recap, CANARY) == 0
    assert failed_count(recap, SECOND) == 1
    assert "target_layer_ids" in stderr + stdout


def test_a_broken_canary_stopped_the_rollout_before_the_second_host():
    stdout, stderr = rollout("first")
    recap = stdout.split("PLAY RECAP", 1)[1]
    assert failed_count(recap, CANARY) == 1
    assert SECOND not in stdout + stderr
    assert "target_layer_ids" in stderr + stdout


def test_each_host_still_serves_its_configuration(host):
    name = host.backend.get_hostname()
    assert host.service("sglang-qwen").is_running
    assert host.run("curl -sf -o /dev/null http://127.0.0.1:30000/health").rc == 0
    info = json.loads(host.check_output("curl -sf http://127.0.0.1:30000/server_info"))
    assert info["speculative_algorithm"] == "DDTREE"
    assert info["speculative_num_draft_tokens"] == DRAFT_TOKENS_SERVED[name]


def test_the_broken_drafter_never_became_current(host):
    assert GOOD_DRAFTER_COMMIT in host.check_output("readlink /srv/models/Qwen3.6-27B-DFlash")

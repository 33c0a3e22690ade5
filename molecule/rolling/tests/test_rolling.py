"""After a rollout whose second host failed: the first serves the new configuration, the second
still serves its previous one, and the run failed naming the second host."""
import json
import os
import pathlib
import re

testinfra_hosts = ["pro6000-rolling-a", "pro6000-rolling-b"]

ROLLOUT_LOG = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "rollout.log"
# The rollout asked for draft length 8; the broken host never got past its weights.
DRAFT_TOKENS_SERVED = {"pro6000-rolling-a": 8, "pro6000-rolling-b": 16}
GOOD_DRAFTER_COMMIT = "cf6d0e00da920b89734c0515362f5c47b795e30c"


def failed_count(recap, name):
    return int(re.search(re.escape(name) + r"\s*:.*?failed=(\d+)", recap, re.S).group(1))


def test_the_rollout_failed_on_the_broken_host_only():
    log = ROLLOUT_LOG.read_text()
    recap = log.split("PLAY RECAP", 1)[1]
    assert failed_count(recap, "pro6000-rolling-a") == 0
    assert failed_count(recap, "pro6000-rolling-b") == 1
    assert "target_layer_ids" in log


def test_each_host_still_serves_its_configuration(host):
    name = host.backend.get_hostname()
    assert host.service("sglang-qwen").is_running
    assert host.run("curl -sf -o /dev/null http://127.0.0.1:30000/health").rc == 0
    info = json.loads(host.check_output("curl -sf http://127.0.0.1:30000/server_info"))
    assert info["speculative_algorithm"] == "DDTREE"
    assert info["speculative_num_draft_tokens"] == DRAFT_TOKENS_SERVED[name]


def test_the_broken_drafter_never_became_current(host):
    assert GOOD_DRAFTER_COMMIT in host.check_output("readlink /srv/models/Qwen3.6-27B-DFlash")

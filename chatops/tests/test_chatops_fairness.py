"""How the chat bot shares its run workers: one user's flood of reads never holds more than its
share, and reads never take the worker an operator's deploy needs.

The scheduler is the real one (``bot.Bot`` with its default settings, over a real ``ChatOps``:
grants, host locks, audit log). Two things stand in, so that the test and not a clock decides
when a run ends: the chat room is ``RoomDouble`` (the adapter interface of ``chat/base.py``, in
memory; test_chatops_matrix.py drives the same bot through Synapse), and each run's playbook is
``GatedRuns`` (ChatOps's ``execute``, where ansible-runner would run it), which holds the run
until the test lets it end.
"""
import asyncio
import threading

import pytest
import yaml

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.audit import OUTCOME_EVENTS
from pro6000_chatops.bot import Bot, BotSettings
from pro6000_chatops.chat.base import ChatAdapter, ChatCommand

from chatops_support import ALL_ACTIONS, LOCAL_HOST_VARS, audit_records, write_config

HOSTS = [f"pro6000-{number:02d}" for number in range(1, 9)]
REPLY_TIMEOUT_S = 30


class GatedRuns:
    """Runs every playbook until the test calls ``finish`` (or the run is canceled)."""

    def __init__(self):
        self.started: list[str] = []
        self._finish = threading.Event()

    def __call__(self, run, on_event, cancel):
        self.started.append(run.playbook.name)
        while not self._finish.wait(0.05):
            if cancel.is_set():
                return "canceled", None
        return "successful", 0

    def finish(self) -> None:
        self._finish.set()


class RoomDouble(ChatAdapter):
    """A room in memory: ``say`` delivers a command to the bot, ``replies`` holds what it answered."""

    def __init__(self):
        self.replies: dict[str, list[str]] = {}
        self._commands: asyncio.Queue[ChatCommand] = asyncio.Queue()
        self._replied = asyncio.Condition()
        self._count = 0

    def say(self, sender: str, text: str) -> str:
        self._count += 1
        event_id = f"$event{self._count}"
        self._commands.put_nowait(ChatCommand("!room", sender, event_id, text, event_id))
        return event_id

    async def replied(self, event_id: str, count: int = 1) -> list[str]:
        """The first ``count`` replies to a command, once it has them."""
        async with self._replied:
            await asyncio.wait_for(self._replied.wait_for(lambda: len(self.replies.get(event_id, [])) >= count),
                                   REPLY_TIMEOUT_S)
        return self.replies[event_id]

    async def connect(self):
        pass

    async def listen(self, on_command):
        while True:
            await on_command(await self._commands.get())

    async def reply(self, command, text):
        async with self._replied:
            self.replies.setdefault(command.event_id, []).append(text)
            self._replied.notify_all()

    async def announce(self, text):
        pass

    async def close(self):
        pass


@pytest.fixture
def ops(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"pro6000": {"hosts": {host: LOCAL_HOST_VARS for host in HOSTS}}}))
    runs = GatedRuns()
    config = write_config(tmp_path, inventory, groups={"ops": ["alice"], "on-call": ["carol", "dave", "erin"]},
                          grants=[{"groups": ["ops"], "actions": ALL_ACTIONS, "hosts": ["pro6000-*"]},
                                  {"groups": ["on-call"], "actions": ["status", "bench"], "hosts": ["*"]}])
    return ChatOps(load_config(config), execute=runs), runs


def serve(ops, conversation):
    """Run the bot with its default settings while ``conversation(room)`` goes on."""
    async def main():
        room = RoomDouble()
        stop = asyncio.Event()
        serving = asyncio.create_task(Bot(ops, room, BotSettings.from_mapping({})).serve(stop))
        try:
            return await conversation(room)
        finally:
            stop.set()
            await serving

    return asyncio.run(main())


async def first_replies(room, event_ids):
    return [(await room.replied(event_id))[0] for event_id in event_ids]


def test_one_users_flood_of_reads_holds_its_share_and_another_user_still_gets_a_worker(ops):
    chatops, runs = ops

    async def conversation(room):
        flood = [room.say("carol", f"bench {host}") for host in HOSTS[:6]]
        flooded = await first_replies(room, flood)
        (other,) = await first_replies(room, [room.say("dave", f"bench {HOSTS[6]}")])
        runs.finish()
        summaries = [(await room.replied(event_id, 2))[1] for event_id in flood if
                     room.replies[event_id][0].startswith("received: ")]
        return flooded, other, summaries

    flooded, other, summaries = serve(chatops, conversation)

    received = [reply for reply in flooded if reply.startswith("received: ")]
    assert len(received) == BotSettings().user_requests_in_flight == 2, flooded
    assert [reply for reply in flooded if not reply.startswith("received: ")] == [
        "refused: you have 2 requests in progress, the most this bot takes from one user at once: "
        "try again when one has finished"] * 4
    assert other == f"received: bench {HOSTS[6]}"
    assert [summary.split(":")[0] for summary in summaries] == [f"bench {host}" for host in HOSTS[:2]]
    assert runs.started == ["smoke.yml"] * 3


def test_an_operators_deploy_runs_while_reads_fill_every_worker_they_may_take(ops):
    chatops, runs = ops

    async def conversation(room):
        reads = [room.say("carol", f"status {HOSTS[0]}"), room.say("carol", f"bench {HOSTS[1]}")]
        read_replies = await first_replies(room, reads)
        # dave's two reads one after the other: sent together, either may be the one refused.
        for host in HOSTS[2:4]:
            reads.append(room.say("dave", f"bench {host}"))
            read_replies += await first_replies(room, reads[-1:])
        (one_more_read,) = await first_replies(room, [room.say("erin", f"status {HOSTS[4]}")])
        deploy = room.say("alice", f"deploy {HOSTS[5]} none")
        (deploying,) = await first_replies(room, [deploy])
        assert deploying == f"received: deploy {HOSTS[5]} none"
        # Every worker is busy now: the reads' and the deploy's.
        (no_worker,) = await first_replies(room, [room.say("alice", f"tune {HOSTS[6]}")])
        # ... and a cancel is still answered (it never takes a worker nor counts as in progress).
        cancel = room.say("alice", f"cancel {HOSTS[2]}")
        (canceling,) = await first_replies(room, [cancel])
        runs.finish()
        deployed = (await room.replied(deploy, 2))[1]
        # Once the runs have ended, reads get workers again. A run frees its worker before it posts
        # its summary, and the reads' runs may end after the deploy's: wait for each summary.
        for event_id in reads[:3]:
            await room.replied(event_id, 2)
        read = room.say("erin", f"status {HOSTS[4]}")
        read_again = (await room.replied(read, 2))[0]
        return read_replies, one_more_read, no_worker, canceling, deployed, read_again

    read_replies, one_more_read, no_worker, canceling, deployed, read_again = serve(chatops, conversation)

    # The reads hold every worker but the last: carol two, dave one; the fourth read is refused.
    assert read_replies == [f"received: status {HOSTS[0]}", f"received: bench {HOSTS[1]}",
                            f"received: bench {HOSTS[2]}",
                            "refused: 3 read-only runs are in progress, the most this bot runs at once "
                            "(the last worker is kept for deploy and tune): try again when one has finished"]
    assert one_more_read.startswith("refused: 3 read-only runs are in progress")
    assert no_worker == ("refused: 4 runs are in progress, the most this bot runs at once: "
                         "try again when one has finished")
    assert canceling.startswith("cancel requested for run ") and canceling.endswith(f"(bench {HOSTS[2]} by dave)")
    assert deployed.startswith(f"deploy {HOSTS[5]} none: successful in ")
    assert read_again == f"received: status {HOSTS[4]}"
    assert runs.started.count("deploy.yml") == 1
    # Every request got one outcome record; each run, one finished record.
    records = audit_records(chatops)
    requests = [record["request"] for record in records if record["event"] == "request"]
    outcomes = [record["request"] for record in records if record["event"] in OUTCOME_EVENTS]
    assert sorted(requests) == sorted(outcomes) and len(requests) == 9

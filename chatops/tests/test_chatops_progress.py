"""Progress of long work reaches the command's thread: the bot (its real scheduler and relay,
in the in-memory room of test_chatops_fairness.py) runs a real playbook through ansible-runner
whose weights step is module model_stage in a background job, reported by the common role's
progress loop, against the weights mirror double (tests/fixtures/hub_double/server.py) slowed
down to a slow link's rate. The thread shows the download's figures, built from work_progress's
result, at the bot's batch interval."""
import asyncio
import re
import time

import pytest
import yaml

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.bot import Bot, BotSettings
from pro6000_chatops.summary import progress_text

from chatops_support import LOCAL_HOST_VARS, REPO_ROOT, TESTS, write_config
from support import free_port, load_module
from test_chatops_fairness import RoomDouble

FIXTURES = REPO_ROOT / "tests" / "fixtures"
# 5 MiB of shards at 256 KiB/s per transfer: the 3 MiB shard takes about 12 s.
SLOW_LINK = 256 * 1024


@pytest.fixture
def slow_mirror(tmp_path):
    root = tmp_path / "weights"
    load_module("generate", FIXTURES / "weights" / "generate.py").molecule_profile(str(root))
    server = load_module("hub_double_server", FIXTURES / "hub_double" / "server.py")
    args = type("Args", (), dict(root=str(root), log=str(tmp_path / "requests.jsonl"), token=None,
                                 tree_page_size=1000, bind="127.0.0.1", cdn_port=free_port()))
    state = server.State(args)
    state.slow = ("safetensors", SLOW_LINK)
    port = free_port()
    mirror = server.serve(server.MirrorHandler, state, "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}"
    mirror.shutdown()


def test_the_thread_shows_the_download_s_progress_at_the_batch_interval(tmp_path, slow_mirror):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"pro6000": {"hosts": {"pro6000-01": LOCAL_HOST_VARS}}}))
    out = tmp_path / "out"
    out.mkdir()
    config = write_config(tmp_path, inventory, playbooks_dir=TESTS / "progress_playbooks",
                          environment={"CHATOPS_TEST_OUT": str(out), "CHATOPS_TEST_MIRROR": slow_mirror})
    ops = ChatOps(load_config(config))

    async def conversation():
        room = RoomDouble()
        stop = asyncio.Event()
        bot = Bot(ops, room, BotSettings.from_mapping({"progress_interval_seconds": 0.5}))
        serving = asyncio.create_task(bot.serve(stop))
        try:
            event_id = room.say("alice", "deploy pro6000-01 ddtree draft=12")
            deadline = time.monotonic() + 120
            while not any(reply.startswith("deploy ") for reply in room.replies.get(event_id, [])[1:]):
                assert time.monotonic() < deadline, room.replies
                await asyncio.sleep(0.1)
            return room.replies[event_id]
        finally:
            stop.set()
            await serving

    thread = asyncio.run(conversation())

    assert thread[0] == "received: deploy pro6000-01 ddtree draft=12"
    assert thread[-1].startswith("deploy pro6000-01 ddtree draft=12: successful"), thread
    lines = [line for reply in thread[1:-1] for line in reply.splitlines()]
    figures = [line for line in lines if re.fullmatch(
        r"pro6000-01: Qwen3\.6-27B: download [\d.]+ (KiB|MiB) of 5\.0 MiB, [\d.]+ KiB/s, (\d+ min )?\d+ s left", line)]
    assert len(figures) >= 3, "\n".join(lines)
    assert "pro6000-01: Qwen3.6-27B: finished" in lines, lines
    # The figures arrive over several of the bot's batches, not all in the final one.
    assert len([reply for reply in thread[1:-1] if "Qwen3.6-27B: download" in reply]) >= 2, thread
    # The raw line of the module (which can end with a log line) stays out of the thread.
    assert not [line for line in lines if "files," in line], lines


@pytest.mark.parametrize("result, text", [
    ({"label": "Qwen3.6-27B", "phase": "download", "finished": False, "elapsed_s": 40,
      "progress": {"done_bytes": 12 * 1024 ** 3, "total_bytes": 54 * 10 ** 9, "rate_bytes_per_s": 110100480,
                   "eta_s": 373}},
     "h1: Qwen3.6-27B: download 12.0 GiB of 50.3 GiB, 105.0 MiB/s, 6 min 13 s left"),
    ({"label": "Qwen3.6-27B", "phase": "download", "finished": False, "elapsed_s": 1,
      "progress": {"done_bytes": 0, "total_bytes": 1000, "rate_bytes_per_s": None, "eta_s": None}},
     "h1: Qwen3.6-27B: download 0 B of 1000 B"),
    ({"label": "Install PyTorch from its index", "phase": "pip", "finished": False, "elapsed_s": 190,
      "progress": None, "line": "Install PyTorch from its index: pip, 3 min 10 s elapsed; last: token=abc"},
     "h1: Install PyTorch from its index: pip, 3 min 10 s elapsed"),
    ({"label": "Qwen3.6-27B", "phase": "download", "finished": True, "elapsed_s": None, "progress": None},
     "h1: Qwen3.6-27B: finished"),
    # What does not look like a label, a name or a figure is not relayed.
    ({"label": "a\nmultiline $(label)", "phase": "down load", "finished": False, "elapsed_s": "soon",
      "progress": {"done_bytes": "1", "total_bytes": 2}},
     "h1: ?: ?"),
])
def test_progress_figures_become_a_line_of_their_own_shape(result, text):
    assert progress_text("h1", result) == text

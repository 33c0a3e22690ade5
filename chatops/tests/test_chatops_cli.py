"""The command line: identity only from its options, the chat text as one argument after --,
and Ctrl-C that cancels the run instead of leaving it behind."""
import signal
import subprocess
import sys
import time

import pytest

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.__main__ import main

from chatops_support import audit_records, processes_with, write_config


@pytest.fixture
def config_path(tmp_path, local_inventory):
    out = tmp_path / "out"
    out.mkdir()
    return write_config(tmp_path, local_inventory, environment={
        "CHATOPS_TEST_OUT": str(out), "CHATOPS_TEST_GATE": str(tmp_path / "gate-never-opened")})


@pytest.mark.parametrize("argv", [
    # Options after the chat words: argparse would let the last --user win.
    ["--user", "carol", "deploy", "pro6000-01", "none", "--user", "alice"],
    ["--user", "carol", "deploy pro6000-01 none", "--user", "alice"],
    # An abbreviation of --user.
    ["--us=alice", "--", "status"],
    # More than one argument after --.
    ["--user", "alice", "--", "deploy", "pro6000-01"],
], ids=["words-then-user", "text-then-user", "abbreviation", "words-after-separator"])
def test_identity_comes_only_from_the_options_before_the_separator(config_path, argv):
    with pytest.raises(SystemExit) as exit_status:
        main(["--config", str(config_path), *argv])
    assert exit_status.value.code == 2
    # Nothing ran and nothing was asked in anybody's name.
    assert not (config_path.parent / "audit.jsonl").exists()


def test_option_like_chat_text_is_a_refused_request_of_the_given_user(config_path, capsys):
    status = main(["--config", str(config_path), "--user", "carol", "--", "deploy pro6000-01 none --user alice"])

    assert status == 2
    assert capsys.readouterr().out.startswith("refused: unexpected '--user'")
    request, refusal = audit_records(ChatOps(load_config(config_path)))[-2:]
    assert (request["event"], request["user"], request["text"]) == (
        "request", "carol", "deploy pro6000-01 none --user alice")
    assert refusal["event"] == "refused" and refusal["user"] == "carol"

    assert main(["--config", str(config_path), "--user", "alice", "--", "-e x=1"]) == 2
    assert [record["event"] for record in audit_records(ChatOps(load_config(config_path)))][-2:] == [
        "request", "refused"]


def test_ctrl_c_cancels_the_run_and_leaves_nothing_behind(config_path, tmp_path):
    gate = tmp_path / "gate-never-opened"
    command = subprocess.Popen(
        [sys.executable, "-m", "pro6000_chatops", "--config", str(config_path), "--user", "alice",
         "--", "bench pro6000-02"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "out" / "pro6000-02-smoke.json").exists():
        assert command.poll() is None and time.monotonic() < deadline, command.communicate()
        time.sleep(0.05)

    command.send_signal(signal.SIGINT)
    out, err = command.communicate(timeout=60)

    assert command.returncode == 1, err
    assert "Traceback" not in err, err
    assert "cancelling ..." in out and "bench pro6000-02: canceled in" in out
    assert processes_with(f"CHATOPS_TEST_GATE={gate}") == []
    ops = ChatOps(load_config(config_path))
    assert ops.runs() == [] and ops.recovered == []
    assert list(ops.config.runs_dir.iterdir()) == []
    assert [(r["event"], r.get("status")) for r in audit_records(ops)][-2:] == [
        ("cancel", None), ("finished", "canceled")]

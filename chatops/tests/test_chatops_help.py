"""``help``: the grammar and the asker's own grants, from the configuration; nothing runs, and
the audit log has the request and its outcome. The bot adds its per-user limits
(test_chatops_matrix.py asks it in a Matrix room)."""
import subprocess
import sys

import pytest

from pro6000_chatops.commands import ACTIONS, HELP, Refused, grammar, parse

from chatops_support import audit_records, write_config

# chatops_support.write_config's grants: ops (alice, bob) everything on pro6000-*, carol (group
# viewers, which no grant names) status on pro6000-0[12], dave bench on pro6000-02; mallory none.
GRAMMAR = [
    "commands ([...] is optional):",
    "  deploy HOST [ddtree|dflash|none] [draft=1..16] [budget=1..1024]",
    "  bench HOST (or smoke)",
    "  status [HOST]",
    "  tune HOST",
    "  cancel HOST",
    "  help",
]


def test_the_grammar_lists_every_action_with_its_parameters_and_aliases():
    assert ["  " + line for line in grammar()] == GRAMMAR[1:]
    # Each usage line is what parse() takes: its words, filled in, parse.
    assert parse("deploy pro6000-01 ddtree draft=16 budget=1024").describe() == "deploy pro6000-01 ddtree draft=16 budget=1024"
    assert parse("smoke pro6000-01").action is ACTIONS["bench"]
    assert parse("HELP").action is HELP


@pytest.mark.parametrize("text", ["help pro6000-01", "help ddtree", "help draft=8"])
def test_help_takes_no_arguments(text):
    with pytest.raises(Refused, match=r"unexpected '.+'; usage: help$"):
        parse(text)


def test_an_unknown_action_points_to_help():
    with pytest.raises(Refused, match=r"^unknown action 'reboot': use one of bench, cancel, deploy, status, tune "
                                      r"\(help lists what you may run\)$"):
        parse("reboot pro6000-01")


def test_a_grant_may_not_name_help(tmp_path, local_inventory):
    """help is everyone's: a grant naming it is a configuration error, not a silent no-op."""
    config = write_config(tmp_path, local_inventory,
                          grants=[{"users": ["alice"], "actions": ["help"], "hosts": ["*"]}])
    checked = subprocess.run([sys.executable, "-m", "pro6000_chatops", "--config", str(config), "--user", "alice",
                              "--", "help"], capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 2
    assert "grants[0].actions names unknown action 'help'" in checked.stderr


@pytest.mark.parametrize(("user", "grants"), [
    ("alice", ["you may run (groups ops):",
               "  deploy, bench, status, tune, cancel on hosts pro6000-* of inventory group pro6000"]),
    ("carol", ["you may run (groups viewers):", "  status on hosts pro6000-0[12] of inventory group pro6000"]),
    ("dave", ["you may run:", "  bench on hosts pro6000-02 of inventory group pro6000"]),
    ("mallory", ["you may run no command here: ask the bot's operator for a grant"]),
])
def test_help_answers_the_grammar_and_the_askers_own_grants(spied_ops, runner_spy, user, grants):
    reply = spied_ops.handle(user, "help")

    assert reply.accepted and reply.summary is None
    assert reply.text.splitlines() == GRAMMAR + grants
    assert runner_spy.calls == []
    request, outcome = audit_records(spied_ops)
    assert (request["event"], request["text"], outcome["event"], outcome["user"]) == ("request", "help", "help", user)
    assert request["request"] == outcome["request"] == reply.request_id


def test_help_from_an_invalid_identity_is_refused(spied_ops):
    reply = spied_ops.handle("alice\nbob", "help")
    assert not reply.accepted and reply.text == "refused: the requesting user is not a valid chat identity"


def test_the_command_line_answers_help(tmp_path, local_inventory):
    config = write_config(tmp_path, local_inventory)
    answered = subprocess.run([sys.executable, "-m", "pro6000_chatops", "--config", str(config), "--user", "carol",
                               "--", "help"], capture_output=True, text=True, timeout=120, check=False)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.splitlines() == GRAMMAR + ["you may run (groups viewers):", "  status on hosts pro6000-0[12] of inventory group pro6000"]

"""Secret values never reach what the bot writes: chat replies, progress, the audit log; and
the runner options that keep the playbook's output out of the run directory hold."""
import pytest

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.masking import REDACTED
from pro6000_chatops.runs import CANCEL_POLL_S, PlaybookRun, runner_config

from chatops_support import LOCAL_PLAYBOOKS, write_config

SECRET = "hf_masking_test_0123456789"


def _failing_with_the_secret(run, on_event, cancel):
    """ansible-runner's events of a task whose failure message holds the token (a URL with
    credentials, a module echoing its arguments)."""
    task = {"play": "Deploy", "task": "Download the weights", "host": "pro6000-01"}
    on_event({"event": "playbook_on_task_start", "event_data": task})
    on_event({"event": "runner_on_failed", "event_data": {
        **task, "res": {"msg": f"401 from https://user:{SECRET}@hub.invalid/model"}}})
    return "failed", 2


def _breaking_with_the_secret(run, on_event, cancel):
    raise RuntimeError(f"could not start with token {SECRET}")


@pytest.mark.parametrize("execute", [_failing_with_the_secret, _breaking_with_the_secret])
def test_secrets_are_masked_in_replies_progress_and_the_audit_log(tmp_path, local_inventory, execute):
    config = load_config(write_config(tmp_path, local_inventory, secrets=["PRO6000_HUB_TOKEN"]))
    ops = ChatOps(config, execute=execute, secret_source={"PRO6000_HUB_TOKEN": SECRET})
    progress = []

    reply = ops.handle("alice", "deploy pro6000-01", progress.append)

    written = [reply.text, *(p.text for p in progress), config.audit_log.read_text()]
    assert not any(SECRET in text for text in written)
    assert REDACTED in reply.text and REDACTED in config.audit_log.read_text()


def test_an_error_reply_is_masked_too(tmp_path, local_inventory):
    config = load_config(write_config(tmp_path, local_inventory, secrets=["PRO6000_HUB_TOKEN"]))
    ops = ChatOps(config, execute=_failing_with_the_secret, secret_source={"PRO6000_HUB_TOKEN": SECRET})
    # An error whose message holds the value: here the path of a lock folder gone missing.
    ops.locks.lock_dir = tmp_path / SECRET / "locks"

    reply = ops.handle("alice", "deploy pro6000-01")

    assert reply.text.startswith("error: ") and REDACTED in reply.text and SECRET not in reply.text
    assert SECRET not in config.audit_log.read_text()


def test_the_output_file_and_the_cancel_poll_are_set_after_prepare(tmp_path, local_inventory):
    run = PlaybookRun("0123456789ab", LOCAL_PLAYBOOKS / "deploy.yml", local_inventory, ("pro6000-01",),
                      {}, {}, {}, tmp_path, 60)

    config = runner_config(run, tmp_path)

    assert config.suppress_output_file is True
    assert config.pexpect_timeout == CANCEL_POLL_S

"""Secret values never reach what the bot writes: chat replies, progress, the audit log; and
the runner options that keep the playbook's output out of the run directory hold."""
import base64
import urllib.parse

import pytest

from pro6000_chatops import ChatOps, load_config
from pro6000_chatops.config import ConfigError
from pro6000_chatops.masking import REDACTED, Masker
from pro6000_chatops.runs import CANCEL_POLL_S, PlaybookRun, runner_config
from pro6000_chatops.secrets import find_secrets

from chatops_support import LOCAL_PLAYBOOKS, TESTS, write_config

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


# A task's failure message is withheld; the bot's own error (ansible-runner broke) is masked.
@pytest.mark.parametrize("execute, relayed", [(_failing_with_the_secret, False), (_breaking_with_the_secret, True)])
def test_secrets_are_masked_in_replies_progress_and_the_audit_log(tmp_path, local_inventory, execute, relayed):
    config = load_config(write_config(tmp_path, local_inventory, secrets=["PRO6000_HUB_TOKEN"]))
    ops = ChatOps(config, execute=execute, secret_source={"PRO6000_HUB_TOKEN": SECRET})
    progress = []

    reply = ops.handle("alice", "deploy pro6000-01", progress.append)

    written = [reply.text, *(p.text for p in progress), config.audit_log.read_text()]
    assert not any(SECRET in text for text in written)
    assert reply.text.startswith("deploy pro6000-01: ") and (REDACTED in reply.text) is relayed


def test_a_task_that_prints_secrets_encoded_or_unknown_to_the_bot_reaches_neither_chat_nor_audit(
        tmp_path, local_inventory):
    """Issue #20 row 8 (a known secret base64-encoded, upper-cased, spaced, URL-encoded) and the
    chat side of row 2 (a failure message holding an API key the bot does not know): a real run."""
    api_key = "sk-sglang-7f3c9a2e1b"
    token = "hf_Leak/Test+Tok=0123456789"
    config = load_config(write_config(tmp_path, local_inventory, playbooks_dir=TESTS / "leaky_playbooks",
                                      secrets=["PRO6000_HUB_TOKEN"],
                                      environment={"CHATOPS_TEST_API_KEY": api_key}))
    ops = ChatOps(config, secret_source={"PRO6000_HUB_TOKEN": token})
    progress = []

    reply = ops.handle("alice", "deploy pro6000-01", progress.append)

    assert reply.summary.status == "failed"
    assert reply.text.splitlines()[-1] == (
        "failure: pro6000-01: Roll back and report the server's last journal lines: failed; "
        "its message is withheld from chat and the audit log; the bot's log has it")
    assert "task: Use the token **redacted**" in [p.text for p in progress]
    forms = {token, token.upper(), " ".join(token), urllib.parse.quote(token, safe=""), api_key,
             # The characters of the token's base64 that do not depend on its neighbours.
             base64.b64encode(token.encode()).decode()[:-4],
             base64.b64encode(b"x" + token.encode()).decode()[4:-4],
             base64.b64encode(b"Bearer: " + token.encode()).decode()[12:-4]}
    written = "\n".join([reply.text, *(p.text for p in progress), config.audit_log.read_text()])
    assert [form for form in forms if form in written] == []


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


TOKEN = "hf_Leak/Test+Tok=0123456789"


@pytest.mark.parametrize("form", [
    TOKEN.upper(), TOKEN.lower(), " ".join(TOKEN), "  ".join(TOKEN.upper()),
    urllib.parse.quote(TOKEN, safe=""), urllib.parse.quote_plus(TOKEN), urllib.parse.quote(TOKEN).lower(),
    *(base64.b64encode(prefix.encode() + TOKEN.encode() + suffix.encode()).decode()
      for prefix in ("", "x", "xy") for suffix in ("", "z", "zz")),
    base64.urlsafe_b64encode(b"?" + TOKEN.encode()).decode(),
    TOKEN.encode().hex(), TOKEN.encode().hex().upper(),
], ids=lambda form: form[:24])
def test_the_masker_finds_a_secret_in_its_usual_encodings(form):
    masked = Masker([TOKEN]).text(f"token: {form} (end)")
    assert REDACTED in masked and masked.startswith("token: ") and masked.endswith(" (end)")
    # Of a base64 form, what is left is the neighbours' characters (up to two bytes, three
    # characters, each side) and at most one character at either end that mixes their bits
    # with the token's.
    left = masked[len("token: "):-len(" (end)")].replace(REDACTED, "", 1).rstrip("=")
    assert len(left) <= 8, masked


def test_the_masker_leaves_ordinary_text_alone():
    text = ("TASK [Download the weights] ok: [pro6000-01] => hf_Leak/Test+Tok=012345678 "
            "aGZfTGVhay9UZXN0K1Rv is not the whole token; 68665f4c65616b")
    assert Masker([TOKEN, "short"]).text(text) == text


# Where the secrets come from (secrets.py): the unit's credentials, or the command line's
# environment. A name the configuration gives is never dropped for want of a value.
API_KEY = "sk-sglang-credential-0123456789"


def _credentials(folder, values, mode=0o400):
    folder.mkdir()
    for name, value in values.items():
        (folder / name).write_text(value + "\n")
        (folder / name).chmod(mode)
    return folder


def test_a_named_secret_that_cannot_be_found_is_an_error_not_dropped(tmp_path, local_inventory, runner_spy):
    config = load_config(write_config(tmp_path, local_inventory,
                                      secrets=["PRO6000_HUB_TOKEN", "PRO6000_SGLANG_API_KEY"]))
    with pytest.raises(ConfigError, match=r"secrets names PRO6000_SGLANG_API_KEY, not found in the bot's environment"):
        ChatOps(config, execute=runner_spy, secret_source={"PRO6000_HUB_TOKEN": SECRET})
    with pytest.raises(ConfigError, match=r"secrets names PRO6000_HUB_TOKEN, not found"):
        ChatOps(config, execute=runner_spy, secret_source={"PRO6000_HUB_TOKEN": "", "PRO6000_SGLANG_API_KEY": API_KEY})
    assert runner_spy.calls == [] and not config.audit_log.exists()


def test_under_the_unit_the_secrets_come_from_its_credentials_and_reach_the_run(tmp_path, local_inventory, runner_spy):
    credentials = _credentials(tmp_path / "credentials", {"PRO6000_HUB_TOKEN": SECRET, "PRO6000_SGLANG_API_KEY": API_KEY})
    config = load_config(write_config(tmp_path, local_inventory,
                                      secrets=["PRO6000_HUB_TOKEN", "PRO6000_SGLANG_API_KEY"]))
    # The unit's Environment= never holds a secret; one that did is not what the run gets.
    ops = ChatOps(config, execute=runner_spy, secret_source={
        "CREDENTIALS_DIRECTORY": str(credentials), "PRO6000_HUB_TOKEN": "hf_from_the_environment"})
    assert ops.handle("alice", "bench pro6000-01").accepted
    assert runner_spy.calls[0].secrets == {"PRO6000_HUB_TOKEN": SECRET, "PRO6000_SGLANG_API_KEY": API_KEY}
    assert SECRET not in config.audit_log.read_text() and API_KEY not in config.audit_log.read_text()


def test_a_credential_missing_or_readable_by_others_is_an_error(tmp_path, local_inventory):
    credentials = _credentials(tmp_path / "credentials", {"PRO6000_HUB_TOKEN": SECRET}, mode=0o644)
    config = load_config(write_config(tmp_path, local_inventory,
                                      secrets=["PRO6000_HUB_TOKEN", "PRO6000_SGLANG_API_KEY"]))
    with pytest.raises(ConfigError, match=r"secret PRO6000_HUB_TOKEN .* is readable by other users"):
        find_secrets(config.secrets, {"CREDENTIALS_DIRECTORY": str(credentials)})
    (credentials / "PRO6000_HUB_TOKEN").chmod(0o600)
    with pytest.raises(ConfigError, match=r"secrets names PRO6000_SGLANG_API_KEY, not found as files in "
                                          r"\$CREDENTIALS_DIRECTORY \(.*credentials; the unit's LoadCredential=\)"):
        find_secrets(config.secrets, {"CREDENTIALS_DIRECTORY": str(credentials), "PRO6000_SGLANG_API_KEY": API_KEY})
    (credentials / "PRO6000_SGLANG_API_KEY").symlink_to(credentials / "PRO6000_HUB_TOKEN")
    with pytest.raises(ConfigError, match=r"secret PRO6000_SGLANG_API_KEY .*: Too many levels of symbolic links"):
        find_secrets(config.secrets, {"CREDENTIALS_DIRECTORY": str(credentials)})

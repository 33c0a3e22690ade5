"""The bot's own configuration (matrix, bot sections) and its token file: every mistake is
named before the bot connects anywhere."""
import os
import subprocess
import sys

import pytest
import yaml

from pro6000_chatops.bot import RATE_WINDOW_S, BotSettings, UserLimits
from pro6000_chatops.chat.matrix import MatrixSettings, read_access_token
from pro6000_chatops.config import ConfigError

from chatops_support import TESTS, write_config

MATRIX = {"homeserver": "https://matrix.example.org", "user_id": "@bot:example.org",
          "access_token_file": "token", "rooms": ["!ops:example.org"], "state_dir": "state"}


@pytest.mark.parametrize("change, message", [
    ({"homeserver": "matrix.example.org"}, "matrix.homeserver must be the homeserver's base URL"),
    ({"homeserver": "https://matrix.example.org/path?x"}, "matrix.homeserver must be"),
    ({"user_id": "bot"}, "matrix.user_id must be the bot's Matrix user ID"),
    ({"rooms": []}, "matrix.rooms must be a non-empty list"),
    ({"rooms": ["ops"]}, "matrix.rooms must be a non-empty list of room IDs"),
    ({"state_dir": ""}, "matrix.state_dir must be a path"),
    ({"token": "x"}, "matrix has unknown keys: token"),
    ({"access_token_file": None}, "matrix.access_token_file must be a path"),
])
def test_a_bad_matrix_section_is_named(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        MatrixSettings.from_mapping({**MATRIX, **change}, tmp_path)


def test_a_missing_matrix_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match="matrix.rooms is required"):
        MatrixSettings.from_mapping({k: v for k, v in MATRIX.items() if k != "rooms"}, tmp_path)


@pytest.mark.parametrize("raw, message", [
    ({"run_workers": 0}, "bot.run_workers must be a whole number from 3 to 64: one worker is kept for deploy"),
    # One worker kept for deploy and tune, one for the other users' reads: two would leave none.
    ({"run_workers": 2, "user_requests_in_flight": 1}, "bot.run_workers must be a whole number from 3 to 64"),
    ({"run_workers": True}, "bot.run_workers"),
    ({"progress_interval_seconds": "5"}, "bot.progress_interval_seconds must be a number"),
    ({"on_stop": "kill"}, "bot.on_stop must be one of cancel, hand_over"),
    ({"workers": 2}, "bot has unknown keys: workers"),
    ({"user_requests_in_flight": 0}, "bot.user_requests_in_flight must be a whole number from 1 to 2"),
    # One user holding three of four workers would leave none for another user's read.
    ({"user_requests_in_flight": 3}, r"bot.user_requests_in_flight must be a whole number from 1 to 2 "
                                     r"\(run_workers 4 less 2\): one user's requests must leave a worker"),
    ({"run_workers": 5, "user_requests_in_flight": 4}, r"from 1 to 3 \(run_workers 5 less 2\)"),
    ({"user_requests_per_minute": 601}, "bot.user_requests_per_minute must be a whole number from 1 to 600"),
    ({"user_requests_per_minute": 2.5}, "bot.user_requests_per_minute"),
])
def test_a_bad_bot_section_is_named(raw, message):
    with pytest.raises(ConfigError, match=message):
        BotSettings.from_mapping(raw)


def test_the_per_user_limits_have_defaults_and_are_read():
    assert (BotSettings().user_requests_in_flight, BotSettings().user_requests_per_minute) == (2, 20)
    settings = BotSettings.from_mapping({"user_requests_in_flight": 1, "user_requests_per_minute": 5})
    assert (settings.user_requests_in_flight, settings.user_requests_per_minute) == (1, 5)
    settings = BotSettings.from_mapping({"run_workers": 8, "user_requests_in_flight": 6})
    assert (settings.run_workers, settings.user_requests_in_flight) == (8, 6)


def test_user_limits_count_each_user_apart_and_free_what_ended():
    now = [1000.0]
    limits = UserLimits(in_flight=2, per_minute=3, clock=lambda: now[0])
    assert limits.take("mallory", True) is None and limits.take("mallory", True) is None
    assert limits.take("mallory", True).startswith("you have 2 requests in progress")
    # Another user is not counted against her; a cancel never waits for her runs.
    assert limits.take("alice", True) is None
    assert limits.take("mallory", False) is None
    assert limits.take("mallory", False).startswith("you sent 3 requests in the last minute")
    limits.release("mallory")
    assert limits.take("mallory", True).startswith("you sent 3 requests")
    now[0] += RATE_WINDOW_S
    assert limits.take("mallory", True) is None
    assert limits.take("mallory", True).startswith("you have 2 requests in progress")


def test_a_token_file_others_can_read_is_refused(tmp_path):
    token = tmp_path / "token"
    token.write_text("syt_abc\n")
    token.chmod(0o644)
    with pytest.raises(ConfigError, match="is readable by other users"):
        read_access_token(token)
    token.chmod(0o600)
    assert read_access_token(token) == "syt_abc"
    (tmp_path / "link").symlink_to(token)
    with pytest.raises(ConfigError, match="matrix.access_token_file"):
        read_access_token(tmp_path / "link")


def check(config, secrets=None):
    """``serve --check``; ``secrets`` replaces the secrets' variables of the environment."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("PRO6000_") and name != "CREDENTIALS_DIRECTORY"}
    return subprocess.run([sys.executable, "-m", "pro6000_chatops", "serve", "--check", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False, env={**environment, **(secrets or {})})


def test_serve_check_validates_the_whole_file_and_changes_nothing(tmp_path, local_inventory):
    config = write_config(tmp_path, local_inventory)
    document = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**document, "matrix": MATRIX}))
    assert check(config).returncode == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["chatops.yml"]  # no lock or audit folder

    config.write_text(yaml.safe_dump({**document, "matrix": {**MATRIX, "rooms": "!ops"}}))
    refused = check(config)
    assert refused.returncode == 2 and "matrix.rooms must be" in refused.stderr
    config.write_text(yaml.safe_dump(document))
    refused = check(config)
    assert refused.returncode == 2 and "matrix is required" in refused.stderr
    config.write_text(yaml.safe_dump({**document, "matrix": MATRIX, "grants": []}))
    assert "grants must be a non-empty list" in check(config).stderr


def test_the_example_configuration_is_valid():
    assert check(TESTS.parent / "chatops.example.yml",
                 {"PRO6000_HUB_TOKEN": "hf_example", "PRO6000_SGLANG_API_KEY": "sk-example"}).returncode == 0


def test_serve_check_refuses_a_named_secret_the_unit_does_not_supply(tmp_path, local_inventory):
    """The role runs ``serve --check`` with the unit's credential files before it writes the
    configuration: a secret named there without a file stops the role, naming it."""
    config = write_config(tmp_path, local_inventory, secrets=["PRO6000_HUB_TOKEN", "PRO6000_SGLANG_API_KEY"])
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "matrix": MATRIX}))
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "PRO6000_HUB_TOKEN").write_text("hf_check\n")
    (credentials / "PRO6000_HUB_TOKEN").chmod(0o600)
    refused = check(config, {"CREDENTIALS_DIRECTORY": str(credentials), "PRO6000_SGLANG_API_KEY": "sk-environment"})
    assert refused.returncode == 2
    assert "secrets names PRO6000_SGLANG_API_KEY, not found as files in $CREDENTIALS_DIRECTORY" in refused.stderr
    (credentials / "PRO6000_SGLANG_API_KEY").write_text("sk-check\n")
    (credentials / "PRO6000_SGLANG_API_KEY").chmod(0o600)
    assert check(config, {"CREDENTIALS_DIRECTORY": str(credentials)}).returncode == 0

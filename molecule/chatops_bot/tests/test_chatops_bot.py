"""The bot installed as a service: running as its own user, its token readable by the service
alone, sandboxed to an exposure of 2.5 or lower, and retrying while no homeserver answers."""
import re
import time

UNIT = "pro6000-chatops.service"
TOKEN = "syt_molecule_test_token_0123456789"
TOKEN_FILE = "/etc/pro6000-chatops/matrix-access-token"
CONFIG_FILE = "/etc/pro6000-chatops/chatops.yml"
CREDENTIAL = "/run/credentials/pro6000-chatops.service/matrix-access-token"
# The bound; the unit measured 1.2 here (systemd 252). IPAddressDeny stays open (the bot
# reaches a homeserver and the hosts; chatops_bot_ip_address_allow closes it).
MAX_EXPOSURE = 2.5


def show(host, *properties):
    out = host.check_output("systemctl show %s -p %s", UNIT, ",".join(properties))
    return dict(line.split("=", 1) for line in out.splitlines())


def journal(host):
    return host.check_output("journalctl -u %s --no-pager -o cat", UNIT)


def test_the_bot_runs_as_its_own_user_and_keeps_running_without_a_homeserver(host):
    before = show(host, "NRestarts", "MainPID", "ActiveState")
    time.sleep(12)  # longer than RestartSec: a bot that crashed would show a restart
    after = show(host, "NRestarts", "MainPID", "ActiveState")
    assert after["ActiveState"] == "active" and after == before
    assert host.check_output("stat -c %%U /proc/%s", after["MainPID"]) == "pro6000-chatops"
    # It read its token and configuration, and waits for the homeserver (nio's retry).
    log = journal(host)
    assert "Timed out, sleeping for" in log
    assert "configuration error" not in log and TOKEN not in log


def test_the_token_is_root_only_on_disk_and_handed_to_the_service_alone(host):
    token = host.file(TOKEN_FILE)
    assert (token.user, token.group, token.mode) == ("root", "root", 0o600)
    assert host.run("runuser -u pro6000-chatops -- cat %s", TOKEN_FILE).rc != 0
    # (systemctl show prints this property as [unprintable] on systemd 252)
    assert f"LoadCredential=matrix-access-token:{TOKEN_FILE}\n" in host.file(f"/etc/systemd/system/{UNIT}").content_string
    # The copy systemd made for the running service: the bot's alone, and nobody else's.
    credential = host.file(CREDENTIAL)
    assert (credential.user, credential.mode) == ("pro6000-chatops", 0o400)
    assert credential.content_string == TOKEN + "\n"
    assert host.run("runuser -u nobody -- cat %s", CREDENTIAL).rc != 0
    # The bot read it (it reads the token before it calls the homeserver).
    assert "matrix: connecting to http://127.0.0.1:8448 as @pro6000-bot:example.org" in journal(host)


def test_the_configuration_names_the_credential_and_the_units_directories(host):
    config = host.file(CONFIG_FILE)
    assert (config.user, config.group, config.mode) == ("root", "pro6000-chatops", 0o640)
    assert f"access_token_file: {CREDENTIAL}" in config.content_string
    assert "lock_dir: /run/pro6000-chatops/locks" in config.content_string
    assert TOKEN not in config.content_string
    assert host.run("/opt/pro6000-chatops/bin/pro6000-chatops serve --check --config %s", CONFIG_FILE).rc == 0


def test_runs_outlive_the_bot_and_only_the_bot_is_signalled(host):
    properties = show(host, "KillMode", "RuntimeDirectoryPreserve", "User", "Restart")
    assert properties == {"KillMode": "process", "RuntimeDirectoryPreserve": "yes",
                          "User": "pro6000-chatops", "Restart": "on-failure"}


# What a run's keeper does first (pro6000_chatops.runs.RunGroup), then undoes.
RUN_GROUP_PROBE = ("from pro6000_chatops.runs import RunGroup\n"
                   "group = RunGroup.enter('molecule-probe')\n"
                   "assert group is not None, 'no cgroup for the run'\n"
                   "group.leave()\n"
                   "assert group.kill()\n"
                   "print(group.path)\n")


def test_each_run_can_get_a_cgroup_of_its_own_below_the_units(host):
    """Issue #20 row 4: the unit delegates its cgroup to the bot (Delegate=yes), and the
    hierarchy is writable in the unit's mount namespace (no ProtectControlGroups=). The probe
    runs as a keeper does: in the unit's cgroup, as the bot's user, with the bot's code."""
    assert show(host, "Delegate", "ProtectControlGroups") == {"Delegate": "yes", "ProtectControlGroups": "no"}
    pid = show(host, "MainPID")["MainPID"]
    unit_group = host.check_output("sed -n 's/^0:://p' /proc/%s/cgroup", pid)
    mount, options = host.check_output("awk '$9 == \"cgroup2\" {print $5, $6; exit}' /proc/%s/mountinfo",
                                       pid).split()
    assert options.split(",")[0] == "rw"
    probe = host.run(
        "echo $$ > %s/cgroup.procs && exec setpriv --reuid pro6000-chatops --regid pro6000-chatops "
        "--clear-groups -- /opt/pro6000-chatops/bin/python -c %s", mount + unit_group, RUN_GROUP_PROBE)
    assert probe.rc == 0, probe.stderr
    assert probe.stdout.strip() == f"{mount}{unit_group}/pro6000-chatops-molecule-probe"


def test_the_unit_is_sandboxed(host):
    out = host.check_output("systemd-analyze security --no-pager %s", UNIT)
    exposure = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", out).group(1))
    assert exposure <= MAX_EXPOSURE, out

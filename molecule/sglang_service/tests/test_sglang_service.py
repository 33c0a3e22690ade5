"""The converged host after the side effects: DDTree at draft length 8, sandboxed, key kept secret."""
import json
import re

import pytest

UNIT = "sglang-qwen.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT
ENV_FILE = "/etc/sglang-qwen/sglang-qwen.env"
SECRETS_FILE = "/etc/sglang-qwen/sglang-qwen.secrets.yaml"
API_KEY = "molecule-api-key-0123456789"
# Measured in the container: 1.7. PrivateNetwork, PrivateDevices, PrivateUsers, ProcSubset,
# MemoryDenyWriteExecute and @debug (pidfd_getfd) stay open for the GPU and CUDA; anything above
# this is a regression.
MAX_EXPOSURE = 1.7


def server_info(host, key=API_KEY):
    out = host.check_output(
        "curl -s -w '\\n%%{http_code}' -H 'Authorization: Bearer %s' http://127.0.0.1:30000/server_info", key)
    body, status = out.rsplit("\n", 1)
    return int(status), body


def test_server_runs_as_the_service_account(host):
    assert host.service(UNIT).is_running
    assert host.service(UNIT).is_enabled
    pid = host.check_output("systemctl show -p MainPID --value %s", UNIT)
    assert host.check_output("stat -c %%U /proc/%s", pid) == "sglang"


def test_server_listens_on_loopback_only(host):
    assert host.socket("tcp://127.0.0.1:30000").is_listening
    assert not host.socket("tcp://0.0.0.0:30000").is_listening


def test_server_serves_ddtree_with_the_new_draft_length(host):
    status, body = server_info(host)
    assert status == 200
    info = json.loads(body)
    assert info["speculative_algorithm"] == "DDTREE"
    assert info["speculative_num_draft_tokens"] == 8
    assert info["speculative_ddtree_budget"] == 7
    assert info["speculative_draft_model_path"] == "/srv/models/Qwen3.6-27B-DFlash"
    assert info["page_size"] == 1
    assert info["max_running_requests"] == 4


def test_the_fact_records_what_the_server_serves(host):
    fact = host.file("/etc/ansible/facts.d/sglang_service.fact")
    assert fact.mode == 0o644 and API_KEY not in fact.content_string
    record = json.loads(fact.content_string)
    # The plan's decisions for correctness: DDTree turns the overlap scheduler off, which
    # extra_buffer_lazy needs (issue 38), so the radix cache is off; and no model_weights record
    # says what context this scenario's drafter declares.
    mamba = record.pop("mamba")
    assert (mamba["strategy"], mamba["radix_cache"]) == (None, False)
    assert record.pop("drafter_context") == {"drafter": None, "served": None, "overwrite": True}
    assert record == {
        "url": "http://127.0.0.1:30000", "unit": UNIT, "algorithm": "ddtree", "wanted_algorithm": "ddtree",
        "fallback": False, "draft_length": 8, "ddtree_budget": 7, "model_path": "/srv/models/Qwen3.6-27B",
        "served_model_name": "Qwen3.6-27B", "draft_model_path": "/srv/models/Qwen3.6-27B-DFlash",
        # No GPU is seen in this container: one replica with every device, no gateway.
        "gateway": None, "replicas": [{"name": "sglang-qwen", "unit": UNIT, "url": "http://127.0.0.1:30000",
                                       "port": 30000, "gpus": [], "metrics_url": "http://127.0.0.1:30000/metrics"}]}


# issue 37 item 7: clients send the target's short name as model, not its directory.
def test_the_openai_api_lists_the_targets_short_name(host):
    models = json.loads(host.check_output(
        "curl -sf -H 'Authorization: Bearer %s' http://127.0.0.1:30000/v1/models", API_KEY))
    assert [card["id"] for card in models["data"]] == ["Qwen3.6-27B"]


def test_a_chat_naming_the_short_name_as_model_answers(host):
    body = json.dumps({"model": "Qwen3.6-27B", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "Say hello."}]})
    out = host.check_output(
        "curl -s -w '\\n%%{http_code}' -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' "
        "-d %s http://127.0.0.1:30000/v1/chat/completions", API_KEY, body)
    answer, status = out.rsplit("\n", 1)
    assert int(status) == 200, answer
    assert json.loads(answer)["model"] == "Qwen3.6-27B"


def test_server_refuses_requests_without_the_key(host):
    status = server_info(host, key="wrong")[0]
    assert status == 401


def test_unit_runs_the_rendered_ddtree_command_line(host):
    unit = host.file(UNIT_PATH).content_string
    exec_start = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit, re.M | re.S).group(1)
    words = exec_start.replace("\\\n", " ").split()
    python = json.loads(host.file("/etc/ansible/facts.d/sglang.fact").content_string)["python"]
    assert words[:3] == [python, "-m", "sglang.launch_server"]
    pairs = dict(zip(words[3:], words[4:]))
    assert pairs["--speculative-algorithm"] == "DDTREE"
    assert pairs["--speculative-num-draft-tokens"] == "8"
    assert pairs["--served-model-name"] == "Qwen3.6-27B"
    assert pairs["--speculative-ddtree-budget"] == "7"
    assert "--disable-radix-cache" in words and "--mamba-radix-cache-strategy" not in words
    assert pairs["--host"] == "127.0.0.1"
    assert "--api-key" not in pairs
    assert pairs["--config"] == SECRETS_FILE


def test_the_server_runs_with_the_health_check_timeout_stated(host):
    """/health waits this long for its generate; the gateway's probes wait longer (issue 38)."""
    pid = host.check_output("systemctl show -p MainPID --value %s", UNIT)
    assert "SGLANG_HEALTH_CHECK_TIMEOUT=20" in host.check_output("tr '\\0' '\\n' < /proc/%s/environ", pid).splitlines()


def test_api_key_lives_only_in_the_secrets_file_of_root_and_the_server(host):
    assert API_KEY not in host.file(UNIT_PATH).content_string
    assert API_KEY not in host.file(ENV_FILE).content_string
    secrets = host.file(SECRETS_FILE)
    assert (secrets.user, secrets.group, secrets.mode) == ("root", "sglang", 0o640)
    assert host.file("/etc/sglang-qwen").mode == 0o750
    assert host.run("runuser -u nobody -- cat %s", SECRETS_FILE).rc != 0
    assert json.loads("".join(line for line in secrets.content_string.splitlines()
                              if not line.startswith("#"))) == {"api-key": API_KEY}


def test_api_key_is_not_in_argv_environment_or_systemctl_show(host):
    pid = host.check_output("systemctl show -p MainPID --value %s", UNIT)
    # Any local user can read another user's command line: read it as one.
    cmdline = host.check_output("runuser -u nobody -- cat /proc/%s/cmdline | tr '\\0' ' '", pid)
    assert "sglang.launch_server" in cmdline
    assert API_KEY not in cmdline
    assert API_KEY not in host.check_output("runuser -u nobody -- ps -eo args")
    assert API_KEY not in host.check_output("tr '\\0' '\\n' < /proc/%s/environ", pid)
    assert API_KEY not in host.check_output("systemctl show %s", UNIT)
    assert API_KEY not in host.check_output("systemctl cat %s", UNIT)


def test_last_good_copies_match_what_runs(host):
    for path in (UNIT_PATH, ENV_FILE, SECRETS_FILE):
        copy = host.file("/etc/sglang-qwen/last-good/" + path.rsplit("/", 1)[1])
        assert copy.exists
        assert copy.sha256sum == host.file(path).sha256sum


@pytest.mark.parametrize("setting, value", [
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("NoNewPrivileges", "yes"),
    ("DevicePolicy", "closed"),
    ("RestartPreventExitStatus", "2"),
    ("Restart", "on-failure"),
])
def test_unit_is_sandboxed(host, setting, value):
    assert host.check_output("systemctl show -p %s --value %s", setting, UNIT) == value


def test_gpu_devices_are_the_only_devices_allowed(host):
    allowed = host.check_output("systemctl show -p DeviceAllow --value %s", UNIT)
    for group in ("char-nvidia rw", "char-nvidiactl rw", "char-nvidia-uvm rw"):
        assert group in allowed


def test_exposure_score_stays_low(host):
    report = host.check_output("systemd-analyze security --no-pager %s", UNIT)
    score = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", report).group(1))
    print("systemd-analyze security exposure: %.1f" % score)
    assert score <= MAX_EXPOSURE


def test_replica_that_failed_its_first_start_is_gone(host):
    state = host.check_output("systemctl show -p LoadState --value sglang-qwen-0.service")
    assert state == "not-found"

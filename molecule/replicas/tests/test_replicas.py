"""After the side effects: a change that failed the smoke gate stopped at the canary (rolled back,
the three others untouched, no request lost), the same change under a floor it passes went through
the canary's benchmark first, then to every replica, the constant load through it lost no request
and a long request outlived the gateway's drain and the stop of its replica,
tensor parallel 2 on four GPUs (two replicas behind the gateway), the replica on the faulty GPU was
rolled back alone and named, and the smoke gate named the replica the gateway's pool lacked. (The API key's path through replicas and gateway is tested by
molecule/sglang_service and tests/integration/test_gateway_argv_real_parser.py.)"""
import json
import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "shared" / "verify"))
from gateway_api import (  # noqa: E402
    CONTROL_PLANE_KEY_FILE, assert_only_the_control_plane_key_opens_the_workers, control_plane_key,
)

TEST_DIR = "/var/lib/replicas-test"
CANARY, OTHERS = "sglang-qwen-0", ("sglang-qwen-1", "sglang-qwen-2", "sglang-qwen-3")
# Figures for the lead to quote: the failed requests through the gateway while the canary failed
# its gate, and how the long requests of the change that passed ended.
FIGURES = pathlib.Path(__file__).resolve().parents[3] / "build" / "figures"
REPLICAS = {"sglang-qwen-0": (30001, "0,1"), "sglang-qwen-2": (30003, "2,3")}


@pytest.fixture(scope="module")
def load(host):
    figures = json.loads(host.file(TEST_DIR + "/load.json").content_string)
    window = json.loads(host.file(TEST_DIR + "/change.json").content_string)
    seconds = {int(second): tokens for second, tokens in figures["tokens_per_second"].items()}
    # Whole seconds inside the change; a second without tokens counts as 0.
    inside = [seconds.get(second, 0) for second in range(int(window["start"]) + 1, int(window["end"]))]
    print("constant load: %d requests sent, %d failed, change %.1f s, lowest %d tokens/s, median %d tokens/s"
          % (figures["sent"], figures["failed"], window["end"] - window["start"], min(inside),
             sorted(inside)[len(inside) // 2]))
    return figures, inside


def replica_states(lines):
    """name -> (MainPID, ActiveEnterTimestampMonotonic, sha256 of its environment file, unit and
    secrets file, then of their last good copies)."""
    return {line.split()[0]: tuple(line.split()[1:]) for line in lines}


@pytest.fixture(scope="module")
def canary_state(host):
    return json.loads(host.file(TEST_DIR + "/canary-state.json").content_string)


def test_the_change_that_failed_the_smoke_gate_lost_no_request_through_the_gateway(host):
    figures = json.loads(host.file(TEST_DIR + "/canary-load.json").content_string)
    line = ("canary failed its smoke gate under constant load through the gateway: %d requests sent, %d failed"
            % (figures["sent"], figures["failed"]))
    print(line)
    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / "replicas-canary.txt").write_text(line + "\n")
    assert figures["streams"] >= 4 and figures["sent"] > 4 * 5
    assert figures["failed"] == 0, figures["errors"]


def test_the_change_that_failed_the_smoke_gate_stopped_at_the_canary_named(host):
    message = host.file(TEST_DIR + "/canary.txt").content_string
    assert "Canary replica sglang-qwen-0 (sglang-qwen-0.service, GPUs 0)\ndid not pass the smoke gate:" in message
    assert "acceptance_length" in message
    assert "Rolled back to the last good configuration; the server answers again at http://127.0.0.1:30001" in message
    assert ("It was the canary: the change stopped there, and the other replicas (sglang-qwen-1, sglang-qwen-2,"
            " sglang-qwen-3) were left untouched on the configuration they serve" in message)
    assert "(docs/troubleshooting.md#canary-replica)" in message
    assert not any("Replica %s" % name in message for name in OTHERS)


def test_the_other_replicas_were_not_touched_by_the_change_that_failed_at_the_canary(canary_state):
    before, after = replica_states(canary_state["before"]), replica_states(canary_state["after"])
    # Same process since the same start, the same files, the same last good copy.
    for name in OTHERS:
        assert len(before[name]) == 8 and after[name] == before[name], name


def test_the_canary_is_back_on_its_last_good_configuration(canary_state):
    before, after = replica_states(canary_state["before"]), replica_states(canary_state["after"])
    pid, started, files, kept = after[CANARY][0], after[CANARY][1], after[CANARY][2:5], after[CANARY][5:]
    # Restarted (twice: with the change, then with its last good configuration) ...
    assert (pid, started) != before[CANARY][:2]
    # ... on the files it had before (the unit holds the draft length), which are its kept copies,
    # serving draft length 16 again.
    assert after[CANARY][2:] == before[CANARY][2:] and files == kept
    assert canary_state["canary_draft_length"] == 16


def test_the_change_that_passed_went_through_the_canarys_benchmark_first(host):
    rows = [line.split() for line in json.loads(host.file(TEST_DIR + "/canary-passed.json").content_string)]
    # name -> (start, when its last good unit was written, non-streaming prompt tokens since start)
    replicas = {name: (int(start), int(kept), float(non_streaming)) for name, start, kept, non_streaming in rows}
    canary_start, canary_kept, canary_benchmarked = replicas[CANARY]
    # Only the canary served non-streaming /generate requests (the benchmark's acceptance phase,
    # through its own port): the load streams through the gateway.
    assert canary_benchmarked > 0
    for name in OTHERS:
        start, _kept, non_streaming = replicas[name]
        assert non_streaming == 0, name
        # The canary restarted, passed and was kept as good before any other replica restarted.
        assert canary_start <= canary_kept <= start, (name, replicas)


def test_the_speculative_change_under_load_lost_no_request(load):
    figures, inside = load
    assert figures["streams"] >= 4 and figures["sent"] > 4 * 10
    assert figures["failed"] == 0, figures["errors"]
    # The host answered through the whole change: tokens came in every second of it.
    assert len(inside) >= 5 and min(inside) > 0


def test_a_long_request_outlived_the_gateways_drain_and_the_stop_of_its_replica(host, load):
    figures, _inside = load
    # Each replica's line "<name> <time> <host> <unit>: ... Shutting down: finishing N requests",
    # logged at its SIGTERM.
    held, stopped_at = {}, {}
    for record in json.loads(host.file(TEST_DIR + "/stopped.json").content_string):
        name, *fields = record.split()
        finishing = re.search(r"finishing (\d+) requests", record)
        held[name] = int(finishing.group(1)) if finishing else None
        stopped_at[name] = float(fields[0]) if finishing else None
    first = min(long["start"] for long in figures["long"])
    line = ("long requests through the gateway during the change: %s; the canary stopped %s s after the first "
            "one started; requests each replica still answered when stopped: %s"
            % (", ".join("%.0f s" % (long["end"] - long["start"]) for long in figures["long"]),
               "%.0f" % (stopped_at[CANARY] - first) if stopped_at.get(CANARY) else "?", held))
    print(line)
    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / "replicas-long-requests.txt").write_text(line + "\n")
    assert [long["failure"] for long in figures["long"]] == [None] * 4
    # The canary was drained first, while it streamed its long request: the gateway had dropped
    # it at least 5 s before systemd stopped it, and the request still ended whole through it.
    assert sorted(held) == [CANARY, *OTHERS] and held[CANARY] >= 1


def test_the_replica_on_the_faulty_gpu_was_rolled_back_alone_and_named(host):
    message = host.file(TEST_DIR + "/rollback.txt").content_string
    assert "Replica sglang-qwen-2 (sglang-qwen-2.service, GPUs 2)" in message
    assert "uncorrectable ECC error encountered" in message
    assert "Rolled back to the last good configuration; the server answers again at http://127.0.0.1:30003" in message
    assert not any(name in message for name in ("Replica sglang-qwen-0", "Replica sglang-qwen-1", "Replica sglang-qwen-3"))


def test_the_smoke_gate_names_a_replica_missing_from_the_gateways_pool(host):
    message = host.file(TEST_DIR + "/unrouted.txt").content_string
    assert "Not healthy in the gateway's pool (http://127.0.0.1:30000/workers): sglang-qwen-2." in message
    # The lab's gateway routes round robin (inventories/lab): the replica's own request counter
    # did not move either, and both checks name it.
    assert "Took no request through the gateway (round_robin) during the host's benchmark: sglang-qwen-2." in message
    assert message.count("(docs/troubleshooting.md#smoke-gate)") == 1, message


def test_two_replicas_of_two_gpus_each_behind_the_gateway(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/sglang_service.fact").content_string)
    assert [(r["name"], r["port"], r["gpus"]) for r in fact["replicas"]] == [
        ("sglang-qwen-0", 30001, ["0", "1"]), ("sglang-qwen-2", 30003, ["2", "3"])]
    assert fact["gateway"] == {"url": "http://127.0.0.1:30000", "unit": "sglang-qwen-gateway.service",
                               "metrics_url": "http://127.0.0.1:29000/metrics", "policy": "round_robin",
                               "control_plane_key_file": CONTROL_PLANE_KEY_FILE}
    assert fact["url"] == "http://127.0.0.1:30000" and fact["draft_length"] == 16
    for name, (port, gpus) in REPLICAS.items():
        assert host.service(name).is_running and host.service(name).is_enabled
        # SGLang finishes what it holds on SIGTERM for as long as systemd lets it: the scenario's
        # sglang_service_drain_timeout (120) plus 30 s, as for the gateway.
        assert host.check_output("systemctl show -p TimeoutStopUSec --value %s", name) == "2min 30s"
        environment = host.check_output("systemctl show -p Environment --value %s", name)
        assert "CUDA_VISIBLE_DEVICES=%s" % gpus in environment.split()
        argv = host.check_output("tr '\\0' ' ' </proc/$(systemctl show -p MainPID --value %s)/cmdline", name).split()
        flags = dict(zip(argv, argv[1:]))
        assert flags["--tp-size"] == "2" and flags["--port"] == str(port) and flags["--host"] == "127.0.0.1"
        assert host.socket("tcp://127.0.0.1:%d" % port).is_listening
    for retired in ("sglang-qwen-1", "sglang-qwen-3", "sglang-qwen"):
        assert host.check_output("systemctl show -p LoadState --value %s.service", retired) == "not-found"
    workers = json.loads(host.check_output("curl -sf -H 'Authorization: Bearer %s' http://127.0.0.1:30000/workers",
                                           control_plane_key(host)))["workers"]
    assert sorted((w["url"], w["is_healthy"]) for w in workers) == [
        ("http://127.0.0.1:30001", True), ("http://127.0.0.1:30003", True)]


def test_the_gateway_is_the_only_public_server(host):
    assert host.service("sglang-qwen-gateway").is_running
    assert host.check_output("systemctl show -p TimeoutStopUSec --value sglang-qwen-gateway") == "2min 30s"
    assert host.socket("tcp://127.0.0.1:30000").is_listening
    assert host.socket("tcp://127.0.0.1:29000").is_listening
    assert not host.socket("tcp://0.0.0.0:29000").is_listening
    assert "smg_" in host.check_output("curl -sf http://127.0.0.1:29000/metrics")


def test_requests_through_the_gateway_reached_every_replica(host):
    # The replicas' own counters (the doubles' /metrics), not the client's view.
    for name, (port, _gpus) in REPLICAS.items():
        metrics = host.check_output("curl -sf http://127.0.0.1:%s/metrics", str(port))
        total = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                    if line.startswith("sglang:num_requests_total"))
        assert total > 0, name


def test_the_gateway_unit_is_sandboxed(host):
    show = host.check_output("systemctl show -p User,NoNewPrivileges,ProtectSystem,MemoryDenyWriteExecute,PrivateDevices"
                             " sglang-qwen-gateway.service")
    assert set(show.splitlines()) >= {"User=sglang", "NoNewPrivileges=yes", "ProtectSystem=strict",
                                      "MemoryDenyWriteExecute=yes", "PrivateDevices=yes"}


def test_only_the_control_plane_key_opens_the_gateways_workers(host):
    assert_only_the_control_plane_key_opens_the_workers(host)


def test_the_control_plane_key_is_roots_alone_and_no_word_of_the_gateway(host):
    key_file = host.file(CONTROL_PLANE_KEY_FILE)
    assert (key_file.user, key_file.group, key_file.mode) == ("root", "root", 0o600)
    key = control_plane_key(host)
    assert len(key) >= 32
    assert host.run("runuser -u sglang -- cat %s", CONTROL_PLANE_KEY_FILE).rc != 0
    show = host.check_output("systemctl show -p Environment,ExecStart,StandardInput sglang-qwen-gateway.service")
    assert key not in show and key not in host.file("/etc/systemd/system/sglang-qwen-gateway.service").content_string
    assert "StandardInput=file" in show.splitlines()
    pid = host.check_output("systemctl show -p MainPID --value sglang-qwen-gateway.service")
    assert key not in host.check_output("tr '\\0' ' ' </proc/%s/cmdline", pid)
    # Read once at start: the gateway keeps no descriptor of the file. (As the service account: the
    # container's root lacks CAP_SYS_PTRACE, which reading another user's descriptors takes.)
    assert host.check_output("runuser -u sglang -- readlink /proc/%s/fd/0", pid) == "/dev/null"


def test_the_gateway_exchanges_packets_only_with_the_allowed_peers(host):
    def prefixes(name):
        # systemd lists each property's prefixes in either order.
        return sorted(host.check_output("systemctl show -p %s --value sglang-qwen-gateway.service", name).split())

    # Everything denied but loopback (the lab's sglang_service_ip_address_allow), as systemd folds them.
    assert prefixes("IPAddressDeny") == ["0.0.0.0/0", "::/0"]
    assert prefixes("IPAddressAllow") == ["127.0.0.0/8", "::1/128"]


@pytest.mark.parametrize("unit, ceiling", [("sglang-qwen-gateway", 1.4), ("sglang-qwen-0", 1.7)])
def test_the_units_are_no_more_exposed_than_before(host, unit, ceiling):
    last = host.check_output("systemd-analyze security --no-pager %s.service", unit).splitlines()[-1]
    exposure = float(last.split("level for %s.service: " % unit)[1].split()[0])
    print("%s: %s" % (unit, last))
    assert exposure <= ceiling

"""After converge on the seed's 590.48.01, a refused 595.99.99 pin and the rolling upgrade to the
default driver (620.70.10, no driver variable set): both hosts on 620.70.10, pinned and loaded, serving, gated by smoke; the hosts left service one
after the other; the requests streaming through the first host's URL were never cut off."""
import datetime
import json
import os
import pathlib
import re

import pytest
import testinfra

testinfra_hosts = ["pro6000-driver-upgrade-a", "pro6000-driver-upgrade-b"]

LOGS = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
# The role's default (roles/nvidia_driver/defaults/main.yml): R620, the long-term branch.
VERSION = "620.70.10"
# From 595 on NVIDIA's ubuntu2404 packages carry "-1ubuntu1" (NVIDIA/gpu-driver-container #899;
# 615.71.09-1ubuntu1 in dsx-ai-factory/infra-controller #6149).
PACKAGE_VERSION = VERSION + "-1ubuntu1"
# The lab's headless set (nvidia_driver_package_set: compute) on the ubuntu2404 layout.
DRIVER_PACKAGES = ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils", "nvidia-persistenced"]


def read_log(name):
    """A run's output with whitespace runs made single spaces (the callback folds long messages)."""
    return " ".join((LOGS / name).read_text().split())


def recap(log):
    tail = log.split("PLAY RECAP", 1)[1]
    return dict((name, dict((key, int(value)) for key, value in re.findall(r"(\w+)=(\d+)", counts)))
                for name, counts in re.findall(r"(pro6000-\S+) : ((?:\w+=\d+ ?)+)", tail))


def read_fact(host, name):
    return json.loads(host.file("/etc/ansible/facts.d/%s.fact" % name).content_string)


def service_units(host):
    record = read_fact(host, "sglang_service")
    replicas = record.get("replicas") or [record]
    gateway = record.get("gateway") or {}
    return [replica["unit"] for replica in replicas] + ([gateway["unit"]] if gateway.get("unit") else [])


def unit_events(host, unit):
    """(time, "start"|"stop") of every start and stop systemd finished for the unit; a restart
    job's first half (the stop of a running unit) is logged with JOB_TYPE=restart."""
    out = host.check_output("journalctl -o json --no-pager UNIT=%s" % unit)
    events = []
    for line in out.splitlines():
        entry = json.loads(line)
        if entry.get("JOB_TYPE") in ("start", "stop", "restart") and entry.get("JOB_RESULT") == "done":
            kind = "start" if entry["JOB_TYPE"] == "start" else "stop"
            events.append((int(entry["__REALTIME_TIMESTAMP"]) / 1e6, kind))
    return sorted(events)


# systemd's catalogue id of "Stopping <unit>...", logged when a stop job begins: for the gateway,
# the moment it stops taking requests and its shutdown grace period starts (systemd's
# src/systemd/sd-messages.h, SD_MESSAGE_UNIT_STOPPING).
UNIT_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"


def stopping_times(host, unit):
    out = host.check_output("journalctl -o json --no-pager UNIT=%s MESSAGE_ID=%s" % (unit, UNIT_STOPPING))
    return sorted(int(json.loads(line)["__REALTIME_TIMESTAMP"]) / 1e6 for line in out.splitlines())


def clock(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-4]


def other_host(name):
    return testinfra.get_host("ansible://" + name, ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"])


@pytest.fixture(name="events", scope="module")
def fixture_events():
    hosts = {name: other_host(name) for name in testinfra_hosts}
    return {name: {unit: unit_events(host, unit) for unit in service_units(host)} for name, host in hosts.items()}


def test_converge_warned_that_590_gets_no_more_releases():
    log = read_log("converge.log")
    assert 'nvidia_driver_branch "590" is a new-feature branch past its updates' in log
    assert "the production branch is 595" in log
    assert all(counts["failed"] == 0 for counts in recap(log).values())


def test_the_unsatisfiable_pin_stopped_the_first_host_naming_the_package():
    log = read_log("refused.log")
    assert 'nvidia_driver_version "595.99.99" is not in' in log
    assert "no package nvidia-driver-pinning-595.99.99" in log
    # site_serial=1 and no failure allowed: the second host never started.
    counts = recap(log)
    assert list(counts) == ["pro6000-driver-upgrade-a"]
    assert counts["pro6000-driver-upgrade-a"]["failed"] == 1
    # Before any change: no task of the refused run changed the host.
    assert counts["pro6000-driver-upgrade-a"]["changed"] == 0


def test_apt_changed_the_pin_only_in_converge_and_upgrade(host):
    history = host.file("/var/log/apt/history.log").content_string
    pins = re.findall(r"^Commandline: .*?(nvidia-driver-pinning-[0-9.]+)", history, re.M)
    assert pins == ["nvidia-driver-pinning-590.48.01", "nvidia-driver-pinning-590.48.01",
                    "nvidia-driver-pinning-" + VERSION]


def test_driver_is_the_default_installed_pinned_and_loaded(host):
    for package in DRIVER_PACKAGES:
        assert host.package(package).version == PACKAGE_VERSION
    assert host.package("nvidia-driver-pinning-" + VERSION).is_installed
    assert not host.package("nvidia-driver-pinning-590.48.01").is_installed
    assert "Candidate: " + PACKAGE_VERSION in host.check_output("apt-cache policy nvidia-dkms-open")
    fact = read_fact(host, "nvidia_driver")
    assert fact["installed_version"] == fact["loaded_version"] == VERSION
    assert fact["pinning_package"] == "nvidia-driver-pinning-" + VERSION
    assert fact["reboot_decision"] == "reboot"
    print("%s: packages %s, pinning package %s, installed %s, loaded %s, reboot decision %s" % (
        host.backend.host, PACKAGE_VERSION, fact["pinning_package"], fact["installed_version"],
        fact["loaded_version"], fact["reboot_decision"]))
    # One line per GPU: prepare simulates two.
    assert set(host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()) == {VERSION}


def test_every_replica_serves_again(host):
    units = service_units(host)
    # Two replicas (one per simulated GPU) and the gateway.
    assert len(units) == 3
    for unit in units:
        assert host.service(unit).is_running
    url = read_fact(host, "sglang_service")["url"]
    assert host.run("curl -sf -o /dev/null %s/health", url).rc == 0


def test_upgrade_passed_the_smoke_gate_on_both_hosts():
    log = read_log("upgrade.log")
    counts = recap(log)
    assert sorted(counts) == testinfra_hosts
    assert all(host_counts["failed"] == 0 for host_counts in counts.values())
    # Measured again on each host (its servers restarted on the new driver), not taken as standing.
    assert log.count("TASK [pro6000.inference.smoke : Run the smoke benchmark of the host and gate on its floors]") == 2


def test_the_second_host_served_while_the_first_upgraded(events):
    for unit, unit_a in events["pro6000-driver-upgrade-a"].items():
        unit_b = events["pro6000-driver-upgrade-b"][unit]
        # Each host: started by converge, stopped and started once by the upgrade; the refused pin
        # touched neither.
        assert [event[1] for event in unit_a] == ["start", "stop", "start"]
        assert [event[1] for event in unit_b] == ["start", "stop", "start"]
        a_stop, a_back = unit_a[1][0], unit_a[2][0]
        b_first, b_stop = unit_b[0][0], unit_b[1][0]
        print("%s: a stopped %s, back %s; b started %s, stopped %s, back %s (UTC)" % (
            unit, clock(a_stop), clock(a_back), clock(b_first), clock(b_stop), clock(unit_b[2][0])))
        assert b_first < a_stop < a_back < b_stop


def test_requests_in_flight_when_the_first_host_left_service_finished():
    host = other_host("pro6000-driver-upgrade-a")
    gateway = read_fact(host, "sglang_service")["gateway"]["unit"]
    # The upgrade's stop of the gateway: the only one (converge started it, nothing else stopped it).
    [drain] = stopping_times(host, gateway)
    records = [json.loads(line) for line in host.file("/var/log/inflight.jsonl").content_string.splitlines()]
    outcomes = [r["outcome"] for r in records]
    in_flight = [r for r in records if r["start"] < drain < r["end"]]
    first_refused = outcomes.index("refused")
    # smg keeps its listener open for a settle window after SIGTERM while it reports not ready
    # ("Keeping listener open during load-balancer propagation window settle_secs=5" in its log),
    # so requests begun in that window are in flight too.
    settling = [r for r in records[:first_refused] if r["start"] > drain]
    print("streamed %d requests: %d complete, %d refused, %d cut; %d in flight when %s began stopping, "
          "%d more accepted while it settled" % (len(records), outcomes.count("complete"), outcomes.count("refused"),
                                                 outcomes.count("cut"), len(in_flight), gateway, len(settling)))
    assert "cut" not in outcomes
    # The client streams back to back: a request was running when the gateway began to stop, and
    # it ran to its end, as did every one the gateway accepted after that.
    assert len(in_flight) == 1
    assert all(r["outcome"] == "complete" and r["finish_reason"] in ("stop", "length")
               for r in in_flight + settling)
    # The host served until it left service, refused requests while out of it, and served again
    # after its upgrade.
    assert all(r["outcome"] == "complete" for r in records if r["start"] < drain)
    assert records[first_refused]["start"] > drain
    assert records[-1]["outcome"] == "complete"

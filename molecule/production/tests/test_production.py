"""The production inventory as a site runs it, with a separate monitoring host: what the site
sees from there (every target up, a failed smoke gate and a stopped replica paged through
Alertmanager's webhook), the smoke gate of production's default gateway policy, and no listener
beyond the README's "What listens where"."""
import calendar
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
import testinfra
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "shared" / "verify"))
from prometheus_api import all_targets_up  # noqa: E402

PROJECT = pathlib.Path(__file__).resolve().parents[3]
GPU_NAME, MON_NAME = "pro6000-production-gpu", "pro6000-production-mon"
# The GPU host by container name: its ansible_host is its network address (inventory/doubles.yml),
# which testinfra's Ansible backend would take for the container's name.
GPU = testinfra.get_host("docker://" + GPU_NAME)
testinfra_hosts = ["ansible://" + MON_NAME]
REPLICAS = ["sglang-qwen-0", "sglang-qwen-1"]
STOPPED = REPLICAS[1]
WEBHOOK_RECORD = "/var/log/webhook-receiver/received.jsonl"
# Rule `for` 10 s, scrape and evaluation every 5 s (doubles.yml), Alertmanager's group_wait 30 s
# (roles/monitoring/templates/alertmanager.yml.j2): about 50 s; twice that under load.
ALERT_TIMEOUT = 120


def read_fact(host, name):
    return json.loads(host.file("/etc/ansible/facts.d/%s.fact" % name).content_string)


def received(host):
    """Every POST the webhook receiver double recorded, oldest first."""
    content = host.run("cat %s", WEBHOOK_RECORD).stdout
    return [json.loads(line) for line in content.splitlines() if line.strip()]


def paged(host, alertname, since, timeout, labels):
    """The first firing alert named ``alertname`` with ``labels`` that started after ``since``
    (epoch seconds) and reached the webhook within ``timeout`` seconds; None if none did."""
    end = time.time() + timeout
    while True:
        for entry in received(host):
            assert "error" not in entry, entry
            for alert in entry["payload"]["alerts"]:
                started = alert["startsAt"]
                # Go's RFC 3339 with nanoseconds: seconds are enough here.
                started_s = calendar.timegm(time.strptime(started[:19], "%Y-%m-%dT%H:%M:%S"))
                if (alert["labels"].get("alertname") == alertname and alert["status"] == "firing"
                        and started_s >= since - 1 and all(alert["labels"].get(k) == v for k, v in labels.items())):
                    return dict(alert, received_at=entry["received_at"], receiver=entry["payload"]["receiver"])
        if time.time() > end:
            return None
        time.sleep(2)


def test_every_target_is_up_from_the_monitoring_host(host):
    # The GPU host's exporters, both replicas and the gateway, scraped across the network.
    assert all_targets_up(host, 60) == [("dcgm", GPU_NAME, "", "up"), ("node", GPU_NAME, "", "up")] + [
        ("sglang", GPU_NAME, name, "up") for name in REPLICAS] + [("smg", GPU_NAME, "", "up")]


def test_alerts_go_to_the_webhook_the_production_inventory_asks_for(host):
    # The shipped inventory has the monitoring group (doubles.yml only adds this host to it) and
    # leaves the receiver to the site, which role monitoring requires (webhook or none).
    shipped = yaml.safe_load((PROJECT / "inventories/production/hosts.yml").read_text())
    assert "pro6000_monitoring" in shipped
    receiver = yaml.safe_load(host.file("/etc/prometheus/alertmanager.yml").content_string)["receivers"]
    assert receiver == [{"name": "pro6000", "webhook_configs": [{"url": "http://127.0.0.1:8086/alerts"}]}]


@pytest.fixture(scope="module")
def converged_smoke():
    """The smoke record converge left, read before the failed gate below replaces it."""
    return read_fact(GPU, "smoke")


def test_the_gateway_passed_the_smoke_gate_of_productions_default_policy(converged_smoke):
    defaults = yaml.safe_load((PROJECT / "roles/sglang_service/defaults/main.yml").read_text())
    production = yaml.safe_load((PROJECT / "inventories/production/group_vars/pro6000/main.yml").read_text())
    assert "sglang_service_gateway_policy" not in production
    policy = defaults["sglang_service_gateway_policy"]
    assert read_fact(GPU, "sglang_service")["gateway"]["policy"] == policy
    smoke = converged_smoke
    print("\n".join(smoke["report"]))
    assert smoke["measured"]["served"]["gateway"]["policy"] == policy
    # Every replica took requests through the gateway during the host's benchmark (the report's
    # last column), which the gate now requires under this policy too.
    taken = dict((line.split()[0], line.split()[-1]) for line in smoke["report"] if line.split()[0] in REPLICAS)
    assert sorted(taken) == REPLICAS and all(count.isdigit() and int(count) > 0 for count in taken.values()), taken
    assert all(gate["passed"] is not False for gate in smoke["result"]["gates"])


def test_production_serves_dflash_16_on_the_release_from_the_index(converged_smoke):
    # Issue 38 item 1: the release production pins, installed from the (double of the) package
    # index, serving DFLASH at draft length 16 on every replica, as the smoke probe found it.
    production = yaml.safe_load((PROJECT / "inventories/production/group_vars/pro6000/main.yml").read_text())
    build = read_fact(GPU, "sglang")
    assert (build["source"], build["version"]) == ("index", str(production["sglang_version"])), build
    assert "DDTREE" not in build["speculative_algorithms"]
    served = read_fact(GPU, "sglang_service")
    assert (served["algorithm"], served["wanted_algorithm"], served["fallback"]) == ("dflash", "dflash", False), served
    assert served["draft_length"] == 16
    gate = next(gate for gate in converged_smoke["result"]["gates"] if gate["name"] == "speculation_active")
    assert gate["value"] == "DFLASH" and gate["passed"], gate


def test_replicas_and_gateway_may_finish_a_drain_of_productions_length():
    # SGLang and smg finish what they hold on SIGTERM for as long as systemd lets them: the
    # role's sglang_service_drain_timeout, which production leaves at its default, plus 30 s.
    defaults = yaml.safe_load((PROJECT / "roles/sglang_service/defaults/main.yml").read_text())
    production = yaml.safe_load((PROJECT / "inventories/production/group_vars/pro6000/main.yml").read_text())
    assert "sglang_service_drain_timeout" not in production
    seconds = defaults["sglang_service_drain_timeout"] + 30
    expected = "%dmin %ds" % divmod(seconds, 60) if seconds % 60 else "%dmin" % (seconds // 60)
    for unit in REPLICAS + ["sglang-qwen-gateway"]:
        assert GPU.check_output("systemctl show -p TimeoutStopUSec --value %s", unit) == expected, unit


def listeners(host):
    """(protocol, address, port, process) of every listening TCP and UDP socket; the process where
    ss sees it (not through the units' /proc protections)."""
    found = []
    for line in host.check_output("ss -ltunpH").splitlines():
        fields = line.split()
        address, _sep, port = fields[4].rpartition(":")
        process = re.search(r'\(\("([^"]+)",', line)
        found.append((fields[0], address.strip("[]"), int(port), process.group(1) if process else ""))
    return found


# The README's "What listens where", for this inventory (two GPUs): the ports each host may have;
# the table gives the replicas' first port and "...", one port further for each GPU.
# Each with the unit that owns it.
GPU_PORTS = {30000: "sglang-qwen-gateway", 29000: "sglang-qwen-gateway", 30001: "sglang-qwen-0",
             9100: "prometheus-node-exporter", 9400: "nvidia-dcgm-exporter"}
MORE_REPLICA_PORTS = {30002: "sglang-qwen-1"}
MON_PORTS = {9090: "prometheus", 9093: "prometheus-alertmanager"}
# The README's "test hosts only" row: the doubles of molecule/shared and the webhook receiver.
DOUBLE_PORTS = {8081, 8082, 8083, 8084, 8085, 8086}
LOOPBACK = ("127.0.0.1", "::1")
# Docker's resolver on a network of its own (the containers' /etc/resolv.conf): its sockets in the
# container's namespace belong to no process of the container.
DOCKER_DNS = "127.0.0.11"


@pytest.mark.parametrize("name, ports, more", [(GPU_NAME, GPU_PORTS, MORE_REPLICA_PORTS), (MON_NAME, MON_PORTS, {})])
def test_no_listener_beyond_the_readme_table(name, ports, more):
    readme = (PROJECT / "README.md").read_text().split("**What listens where.**", 1)[1].split("\n\n", 2)[1]
    for port in ports:
        assert str(port) in readme, "port %d is not in the README's table" % port
    host = testinfra.get_host("docker://" + name)
    found = listeners(host)
    print("\n".join(map(str, found)))
    unknown = [entry for entry in found if entry[2] not in ports and entry[2] not in more
               and not (entry[2] in DOUBLE_PORTS and entry[1] in LOOPBACK) and not (entry[1] == DOCKER_DNS and not entry[3])]
    assert unknown == []
    # Beyond loopback only with an allow-list (the project's rule): the owning unit denies every
    # address but those it allows, and allows no network of everyone.
    owners = {**ports, **more}
    for protocol, address, port, process in found:
        if address not in LOOPBACK and port in owners:
            allowed = host.check_output("systemctl show -p IPAddressAllow --value %s", owners[port]).split()
            denied = host.check_output("systemctl show -p IPAddressDeny --value %s", owners[port]).split()
            assert allowed and "0.0.0.0/0" in denied and "::/0" in denied and not {"0.0.0.0/0", "::/0"} & set(allowed), (
                protocol, address, port, owners[port], allowed, denied)


@pytest.fixture(scope="module")
def incidents(converged_smoke):
    """A smoke gate failed on purpose (a decode floor no double reaches), then a replica stopped:
    when each happened, and the failed run's output. After converged_smoke, whatever the order of
    the tests: the failed gate replaces the record it reads."""
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    smoke_failed_at = time.time()
    run = subprocess.run(["ansible-playbook", "-i", inventory, "playbooks/smoke.yml", "-e", "smoke_min_decode_tps=1000000"],
                         cwd=PROJECT, capture_output=True, text=True, timeout=900, check=False)
    stopped_at = time.time()
    GPU.check_output("systemctl stop %s", STOPPED)
    return {"smoke_failed_at": smoke_failed_at, "smoke": run, "stopped_at": stopped_at}


def test_a_failed_smoke_gate_reaches_the_webhook_as_smoke_gate_failed(host, incidents):
    run = incidents["smoke"]
    output = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0 and "decode_tps" in output and "1000000" in output, output[-3000:]
    alert = paged(host, "SmokeGateFailed", incidents["smoke_failed_at"], ALERT_TIMEOUT, {"host": GPU_NAME})
    assert alert, "no SmokeGateFailed for %s reached the webhook within %d s; received: %s" % (
        GPU_NAME, ALERT_TIMEOUT, [a["labels"] for e in received(host) for a in e["payload"]["alerts"]])
    print("SmokeGateFailed received at %s, %.0f s after the failed run started" % (
        alert["received_at"], time.time() - incidents["smoke_failed_at"]))


def test_a_stopped_replica_reaches_the_webhook_as_replica_down(host, incidents):
    alert = paged(host, "SGLangReplicaDown", incidents["stopped_at"], ALERT_TIMEOUT,
                  {"host": GPU_NAME, "replica": STOPPED})
    assert alert, "no SGLangReplicaDown for %s started after its stop reached the webhook within %d s; received: %s" % (
        STOPPED, ALERT_TIMEOUT, [(a["labels"], a["startsAt"]) for e in received(host) for a in e["payload"]["alerts"]])
    assert alert["receiver"] == "pro6000"
    print("SGLangReplicaDown received at %s, %.0f s after the stop" % (alert["received_at"], time.time() - incidents["stopped_at"]))

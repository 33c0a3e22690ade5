"""The lab's monitoring seen through Prometheus's HTTP API, as an operator sees it."""
import json
import re
import time
import urllib.parse

import pytest

PROMETHEUS = "http://127.0.0.1:9090"
# The scenario's intervals (molecule.yml): scrape and evaluation every 2 s, for: 10 s / 6 s.
INTERVAL_S = 2
FOR_SUSTAINED_S = 10
FOR_SHORT_S = 6
MODEL = "Qwen3.6-27B"
RULE_FILES = ["/etc/prometheus/rules/pro6000-recording.yml", "/etc/prometheus/rules/pro6000-alerts.yml"]
DASHBOARD = "/etc/grafana/provisioning/dashboards/pro6000/pro6000-dashboard.json"


def api(host, path, **params):
    url = PROMETHEUS + path + ("?" + urllib.parse.urlencode(params) if params else "")
    answer = json.loads(host.check_output("curl -sf %s", url))
    assert answer["status"] == "success", answer
    return answer["data"]


def query(host, expr):
    return api(host, "/api/v1/query", query=expr)["result"]


def firing(host, name):
    return [a for a in api(host, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name and a["state"] == "firing"]


def load(host, url, seconds, concurrency=4):
    """Traffic in the background for `seconds` (the container's load generator)."""
    host.check_output("systemd-run --unit pro6000-load-%s --collect python3 /usr/local/bin/pro6000-load %s %s "
                      "--concurrency %s --seconds %s", str(int(time.time() * 1000)), url, MODEL, str(concurrency),
                      str(seconds))


def wait(predicate, timeout, step=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def test_every_exporter_replica_and_the_gateway_is_an_up_target(host):
    def targets():
        active = api(host, "/api/v1/targets")["activeTargets"]
        return active if active and all(t["health"] == "up" for t in active) else None
    active = wait(targets, 30)
    assert active, api(host, "/api/v1/targets")["activeTargets"]
    seen = sorted((t["labels"]["job"], t["labels"]["host"], t["labels"].get("replica", "")) for t in active)
    assert seen == [("dcgm", "pro6000-monitoring", ""), ("node", "pro6000-monitoring", ""),
                    ("sglang", "pro6000-monitoring", "replica-0"), ("sglang", "pro6000-monitoring", "replica-1"),
                    ("smg", "pro6000-monitoring", "")]


def test_exporters_listen_on_loopback_and_admit_the_scrapers_only(host):
    for port in (9100, 9400, 9090, 9093):
        assert host.socket("tcp://127.0.0.1:%d" % port).is_listening
        assert not host.socket("tcp://0.0.0.0:%d" % port).is_listening
    for unit in ("prometheus-node-exporter", "nvidia-dcgm-exporter"):
        # systemd lists the two prefixes in either order.
        assert sorted(host.check_output("systemctl show -p IPAddressDeny --value %s", unit).split()) == [
            "0.0.0.0/0", "::/0"]
        # localhost and the scrapers (127.0.0.1), as systemd folds them.
        assert host.check_output("systemctl show -p IPAddressAllow --value %s", unit) == "::1/128 127.0.0.0/8"


def test_dcgm_and_its_exporter_are_the_pinned_pair(host):
    # The repository offers DCGM 4.6.0 too: the pin keeps the release the exporter pairs with.
    assert host.package("datacenter-gpu-manager-4-core").version == "1:4.5.3-1"
    assert host.package("datacenter-gpu-manager-4-cuda13").version == "1:4.5.3-1"
    assert host.package("datacenter-gpu-manager-exporter").version == "4.8.2-1"
    assert host.check_output("apt-cache policy datacenter-gpu-manager-4-core | sed -n 's/ *Candidate: //p'") == "1:4.5.3-1"


def test_the_smoke_result_and_the_weights_mount_are_metrics(host):
    bench = json.loads(host.file("/var/lib/pro6000/smoke/bench.json").content_string)
    gates = {g["name"]: g for g in bench["gates"]}
    # host="..." leaves out what the package's own first configuration scraped before the role's.
    acceptance = query(host, 'pro6000_smoke_acceptance_length{host!=""}')
    assert [float(s["value"][1]) for s in acceptance] == [pytest.approx(gates["acceptance_length"]["value"])]
    assert float(query(host, 'pro6000_smoke_acceptance_length_floor{host!=""}')[0]["value"][1]) == 8
    info = query(host, 'pro6000_smoke_weights_directory_info{host!=""}')
    assert [(s["metric"]["path"], s["metric"]["mountpoint"]) for s in info] == [("/srv/models", "/")]


def rule_metric_names(host):
    names = set()
    for path in RULE_FILES:
        text = host.file(path).content_string
        for expr in re.findall(r"expr: >-\n((?:\s{10}.*\n)+)|expr: (.*)", text):
            for name in re.findall(r"(?<![\w:])((?:sglang:|smg_|DCGM_FI_|node_|pro6000_smoke_)[A-Za-z0-9_:]+)", "".join(expr)):
                names.add(name)
    return names


def test_every_metric_a_rule_reads_is_served(host):
    load(host, "http://127.0.0.1:8000", 8)
    names = rule_metric_names(host)
    assert len(names) >= 20
    missing = wait(lambda: sorted(n for n in names if not query(host, "count(%s)" % n)) or None, 20)
    # wait() returns the last value: an empty list (falsy) means every name has series.
    assert not missing, missing


def test_every_dashboard_query_returns_series_and_no_alert_fires_on_the_healthy_lab(host):
    dashboard = json.loads(host.file(DASHBOARD).content_string)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 25
    load(host, "http://127.0.0.1:8000", 25)
    time.sleep(12)
    empty = []
    for expr in exprs:
        expr = expr.replace("$host", ".*").replace("$__rate_interval", "20s")
        if not query(host, expr):
            empty.append(expr)
    assert not empty
    assert [a["labels"] for a in api(host, "/api/v1/alerts")["alerts"]] == []


def test_a_lowered_acceptance_fires_the_alert_in_time(host):
    # Replica 30000 (replica-0) now commits 3 tokens per verify step, below the floor of 8.
    host.check_output("echo 3 > /run/sglang-double/accept-30000")
    try:
        changed = time.monotonic()
        load(host, "http://127.0.0.1:30000", 40)
        load(host, "http://127.0.0.1:30001", 40)
        low = wait(lambda: query(host, 'sglang:spec_accept_length{replica="replica-0"} < 8'), 15, step=0.25)
        assert low, "Prometheus never saw the lowered acceptance"
        seen = time.monotonic()
        alerts = wait(lambda: firing(host, "SpeculativeAcceptanceBelowFloor"), FOR_SUSTAINED_S + 4 * INTERVAL_S,
                      step=0.25)
        fired = time.monotonic()
        assert [a["labels"]["replica"] for a in alerts] == ["replica-0"]
        # 3 per step, less where a request's last step has fewer tokens left.
        assert 2.5 < float(alerts[0]["value"]) <= 3.0
        print("acceptance lowered -> seen by Prometheus %.1f s -> firing %.1f s later (for: %d s, interval %d s)"
              % (seen - changed, fired - seen, FOR_SUSTAINED_S, INTERVAL_S))
        assert fired - seen <= FOR_SUSTAINED_S + 2 * INTERVAL_S
        # Prometheus hands it to Alertmanager, whose receiver would notify.
        assert wait(lambda: [a for a in json.loads(host.check_output("curl -sf http://127.0.0.1:9093/api/v2/alerts"))
                             if a["labels"]["alertname"] == "SpeculativeAcceptanceBelowFloor"], 15)
    finally:
        host.check_output("rm -f /run/sglang-double/accept-30000")


def test_a_stopped_replica_fires_replica_down_and_unhealthy_in_the_gateway(host):
    host.check_output("systemctl stop sglang-qwen@30001")
    try:
        stopped = time.monotonic()
        down = wait(lambda: firing(host, "SGLangReplicaDown"), FOR_SHORT_S + 4 * INTERVAL_S, step=0.25)
        fired = time.monotonic()
        assert [a["labels"]["replica"] for a in down] == ["replica-1"]
        print("replica stopped -> SGLangReplicaDown firing %.1f s later (for: %d s, interval %d s)"
              % (fired - stopped, FOR_SHORT_S, INTERVAL_S))
        assert fired - stopped <= FOR_SHORT_S + 2 * INTERVAL_S + INTERVAL_S
        unhealthy = wait(lambda: firing(host, "SGLangReplicaUnhealthyInGateway"), FOR_SHORT_S + 4 * INTERVAL_S)
        assert [a["labels"]["worker"] for a in unhealthy] == ["http://127.0.0.1:30001"]
    finally:
        host.check_output("systemctl start sglang-qwen@30001")

"""The lab host watches itself (group pro6000_monitoring in inventories/lab/hosts.yml): its
Prometheus scrapes the exporters, every replica and the gateway that the site deployed, and the
shipped dashboard's queries all have series to show."""
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "shared" / "verify"))
from prometheus_api import all_targets_up, empty_dashboard_queries  # noqa: E402

LOAD = pathlib.Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "monitoring" / "load.py"
# inventories/lab/group_vars/pro6000_monitoring.yml scrapes every 5 s; Grafana's $__rate_interval
# is at least four scrape intervals.
RATE_INTERVAL = "20s"


def test_every_exporter_replica_and_the_gateway_is_an_up_target(host):
    # Replicas are labelled with their names (the record's), here sglang-qwen-0 to -3.
    assert all_targets_up(host, 30) == [("dcgm", "pro6000-lab", "", "up"), ("node", "pro6000-lab", "", "up")] + [
        ("sglang", "pro6000-lab", "sglang-qwen-%d" % index, "up") for index in range(4)] + [
        ("smg", "pro6000-lab", "", "up")]


def test_every_dashboard_query_returns_series_under_traffic(host):
    served = json.loads(host.file("/etc/ansible/facts.d/sglang_service.fact").content_string)
    # The model id clients send, as role sglang_service records it (the target's short name).
    model = served["served_model_name"]
    # The load generator runs inside the container (the gateway listens on its loopback only),
    # through the gateway for longer than a rate window.
    with LOAD.open() as script:
        load = subprocess.run(["docker", "exec", "-i", "pro6000-lab", "python3", "-", "http://127.0.0.1:30000", model,
                               "--concurrency", "4", "--seconds", "30", "--max-tokens", "64"],
                              stdin=script, capture_output=True, text=True, check=True, timeout=120)
    counts = json.loads(load.stdout)
    assert counts["ok"] > 0 and counts["failed"] == 0, counts
    assert empty_dashboard_queries(host, RATE_INTERVAL) == []

"""The monitoring roles' decisions: listen address, smoke textfile, scrape jobs."""
import json
import pathlib
import subprocess

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring as monitoring

REPO = pathlib.Path(__file__).resolve().parents[4]
PROMTOOL = REPO / ".cache" / "prometheus" / "usr" / "bin" / "promtool"

BENCH = {
    "schema": 1, "started_at": "2026-12-01T10:00:00+00:00", "finished_at": "2026-12-01T10:00:30+00:00",
    "parameters": {"concurrency": 4},
    "gates": [
        {"name": "phases_completed", "value": 5, "floor": 5, "passed": True},
        {"name": "decode_tps_c1", "value": 392.1, "floor": 250, "passed": True},
        {"name": "output_tps_c4", "value": 1500.5, "floor": 800, "passed": True},
        {"name": "acceptance_length", "value": 11.0, "floor": 8, "passed": True},
    ],
    # 8 requests of 1 + 8 x 11 tokens: acceptance_length leaves the prefill's token out, the
    # counters' ratio does not (89 / 8).
    "acceptance": {"value": 11.0, "completion_tokens": 712, "prefill_tokens": 8, "spec_verify_ct": 64},
}


@pytest.mark.parametrize("scrapers, address", [
    (["127.0.0.1"], "127.0.0.1"), (["localhost", "::1", "127.0.0.0/8"], "127.0.0.1"),
    (["127.0.0.1", "10.0.0.5"], "0.0.0.0"), (["10.0.0.0/24"], "0.0.0.0"),
])
def test_exporters_bind_loopback_only_for_loopback_scrapers(scrapers, address):
    assert monitoring.metrics_listen_address(scrapers) == address


@pytest.mark.parametrize("scrapers", [[], ["monitoring.example"], ["127.0.0.1", "monitoring.example"]])
def test_scrapers_must_be_addresses(scrapers):
    with pytest.raises(monitoring.MonitoringError):
        monitoring.metrics_listen_address(scrapers)


@pytest.mark.parametrize("address, loopback", [
    ("localhost", True), ("127.0.0.1", True), ("127.0.0.2", True), ("127.0.0.0/8", True), ("::1", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("10.0.0.0/24", False), ("gpu-01.example", False),
])
def test_one_answer_to_what_stays_on_this_host(address, loopback):
    # metrics_listen_address (the exporters, the gateway's metrics, the replicas) and
    # monitoring_exposure (Prometheus, Alertmanager) both ask it.
    assert monitoring.is_loopback(address) is loopback
    assert monitoring.monitoring_exposure(address, [])["loopback"] is loopback


def test_the_smoke_textfile_carries_figures_and_floors():
    text = monitoring.smoke_textfile(BENCH, {"path": "/srv/models", "mountpoint": "/srv"})
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if not line.startswith("#")}
    assert samples == {
        "pro6000_smoke_passed": 1.0, "pro6000_smoke_concurrency": 4.0,
        "pro6000_smoke_decode_tps": 392.1, "pro6000_smoke_decode_tps_floor": 250.0,
        "pro6000_smoke_output_tps": 1500.5, "pro6000_smoke_output_tps_floor": 800.0,
        "pro6000_smoke_acceptance_length": 11.0, "pro6000_smoke_acceptance_length_floor": 8.0,
        "pro6000_smoke_tokens_per_verify": 11.125,
        "pro6000_smoke_timestamp_seconds": 1796119230.0,
        'pro6000_smoke_weights_directory_info{mountpoint="/srv",path="/srv/models"}': 1.0,
    }
    # The format node exporter's textfile collector reads (promtool parses it the same way).
    run = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert "error" not in run.stdout.lower() + run.stderr.lower()


def test_a_failed_gate_and_an_unset_floor():
    bench = json.loads(json.dumps(BENCH))
    bench["gates"][1].update(passed=False)
    bench["gates"][3].update(floor=None, passed=True)
    text = monitoring.smoke_textfile(bench)
    assert "pro6000_smoke_passed 0.0" in text
    assert "pro6000_smoke_acceptance_length 11.0" in text and "acceptance_length_floor" not in text


@pytest.mark.parametrize("acceptance", [
    None, {"value": None, "completion_tokens": 0, "spec_verify_ct": 0},
    {"completion_tokens": 712, "spec_verify_ct": 0}, {"completion_tokens": 712, "spec_verify_ct": True}])
def test_no_verify_steps_no_baseline(acceptance):
    # Not speculating, or no answer carried spec_verify_ct: no baseline, so no acceptance alert.
    bench = dict(BENCH, acceptance=acceptance)
    assert "tokens_per_verify" not in monitoring.smoke_textfile(bench)


def test_no_result_and_no_mount_writes_nothing():
    assert monitoring.smoke_textfile({}) == ""
    with pytest.raises(monitoring.MonitoringError):
        monitoring.smoke_textfile({"levels": []})


SERVICE = {
    "url": "http://127.0.0.1:8000",
    "gateway": {"url": "http://127.0.0.1:8000", "unit": "smg.service", "metrics_url": "http://127.0.0.1:29000/metrics"},
    "replicas": [
        {"name": "sglang-qwen-0", "metrics_url": "http://127.0.0.1:30000/metrics"},
        {"name": "sglang-qwen-1", "metrics_url": "http://127.0.0.1:30001/metrics"},
    ],
}


def test_scrape_jobs_from_the_records():
    jobs = monitoring.prometheus_scrape_configs([
        {"host": "gpu1", "address": "10.0.0.11", "exporters": {"node": {"port": 9100}, "dcgm": {"port": 9400}},
         "service": SERVICE},
        {"host": "gpu2", "address": "10.0.0.12", "exporters": {"node": {"port": 9100}, "dcgm": None}, "service": {}},
    ])
    by_name = {job["job_name"]: job for job in jobs}
    assert [job["job_name"] for job in jobs] == ["node", "dcgm", "sglang", "smg"]
    assert by_name["node"]["static_configs"] == [
        {"targets": ["10.0.0.11:9100"], "labels": {"host": "gpu1"}},
        {"targets": ["10.0.0.12:9100"], "labels": {"host": "gpu2"}}]
    assert by_name["dcgm"]["static_configs"] == [{"targets": ["10.0.0.11:9400"], "labels": {"host": "gpu1"}}]
    assert by_name["sglang"]["static_configs"] == [
        {"targets": ["10.0.0.11:30000"], "labels": {"host": "gpu1", "replica": "sglang-qwen-0"}},
        {"targets": ["10.0.0.11:30001"], "labels": {"host": "gpu1", "replica": "sglang-qwen-1"}}]
    assert by_name["smg"]["static_configs"] == [{"targets": ["10.0.0.11:29000"], "labels": {"host": "gpu1"}}]
    assert by_name["smg"]["metrics_path"] == "/metrics"


def test_a_record_from_before_replicas_is_one_replica():
    jobs = monitoring.prometheus_scrape_configs([{"host": "h", "address": "::1", "service": {"url": "http://127.0.0.1:30000"}}])
    assert jobs == [{"job_name": "sglang", "scheme": "http", "metrics_path": "/metrics",
                     "static_configs": [{"targets": ["[::1]:30000"], "labels": {"host": "h", "replica": "0"}}]}]


def test_replicas_without_metrics_are_not_scraped():
    service = dict(SERVICE, gateway=None, replicas=[dict(SERVICE["replicas"][0], metrics_url=None)])
    assert monitoring.prometheus_scrape_configs([{"host": "h", "address": "10.0.0.1", "service": service}]) == []


def test_a_host_listed_twice_is_refused():
    with pytest.raises(monitoring.MonitoringError):
        monitoring.prometheus_scrape_configs([{"host": "h"}, {"host": "h"}])


def test_the_filter_passes_the_weights_mount_on():
    from ansible_collections.pro6000.inference.plugins.filter.smoke_textfile import FilterModule
    text = FilterModule().filters()["smoke_textfile"]({}, {"path": "/srv/models", "mountpoint": "/"})
    assert 'pro6000_smoke_weights_directory_info{mountpoint="/",path="/srv/models"} 1.0' in text


# ---- exposure of Prometheus and Alertmanager (issue #36, finding 6) -------------------------------

def test_beyond_loopback_the_allow_list_holds_localhost_the_listen_address_the_scraped_hosts_and_the_clients():
    found = monitoring.monitoring_exposure("10.0.0.2", ["127.0.0.1", "10.0.0.11", "10.0.0.11"],
                                           "http://10.0.9.9:9000/hook", ["192.0.2.0/24"])
    assert found == {"loopback": False, "local_address": "10.0.0.2", "names": [],
                     "allow": ["localhost", "10.0.0.2", "127.0.0.1", "10.0.0.11", "10.0.9.9", "192.0.2.0/24"]}


@pytest.mark.parametrize("listen, loopback, local", [
    ("127.0.0.1", True, "127.0.0.1"), ("localhost", True, "localhost"), ("::1", True, "::1"),
    ("0.0.0.0", False, "127.0.0.1"), ("::", False, "::1"), ("10.0.0.2", False, "10.0.0.2")])
def test_a_wildcard_is_reached_on_loopback_and_never_counts_as_loopback(listen, loopback, local):
    found = monitoring.monitoring_exposure(listen, [])
    assert (found["loopback"], found["local_address"]) == (loopback, local)
    assert listen not in found["allow"][1:] or not loopback


def test_names_among_the_scraped_hosts_and_the_webhook_are_reported():
    found = monitoring.monitoring_exposure("0.0.0.0", ["gpu-01.example", "10.0.0.11", "localhost"],
                                           "https://chat.example/hook")
    assert found["names"] == ["chat.example", "gpu-01.example"]
    assert found["allow"] == ["localhost", "10.0.0.11"]


def test_the_web_configuration_is_a_bcrypt_hash_that_checks_and_is_the_same_on_every_run():
    from Crypto.Protocol.KDF import bcrypt_check
    first = monitoring.web_config({"pro6000": "s3cret"}, "monitor-01")
    assert first == monitoring.web_config({"pro6000": "s3cret"}, "monitor-01")
    hashed = first["basic_auth_users"]["pro6000"]
    assert hashed.startswith("$2a$10$") and "s3cret" not in hashed
    bcrypt_check(b"s3cret", hashed)
    with pytest.raises(ValueError):
        bcrypt_check(b"s3cret!", hashed)
    # Another site, another salt.
    assert monitoring.web_config({"pro6000": "s3cret"}, "monitor-02") != first


@pytest.mark.parametrize("password", ["", "x" * 73, "a\0b"])
def test_a_password_bcrypt_cannot_take_is_refused(password):
    with pytest.raises(monitoring.MonitoringError, match="1 to 72 bytes"):
        monitoring.web_config({"pro6000": password}, "monitor-01")

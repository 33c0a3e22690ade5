"""Roles monitoring and metrics_exporters refuse listen addresses, ports, durations and ARGS words
that would rewrite their services' command lines (issue 36, finding 4: a retention of
"30d --web.enable-admin-api --web.enable-lifecycle" turned on Prometheus's admin API; a quote
closed the quoted ARGS of a defaults file), and monitoring refuses to expose Prometheus and
Alertmanager beyond loopback without a password or with peers systemd's IPAddressAllow= cannot
hold (finding 6), before anything changes and naming the variable: their
first check (tasks/state.yml, module host_state, whose rules fail before it reads anything), run
by real ansible-playbook on localhost in check mode, one playbook run for every case."""
import pytest
from support import run_cases

# (case, role, role variables, None when accepted, else what the failure message must contain)
CASES = [
    ("monitoring accepted", "monitoring", {}, None),
    ("retention with flags", "monitoring", {"monitoring_retention": "30d --web.enable-admin-api --web.enable-lifecycle"},
     'monitoring_retention = "30d --web.enable-admin-api --web.enable-lifecycle": must be a Prometheus duration'),
    ("scrape interval", "monitoring", {"monitoring_scrape_interval": "15s\n  - job_name: x"},
     "monitoring_scrape_interval = \"15s\\n  - job_name: x\": must be a Prometheus duration"),
    ("listen address closing ARGS", "monitoring", {"monitoring_listen_address": '127.0.0.1" --web.enable-admin-api "'},
     "monitoring_listen_address = \"127.0.0.1\\\" --web.enable-admin-api \\\"\": every word must be free of"),
    ("Prometheus port -1", "monitoring", {"monitoring_prometheus_port": -1},
     "monitoring_prometheus_port = -1: must be a TCP port, 1 to 65535"),
    ("Alertmanager port 99999", "monitoring", {"monitoring_alertmanager_port": 99999},
     "monitoring_alertmanager_port = 99999: must be a TCP port"),
    ("one port for both", "monitoring", {"monitoring_alertmanager_port": 9090},
     "monitoring_prometheus_port, monitoring_alertmanager_port = [9090, 9090]: give each its own port"),
    ("wildcard without a password", "monitoring", {"monitoring_listen_address": "0.0.0.0"}, "monitoring_web_password"),
    ("an address without a password", "monitoring", {"monitoring_listen_address": "10.0.0.2"},
     "beyond loopback: give them a password"),
    ("wildcard with a password", "monitoring", {"monitoring_listen_address": "0.0.0.0", "monitoring_web_password": "pw"},
     None),
    ("a password bcrypt cannot take", "monitoring", {"monitoring_web_password": "x" * 73}, "takes at most 72 bytes"),
    ("a webhook by name beyond loopback", "monitoring",
     {"monitoring_listen_address": "0.0.0.0", "monitoring_web_password": "pw",
      "monitoring_alertmanager_webhook_url": "https://chat.example/hook", "monitoring_alerts_receiver": "webhook"},
     "monitoring_scrape_address, monitoring_alertmanager_webhook_url = [\"chat.example\"]"),
    ("a webhook by name on loopback", "monitoring",
     {"monitoring_alertmanager_webhook_url": "https://chat.example/hook", "monitoring_alerts_receiver": "webhook"}, None),
    # Issue 37, item 1: alerts that go nowhere only when a site says so.
    ("neither a webhook nor receiver none", "monitoring", {"monitoring_alerts_receiver": "webhook"},
     "monitoring_alerts_receiver, monitoring_alertmanager_webhook_url = [\"webhook\", \"\"]: give the webhook"),
    ("receiver none beside a webhook", "monitoring",
     {"monitoring_alerts_receiver": "none", "monitoring_alertmanager_webhook_url": "http://10.0.0.9/hook"},
     "monitoring_alerts_receiver: none sends no alert to the webhook given"),
    ("exporters accepted", "metrics_exporters", {}, None),
    ("node exporter port 99999", "metrics_exporters", {"metrics_exporters_node_exporter_port": 99999},
     "metrics_exporters_node_exporter_port = 99999: must be a TCP port"),
    ("DCGM exporter port -1", "metrics_exporters", {"metrics_exporters_dcgm_exporter_port": -1},
     "metrics_exporters_dcgm_exporter_port = -1: must be a TCP port"),
    ("extra argument closing ARGS", "metrics_exporters",
     {"metrics_exporters_node_exporter_extra_args": ['--web.config.file=" --collector.disable-defaults "']},
     "metrics_exporters_node_exporter_extra_args = [\"--web.config.file=\\\" --collector.disable-defaults \\\"\"]: "
     "every word must be free of whitespace, quotes"),
    ("textfile directory with a space", "metrics_exporters", {"metrics_exporters_textfile_dir": "/var/lib/x --web.x"},
     'metrics_exporters_textfile_dir = "/var/lib/x --web.x": every word must be free of'),
]

# Each variable of the cases, else its role default.
DEFAULTS = {
    "monitoring_retention": "30d", "monitoring_scrape_interval": "15s", "monitoring_listen_address": "127.0.0.1",
    "monitoring_prometheus_port": 9090, "monitoring_alertmanager_port": 9093,
    "monitoring_web_password": "", "monitoring_alertmanager_webhook_url": "",
    # Cases without a webhook keep their alerts in Alertmanager: each is refused for its own reason only.
    "monitoring_alerts_receiver": "none",
    "metrics_exporters_node_exporter_port": 9100, "metrics_exporters_dcgm_exporter_port": 9400,
    "metrics_exporters_node_exporter_extra_args": [], "metrics_exporters_textfile_dir": "/var/lib/prometheus/node-exporter",
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("monitoring-preflight"),
                     [(name, role, variables) for name, role, variables, _expected in CASES], DEFAULTS, tasks_from="state")


@pytest.mark.parametrize("name, expected", [(name, expected) for name, _role, _vars, expected in CASES])
def test_the_first_check_accepts_or_names_the_variable_and_why(outcomes, name, expected):
    if expected is None:
        assert outcomes[name] is None
    else:
        assert outcomes[name] and expected in outcomes[name]["msg"], outcomes[name]

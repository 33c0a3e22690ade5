"""The host label of DCGM metrics is the one the pinned dcgm-exporter prints: its 4.6.x-4.8.x
releases name it `hostname`, the earlier ones `Hostname` (shared/reference/nvidia-590-cuda-13.1.md,
"Re-read on 2026-12-05"). The exporter double, the alert tests' input series and the rules and
dashboard follow the pinned release (roles/metrics_exporters/defaults/main.yml)."""
import json
import pathlib
import re

import yaml
from support import load_module

REPO = pathlib.Path(__file__).resolve().parents[3]
PINNED = yaml.safe_load((REPO / "roles" / "metrics_exporters" / "defaults" / "main.yml").read_text())[
    "metrics_exporters_dcgm_exporter_version"]
DOUBLE = REPO / "tests" / "fixtures" / "nvidia_repo" / "dcgm"


def host_label(exporter_version):
    major_minor = tuple(int(part) for part in exporter_version.split(".")[:2])
    return "hostname" if (4, 6) <= major_minor <= (4, 8) else "Hostname"


def labels_of(exposition):
    return {name for line in exposition.splitlines() if not line.startswith("#")
            for name in re.findall(r'[{,]([A-Za-z_]+)="', line)}


def test_the_exporter_double_labels_the_host_as_the_pinned_release_does(tmp_path, monkeypatch):
    state = tmp_path / "state"
    (state / "sys" / "module" / "nvidia").mkdir(parents=True)
    (state / "sys" / "module" / "nvidia" / "version").write_text("620.70.10\n")
    (state / "hardware.json").write_text(json.dumps({"gpus": [
        {"uuid": "GPU-a", "pci_bus_id": "00000000:01:00.0", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}]}))
    monkeypatch.setenv("NVIDIA_TEST_DOUBLE_STATE", str(state))
    script = tmp_path / "dcgm_exporter.py"
    script.write_text((DOUBLE / "dcgm-exporter").read_text().replace("@VERSION@", PINNED))
    exporter = load_module("dcgm_exporter", script)
    monkeypatch.setattr(exporter, "VALUES", str(DOUBLE / "dcgm-values.json"))
    labels = labels_of(exporter.render(exporter.read_counters(DOUBLE / "default-counters.csv")).decode())
    assert host_label(PINNED) in labels
    assert ({"hostname", "Hostname"} - {host_label(PINNED)}).isdisjoint(labels)
    assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION"} <= labels


def test_the_alert_tests_feed_the_pinned_label():
    text = (REPO / "tests" / "unit" / "monitoring" / "alerts.test.yml").read_text()
    stale = {"hostname", "Hostname"} - {host_label(PINNED)}
    assert [label for label in stale if re.search(r'\b%s(=|:)' % label, text)] == []
    assert host_label(PINNED) + '="h1"' in text


def test_rules_and_dashboard_name_no_label_of_another_release():
    stale = ({"hostname", "Hostname"} - {host_label(PINNED)}).pop()
    sources = [REPO / "roles" / "monitoring" / "files" / "pro6000-dashboard.json"]
    sources += sorted((REPO / "roles" / "monitoring" / "templates").glob("pro6000-*.yml.j2"))
    # A label in an expression or a legend: by (X), {X=...}, {{X}}; comments may name both.
    used = re.compile(r'(by|without|on|ignoring) \([^)]*\b%s\b|[{,]\s*%s\s*[=!]|\{\{\s*\$?labels\.%s|\{\{%s\}\}'
                      % ((stale,) * 4))
    offenders = [str(path.relative_to(REPO)) for path in sources
                 if any(used.search(line) for line in path.read_text().splitlines()
                        if not line.lstrip().startswith("#"))]
    assert offenders == []

"""monitoring_scrape_hosts: the inference hosts role monitoring scrapes, from the play's hostvars."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.monitoring_scrape_hosts import (
    FilterModule, monitoring_scrape_hosts)

REPO = pathlib.Path(__file__).resolve().parents[4]
EXPORTERS = {"node": {"port": 9100}, "dcgm": {"port": 9400}}
SERVICE = {"url": "http://127.0.0.1:8000", "replicas": [{"name": "0", "metrics_url": "http://127.0.0.1:30000/metrics"}]}


def test_address_and_records_with_their_fallbacks():
    hostvars = {
        "gpu1": {"monitoring_scrape_address": "10.0.0.11", "ansible_host": "gpu1.example",
                 "ansible_facts": {"ansible_local": {"metrics_exporters": EXPORTERS, "sglang_service": SERVICE}}},
        "gpu2": {"ansible_host": "10.0.0.12", "ansible_facts": {"ansible_local": {"metrics_exporters": EXPORTERS}}},
        "gpu3": {},
    }
    assert monitoring_scrape_hosts(["gpu1", "gpu2", "gpu3"], hostvars) == [
        {"host": "gpu1", "address": "10.0.0.11", "exporters": EXPORTERS, "service": SERVICE},
        {"host": "gpu2", "address": "10.0.0.12", "exporters": EXPORTERS, "service": {}},
        {"host": "gpu3", "address": "gpu3", "exporters": {}, "service": {}},
    ]
    assert monitoring_scrape_hosts([], hostvars) == []
    assert FilterModule().filters() == {"monitoring_scrape_hosts": monitoring_scrape_hosts}


def test_a_host_outside_the_inventory_is_named():
    with pytest.raises(AnsibleFilterError, match="gpu9"):
        monitoring_scrape_hosts(["gpu9"], {})


# The Jinja program role monitoring's vars/main.yml held before this filter, kept here as the
# truth the filter must match on a real inventory and real hostvars.
JINJA = """
  {%- set ns = namespace(hosts=[]) -%}
  {%- for host in groups['pro6000'] -%}
  {%-   set recorded = hostvars[host]['ansible_facts']['ansible_local'] | default({}) -%}
  {%-   set address = hostvars[host]['monitoring_scrape_address'] | default(hostvars[host]['ansible_host'] | default(host)) -%}
  {%-   set ns.hosts = ns.hosts + [{'host': host, 'address': address, 'exporters': recorded['metrics_exporters'] | default({}),
                                   'service': recorded['sglang_service'] | default({})}] -%}
  {%- endfor -%}
  {{ ns.hosts }}"""


def test_the_same_hosts_as_the_jinja_it_replaces_on_real_hostvars(tmp_path):
    inventory = {"pro6000": {"hosts": {
        "gpu1": {"monitoring_scrape_address": "10.0.0.11", "ansible_host": "gpu1.example"},
        "gpu2": {"ansible_host": "10.0.0.12"},
        "gpu3": {}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    # Local facts as roles metrics_exporters and sglang_service record them, on two hosts of three.
    for host, records in (("gpu1", {"metrics_exporters": EXPORTERS, "sglang_service": SERVICE}),
                          ("gpu2", {"metrics_exporters": EXPORTERS}), ("gpu3", {})):
        (tmp_path / host).mkdir()
        for name, record in records.items():
            (tmp_path / host / (name + ".fact")).write_text(json.dumps(record))
    play = [{"hosts": "pro6000", "gather_facts": False, "tasks": [
        {"ansible.builtin.setup": {"gather_subset": ["!all"], "fact_path": str(tmp_path / "{{ inventory_hostname }}")},
         "when": "inventory_hostname != 'gpu3'"},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "{{ item.key }}.json"), "content": "{{ item.value | to_json }}",
                                  "mode": "0644"},
         "delegate_to": "localhost", "run_once": True,
         "loop": "{{ {'jinja': __jinja, 'filter': groups['pro6000'] | pro6000.inference.monitoring_scrape_hosts(hostvars)}"
                 " | dict2items }}",
         "vars": {"__jinja": JINJA}},
    ]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))
    run = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory.yml",
                          "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, "play.yml"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    jinja = json.loads((tmp_path / "jinja.json").read_text())
    assert json.loads((tmp_path / "filter.json").read_text()) == jinja
    assert [(h["host"], h["address"], h["service"] != {}) for h in jinja] == [
        ("gpu1", "10.0.0.11", True), ("gpu2", "10.0.0.12", False), ("gpu3", "gpu3", False)]

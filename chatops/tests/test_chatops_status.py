"""A bare status frees each host once its own probe has answered, not when the slowest host's
probe gives up: the collection's playbooks/smoke.yml with the real sglang_probe, one host
served by the SGLang test double (conftest.py), one whose server does not answer."""
import threading
import time

import yaml

from pro6000_chatops import ChatOps, load_config

from chatops_support import ALL_ACTIONS, LOCAL_HOST_VARS, REPO_ROOT, write_config
from support import free_port


def test_status_frees_each_host_when_its_probe_is_done(tmp_path, double_url):
    served = {"smoke_url": double_url, "sglang_service_speculative_algorithm": "ddtree",
              "sglang_service_draft_length": 16, "sglang_service_ddtree_budget": 15}
    inventory = {"pro6000": {"hosts": {
        "pro6000-fast": {**LOCAL_HOST_VARS, **served},
        # Nobody listens there: its probe waits for /health until smoke_wait_timeout.
        "pro6000-down": {**LOCAL_HOST_VARS, "smoke_url": f"http://127.0.0.1:{free_port()}",
                         "smoke_wait_timeout": 90},
    }}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    ops = ChatOps(load_config(write_config(
        tmp_path, tmp_path / "hosts.yml", playbooks_dir=REPO_ROOT / "playbooks",
        environment={"ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / "collections")},
        groups={}, grants=[{"users": ["ci"], "actions": ALL_ACTIONS, "hosts": ["*"]}])))
    replies = []
    worker = threading.Thread(target=lambda: replies.append(ops.handle("ci", "status")))
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not ops.runs() or set(ops.runs()[0].hosts) != {"pro6000-down"}:
            assert worker.is_alive() and time.monotonic() < deadline, "pro6000-fast was not freed"
            time.sleep(0.1)
        # The fast host takes another request while the other one's probe still waits.
        probe = ops.handle("ci", "status pro6000-fast")
        assert probe.accepted and probe.summary.status == "successful", probe.text
        assert not ops.handle("ci", "status pro6000-down").accepted
    finally:
        ops.handle("ci", "cancel pro6000-down")
        worker.join(60)
    summary = replies[0].summary
    assert summary.status == "canceled"
    assert [probe.host for probe in summary.probes] == ["pro6000-fast"]

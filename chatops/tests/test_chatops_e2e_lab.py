"""End to end against the lab: real ansible-runner runs the collection's own playbooks/smoke.yml
on the lab container (inventories/lab) and the summary carries the smoke figures.

Needs the lab up (`make lab`: the container converged by site.yml, its SGLang server running)
and PRO6000_LAB=1; without that variable the tests are skipped, with it a lab that is not up
fails them.
"""
import pytest

from pro6000_chatops import ChatOps, load_config

from chatops_support import ALL_ACTIONS, LAB_ENVIRONMENT, LAB_INVENTORY, REPO_ROOT, lab_containers, write_config

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    hosts = sorted(lab_containers())
    folder = tmp_path_factory.mktemp("lab-chatops")
    config = load_config(write_config(
        folder, LAB_INVENTORY, playbooks_dir=REPO_ROOT / "playbooks", environment=LAB_ENVIRONMENT,
        groups={}, grants=[{"users": ["ci"], "actions": ALL_ACTIONS, "hosts": ["*"]}]))
    return ChatOps(config), hosts[0]


def test_e2e_lab(lab):
    ops, host = lab
    progress = []

    reply = ops.handle("ci", f"bench {host}", progress.append)

    summary = reply.summary
    assert reply.accepted and summary.status == "successful", reply.text
    assert [(h.host, h.status, h.changed) for h in summary.hosts] == [(host, "ok", 0)]
    (probe,) = summary.probes
    assert probe.version and probe.mismatches == ()
    (bench,) = summary.bench
    assert bench.passed is True
    assert bench.decode_tps_single_stream > 0 and bench.output_tps > 0 and bench.concurrency >= 1
    if probe.algorithm:
        assert bench.acceptance_length > 1
    assert "tok/s" in reply.text and "acceptance" in reply.text
    assert ("task", "task: Run the smoke benchmark of the host and gate on its floors") in [(p.kind, p.text) for p in progress]
    assert list(ops.config.runs_dir.iterdir()) == []


def test_e2e_lab_status_only_probes(lab):
    ops, host = lab
    reply = ops.handle("ci", "status")
    summary = reply.summary
    assert summary.status == "successful", reply.text
    assert [probe.host for probe in summary.probes] == [host]
    assert summary.bench == ()

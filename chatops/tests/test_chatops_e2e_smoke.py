"""The collection's own playbooks/smoke.yml, through real ansible-runner, on a local host whose
server is the SGLang test double on loopback: the real sglang_probe and sglang_bench results
reach the summary (the double: conftest.py's double_url). test_chatops_e2e_lab.py does the
same against the lab container.
"""
import pytest
import yaml

from pro6000_chatops import ChatOps, load_config

from chatops_support import ALL_ACTIONS, LOCAL_HOST_VARS, REPO_ROOT, write_config


@pytest.fixture(scope="module")
def ops(tmp_path_factory, double_url):
    # No sglang_service record on this host: role smoke takes the server and what it must serve
    # from its overrides.
    served = {"smoke_url": double_url, "smoke_speculative_algorithm": "ddtree",
              "smoke_draft_length": 16, "smoke_ddtree_budget": 15,
              "smoke_bench_concurrency": 2, "smoke_bench_max_tokens": 32, "smoke_bench_timeout": 60}
    inventory = {"pro6000": {"hosts": {
        "pro6000-fast": {**LOCAL_HOST_VARS, **served},
        # The same server judged against a floor it cannot reach.
        "pro6000-gated": {**LOCAL_HOST_VARS, **served, "smoke_min_acceptance_length": 40},
    }}}
    folder = tmp_path_factory.mktemp("smoke-chatops")
    (folder / "hosts.yml").write_text(yaml.safe_dump(inventory))
    config = load_config(write_config(
        folder, folder / "hosts.yml", playbooks_dir=REPO_ROOT / "playbooks",
        environment={"ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / "collections")},
        groups={}, grants=[{"users": ["ci"], "actions": ALL_ACTIONS, "hosts": ["*"]}]))
    return ChatOps(config)


def test_bench_returns_the_smoke_figures(ops):
    progress = []
    reply = ops.handle("ci", "bench pro6000-fast", progress.append)

    summary = reply.summary
    assert summary.status == "successful", reply.text
    assert [(h.host, h.status, h.changed) for h in summary.hosts] == [("pro6000-fast", "ok", 0)]
    (probe,) = summary.probes
    assert (probe.version, probe.algorithm, probe.draft_tokens, probe.ddtree_budget, probe.mismatches) == (
        "0.5.23", "DDTREE", 16, 15, ())
    (bench,) = summary.bench
    assert bench.passed is True and bench.failed_gates == ()
    assert bench.concurrency == 2 and bench.decode_tps_single_stream > 0 and bench.output_tps > 0
    # The double accepts 11 tokens per verify step under DDTree (its default), fewer at the end
    # of a request.
    assert 5 < bench.acceptance_length <= 11
    assert "bench passed: 1 stream" in reply.text and "acceptance" in reply.text
    assert ("task", "task: Run the smoke benchmark of the host and gate on its floors") in [(p.kind, p.text) for p in progress]


def test_status_probes_without_benchmarking(ops):
    summary = ops.handle("ci", "status pro6000-fast").summary
    assert summary.status == "successful"
    assert [probe.host for probe in summary.probes] == ["pro6000-fast"] and summary.bench == ()


def test_a_failed_gate_reaches_the_summary(ops):
    reply = ops.handle("ci", "bench pro6000-gated")
    summary = reply.summary
    assert summary.status == "failed"
    (bench,) = summary.bench
    assert bench.passed is False and bench.failed_gates == ("acceptance_length",)
    assert summary.failure.startswith("pro6000-gated: Run the smoke benchmark of the host and gate on its floors: failed")
    assert "bench FAILED" in reply.text and "failed gates: acceptance_length" in reply.text

"""tune_sweep: the DDTree budgets of playbooks/tune.yml that each build serves, from the facts
the module reads from the test double's profiles (their parser defaults and limits)."""
import sys
import pathlib

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.tune_sweep import FilterModule, tune_sweep

TESTS = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(TESTS / "oracle"))
import double  # noqa: E402

CONFIGS = yaml.safe_load((TESTS.parent / "playbooks" / "tune.yml").read_text())[0]["vars"]["tune_configs"]


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    root = tmp_path_factory.mktemp("double")
    return {profile: double.parser_fact(double.install(profile, root))
            for profile in ("ddtree-pr29907", "ddtree-pr29907-b32", "fork-ddtree-flag", "v0.5.23")}


def skipped(configs):
    return {config["name"]: config["skipped"] for config in configs if "skipped" in config}


def test_tune_yml_sweeps_a_budget_above_draft_length_minus_one():
    assert any(c["algorithm"] == "ddtree" and c["ddtree_budget"] > c["draft_length"] - 1 for c in CONFIGS)


def test_a_build_with_an_open_budget_runs_every_configuration(facts):
    assert tune_sweep(CONFIGS, facts["ddtree-pr29907"]) == CONFIGS


def test_the_fork_skips_budgets_other_than_draft_length_minus_one(facts):
    assert skipped(tune_sweep(CONFIGS, facts["fork-ddtree-flag"])) == {
        "ddtree-16-b31": "SGLang 0.5.23 serves DDTree budgets 15 for draft length 16, not 31"}


def test_budgets_beyond_the_builds_limits_are_skipped(facts):
    configs = CONFIGS + [{"name": "ddtree-16-b96", "algorithm": "ddtree", "draft_length": 16, "ddtree_budget": 96}]
    assert skipped(tune_sweep(configs, facts["ddtree-pr29907-b32"])) == {
        "ddtree-16-b96": "SGLang 0.5.23 serves DDTree budgets 1 to 64 for draft length 16, not 96"}


def test_a_release_compares_dflash_alone_and_says_why_ddtree_is_left_out(facts):
    # The double's v0.5.23, read as role sglang reads a build: no DDTREE among its algorithms.
    release = facts["v0.5.23"]
    assert "DDTREE" not in release["speculative_algorithms"] and not release["ddtree"]
    swept = tune_sweep(CONFIGS, release)
    ddtree = [config["name"] for config in CONFIGS if config["algorithm"] == "ddtree"]
    assert ddtree and sorted(skipped(swept)) == sorted(ddtree)
    for name in ddtree:
        assert skipped(swept)[name].startswith("SGLang 0.5.23 has no DDTree (it offers "), skipped(swept)[name]
        assert "DFLASH" in skipped(swept)[name]
    assert [config for config in swept if "skipped" not in config] == [
        config for config in CONFIGS if config["algorithm"] != "ddtree"]
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        tune_sweep("dflash-8", facts["v0.5.23"])
    assert FilterModule().filters() == {"tune_sweep": tune_sweep}

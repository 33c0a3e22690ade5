"""sglang_speculative_plan for every algorithm x build x failure, with facts read from the parser
objects of real releases (tests/fixtures/sglang_parser/) and of the test double's profiles."""
import json
import pathlib
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.sglang_speculative_plan import (
    FilterModule,
    sglang_speculative_plan,
)

TESTS = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(TESTS / "oracle"))
import double  # noqa: E402

REAL = ("0.5.9", "0.5.14", "0.5.19", "0.5.21", "0.5.23")
# Releases with DFLASH (upstream since 0.5.11) but no DDTree.
DFLASH_ONLY = REAL[1:] + ("v0.5.13", "v0.5.23")
DOUBLE = ("v0.5.13", "v0.5.23", "ddtree-pr29907", "fork-ddtree-flag")
# Builds that take extra_buffer_lazy with DFLASH (pull request 34763, 0.5.18 on) and those whose
# mamba validator refuses it, as the module reads them (the real ones checked by
# tests/integration/test_argv_real_parser.py).
LAZY_WITH_SPECULATION = ("0.5.19", "0.5.21", "0.5.23", "v0.5.23", "ddtree-pr29907", "fork-ddtree-flag")
LAZY_REFUSED = ("0.5.14", "v0.5.13")
DRAFTER = {"path": "/srv/models/Qwen3.6-27B-DFlash", "dflash": {"block_size": 16}}
LAZY = "extra_buffer_lazy"


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    root = tmp_path_factory.mktemp("double")
    found = {}
    for release in REAL:
        found[release] = json.loads((TESTS / "fixtures" / "sglang_parser" / ("sglang-%s.json" % release)).read_text())
    for profile in DOUBLE + ("ddtree-pr29907-b32", "ddtree-pr29907-early"):
        found[profile] = double.parser_fact(double.install(profile, root))
    return found


def sglang_argv(config, fact, drafter=None, target=None):
    return sglang_speculative_plan(config, fact, drafter, target)["argv"]


def wanted(**overrides):
    config = {"model_path": "/srv/models/Qwen3.6-27B", "draft_model_path": DRAFTER["path"],
              "host": "127.0.0.1", "port": 30000, "algorithm": "dflash", "gpu_count": 1,
              "compute_capability": "12.0"}
    config.update(overrides)
    return config


def pairs(argv):
    """{flag: value or True} of an argv (flags here take at most one value)."""
    found = {}
    for index, item in enumerate(argv):
        if item.startswith("--"):
            following = argv[index + 1] if index + 1 < len(argv) else None
            found[item] = following if following is not None and not following.startswith("--") else True
    return found


def assert_all_accepted(argv, fact):
    for flag, value in pairs(argv).items():
        assert flag in fact["options"], flag
        if flag in fact["choices"]:
            assert value in fact["choices"][flag], (flag, value)


@pytest.mark.parametrize("build", DFLASH_ONLY + DOUBLE[2:])
@pytest.mark.parametrize("draft_length", [8, 16])
def test_dflash_everywhere(facts, build, draft_length):
    argv = sglang_argv(wanted(draft_length=draft_length, draft_window=2 * draft_length,
                              attention_backend="flashinfer", mamba_strategy="extra_buffer",
                              allow_mamba_extra_buffer=True, enable_metrics=True, max_running_requests=8),
                       facts[build], drafter=DRAFTER)
    flags = pairs(argv)
    assert flags["--speculative-algorithm"] == "DFLASH"
    assert flags["--speculative-num-draft-tokens"] == str(draft_length)
    assert flags["--speculative-draft-window-size"] == str(2 * draft_length)
    assert "--speculative-dflash-draft-window-size" not in flags
    assert "--speculative-ddtree-budget" not in flags and "--page-size" not in flags
    mamba = "--mamba-scheduler-strategy" if build == "v0.5.13" else "--mamba-radix-cache-strategy"
    assert flags[mamba] == "extra_buffer"
    assert_all_accepted(argv, facts[build])


def test_dflash_full_line(facts):
    argv = sglang_argv(wanted(served_model_name="qwen", attention_backend="flashinfer",
                              mem_fraction_static=0.8, max_running_requests=8, context_length=32768,
                              enable_metrics=True, extra_args=["--cuda-graph-max-bs-decode", "8"]),
                       facts["0.5.23"], drafter=DRAFTER)
    assert argv == [
        "--model-path", "/srv/models/Qwen3.6-27B", "--served-model-name", "qwen",
        "--host", "127.0.0.1", "--port", "30000", "--tp-size", "1",
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DRAFTER["path"],
        "--speculative-num-draft-tokens", "16", "--attention-backend", "flashinfer",
        "--mamba-radix-cache-strategy", "extra_buffer_lazy", "--mem-fraction-static", "0.8", "--max-running-requests", "8", "--context-length", "32768",
        "--enable-metrics", "--cuda-graph-max-bs-decode", "8"]


def test_draft_length_defaults_to_the_drafters_block_size(facts):
    flags = pairs(sglang_argv(wanted(), facts["0.5.19"], drafter={"dflash": {"block_size": 8}}))
    assert flags["--speculative-num-draft-tokens"] == "8"
    # Without a drafter fact nor a draft length, SGLang reads the drafter config itself.
    assert "--speculative-num-draft-tokens" not in pairs(sglang_argv(wanted(), facts["0.5.19"]))


def test_ddtree_on_the_pull_request_build(facts):
    plan = sglang_speculative_plan(wanted(algorithm="ddtree", draft_length=16, draft_window=16),
                                   facts["ddtree-pr29907"], drafter=DRAFTER)
    flags = pairs(plan["argv"])
    assert plan["algorithm"] == "ddtree" and plan["fallback"] is False and plan["note"] is None
    assert flags["--speculative-algorithm"] == "DDTREE"
    assert flags["--speculative-num-draft-tokens"] == "16"
    assert flags["--speculative-ddtree-budget"] == "15"
    assert flags["--page-size"] == "1"
    assert "--speculative-dflash-enable-ddtree" not in flags
    assert_all_accepted(plan["argv"], facts["ddtree-pr29907"])


@pytest.mark.parametrize("draft_length, budget, served", [(8, None, 7), (8, 0, 7), (16, 60, 60), (1, None, 1)])
def test_ddtree_budget_follows_the_draft_length_or_the_variable(facts, draft_length, budget, served):
    plan = sglang_speculative_plan(wanted(algorithm="ddtree", draft_length=draft_length, ddtree_budget=budget),
                                   facts["ddtree-pr29907"], DRAFTER)
    assert pairs(plan["argv"])["--speculative-ddtree-budget"] == str(served)
    assert plan["ddtree_budget"] == served and plan["draft_length"] == draft_length


# Two builds whose parsers default differently: #29907 at its reviewed head has none (its worker
# derives draft length - 1), the double's b32 revision declares 32 with limits 1 to 64.
@pytest.mark.parametrize("build, default", [("ddtree-pr29907", 15), ("ddtree-pr29907-b32", 32)])
def test_the_ddtree_budget_defaults_to_the_builds_own(facts, build, default):
    assert facts[build]["ddtree_budget"]["default"] == (None if build == "ddtree-pr29907" else 32)
    for budget in (None, 0):
        plan = sglang_speculative_plan(wanted(algorithm="ddtree", draft_length=16, ddtree_budget=budget),
                                       facts[build], DRAFTER)
        assert plan["ddtree_budget"] == default
        assert pairs(plan["argv"])["--speculative-ddtree-budget"] == str(default)


def test_the_ddtree_budget_is_held_to_the_builds_limits(facts):
    fact = facts["ddtree-pr29907-b32"]
    assert fact["ddtree_budget"] == {"default": 32, "minimum": 1, "maximum": 64}
    assert sglang_speculative_plan(wanted(algorithm="ddtree", ddtree_budget=64), fact, DRAFTER)["ddtree_budget"] == 64
    with pytest.raises(AnsibleFilterError, match=r"ddtree_budget\) 65 lies outside what SGLang 0.5.23 accepts "
                                                 r"for --speculative-ddtree-budget \(1 to 64\)"):
        sglang_argv(wanted(algorithm="ddtree", ddtree_budget=65), fact, DRAFTER)
    # Without declared limits, the filter's own bound holds.
    assert sglang_speculative_plan(wanted(algorithm="ddtree", ddtree_budget=65), facts["ddtree-pr29907"],
                                   DRAFTER)["ddtree_budget"] == 65


# The budget equal to the default (both inventories set 15 for draft length 16) is what the fork
# verifies anyway: it must be served, not refused.
@pytest.mark.parametrize("draft_length, budget", [(16, None), (16, 0), (16, 15), (8, 7)])
def test_ddtree_on_the_fork(facts, draft_length, budget):
    plan = sglang_speculative_plan(wanted(algorithm="ddtree", draft_length=draft_length, ddtree_budget=budget),
                                   facts["fork-ddtree-flag"], DRAFTER)
    flags = pairs(plan["argv"])
    assert flags["--speculative-algorithm"] == "DFLASH"
    assert flags["--speculative-dflash-enable-ddtree"] is True
    assert flags["--page-size"] == "1"
    assert "--speculative-ddtree-budget" not in flags
    assert plan["algorithm"] == "ddtree" and plan["ddtree_budget"] == draft_length - 1
    assert_all_accepted(plan["argv"], facts["fork-ddtree-flag"])


def test_a_budget_the_fork_cannot_serve_is_refused_with_the_way_out(facts):
    with pytest.raises(AnsibleFilterError) as failure:
        sglang_argv(wanted(algorithm="ddtree", draft_length=16, ddtree_budget=20), facts["fork-ddtree-flag"], DRAFTER)
    assert ("offers DDTree through --speculative-dflash-enable-ddtree, which has no budget option: its node "
            "budget is the draft length - 1 (15); set sglang_service_ddtree_budget (ddtree_budget) to 0 or 15"
            in str(failure.value))


@pytest.mark.parametrize("build", DFLASH_ONLY)
def test_ddtree_without_ddtree_fails_with_the_way_out(facts, build):
    with pytest.raises(AnsibleFilterError) as failure:
        sglang_argv(wanted(algorithm="ddtree"), facts[build], DRAFTER)
    message = str(failure.value)
    assert "SGLang %s has no DDTree" % facts[build]["version"] in message
    assert "refs/pull/29907/head" in message
    assert "set sglang_service_ddtree_fallback_to_dflash (allow_ddtree_fallback) to serve DFLASH" in message
    assert "set sglang_service_speculative_algorithm (algorithm) to dflash" in message


# 0.5.9 has neither DDTree nor DFLASH: advising DFLASH or the fallback would send the operator
# to a second failure.
@pytest.mark.parametrize("fallback", [False, True])
def test_ddtree_on_a_release_without_dflash_names_what_helps(facts, fallback):
    with pytest.raises(AnsibleFilterError) as failure:
        sglang_argv(wanted(algorithm="ddtree", allow_ddtree_fallback=fallback), facts["0.5.9"], DRAFTER)
    message = str(failure.value)
    assert "SGLang 0.5.9 has neither DDTree nor DFLASH (offers: EAGLE, EAGLE3, NEXTN, NGRAM, STANDALONE)" in message
    assert "sglang_service_ddtree_fallback_to_dflash (allow_ddtree_fallback) cannot help on this build" in message
    assert "algorithm) to dflash" not in message and "refs/pull/29907/head" in message


def test_dflash_on_a_release_without_it(facts):
    with pytest.raises(AnsibleFilterError, match=r"SGLang 0.5.9 has no DFLASH .*set sglang_service_speculative_algorithm "
                                                 r"\(algorithm\) to none"):
        sglang_argv(wanted(algorithm="dflash"), facts["0.5.9"], DRAFTER)


@pytest.mark.parametrize("build", DFLASH_ONLY)
def test_ddtree_falls_back_to_dflash_when_allowed(facts, build):
    plan = sglang_speculative_plan(wanted(algorithm="ddtree", allow_ddtree_fallback=True,
                                          ddtree_budget=15, draft_length=16),
                                   facts[build], DRAFTER)
    flags = pairs(plan["argv"])
    assert plan["algorithm"] == "dflash" and plan["fallback"] is True
    assert "no DDTree" in plan["note"] and facts[build]["version"] in plan["note"]
    assert flags["--speculative-algorithm"] == "DFLASH"
    assert not {"--speculative-ddtree-budget", "--page-size"} & set(flags)
    assert_all_accepted(plan["argv"], facts[build])


@pytest.mark.parametrize("build", REAL + DOUBLE)
def test_no_speculation(facts, build):
    argv = sglang_argv(wanted(algorithm="none", draft_window=16, page_size=16), facts[build], DRAFTER)
    assert not [flag for flag in argv if flag.startswith("--speculative")]
    assert pairs(argv)["--page-size"] == "16"


def test_old_window_name_when_only_it_exists(facts):
    fact = dict(facts["v0.5.13"], options=sorted(
        set(facts["v0.5.13"]["options"]) - {"--speculative-draft-window-size"}
        | {"--speculative-dflash-draft-window-size"}))
    flags = pairs(sglang_argv(wanted(draft_window=32), fact, DRAFTER))
    assert flags["--speculative-dflash-draft-window-size"] == "32"
    without = dict(fact, options=[o for o in fact["options"] if "window" not in o])
    with pytest.raises(AnsibleFilterError, match="no draft window flag"):
        sglang_argv(wanted(draft_window=32), without, DRAFTER)


def test_block_size_alias_when_num_draft_tokens_is_missing(facts):
    fact = dict(facts["0.5.23"], options=[o for o in facts["0.5.23"]["options"]
                                          if o != "--speculative-num-draft-tokens"])
    assert pairs(sglang_argv(wanted(draft_length=16), fact, DRAFTER))["--speculative-dflash-block-size"] == "16"


def test_mamba_auto_needs_the_new_flag(facts):
    assert pairs(sglang_argv(wanted(mamba_strategy="auto", algorithm="none"), facts["0.5.23"], DRAFTER))[
        "--mamba-radix-cache-strategy"] == "auto"
    with pytest.raises(AnsibleFilterError, match="set mamba_strategy extra_buffer"):
        sglang_argv(wanted(mamba_strategy="auto"), facts["v0.5.13"], DRAFTER)
    with pytest.raises(AnsibleFilterError, match="is not accepted by SGLang 0.5.23"):
        sglang_argv(wanted(mamba_strategy="everything", algorithm="none"), facts["0.5.23"], DRAFTER)


@pytest.mark.parametrize("build", LAZY_WITH_SPECULATION)
def test_speculation_gets_extra_buffer_lazy_where_the_build_takes_it(facts, build):
    plan = sglang_speculative_plan(wanted(), facts[build], DRAFTER)
    assert pairs(plan["argv"])["--mamba-radix-cache-strategy"] == "extra_buffer_lazy"
    assert "--disable-radix-cache" not in plan["argv"]
    assert plan["mamba"]["strategy"] == "extra_buffer_lazy" and plan["mamba"]["radix_cache"] is True
    assert "issue 36537" in plan["mamba"]["why"] and "pull request 34763" in plan["mamba"]["why"]
    assert_all_accepted(plan["argv"], facts[build])


def double_starts(site, plan, argv=None):
    """The double's start-up rules at the profile laid out at `site` (its parser, then
    resolve_server_args, where SGLang's asserts end a start) on the plan's argv (or `argv`) and
    environment, as the unit starts it: the finished process."""
    code = ("import json, sys\n"
            "from sglang.srt.double_profiles import current_profile\n"
            "from sglang.srt.server_args import build_parser, resolve_server_args\n"
            "profile = current_profile()\n"
            "resolve_server_args(build_parser(profile).parse_args(json.loads(sys.argv[1])), profile,\n"
            "                    json.loads(sys.argv[2]))\n")
    return subprocess.run([sys.executable, "-c", code, json.dumps(argv or plan["argv"]), json.dumps(plan["environment"])],
                          capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "PYTHONWARNINGS": "ignore"}, check=False)


@pytest.fixture(name="hybrid_models")
def fixture_hybrid_models(tmp_path):
    """A hybrid (mamba-layer) target and its drafter, as the double reads them."""
    target, drafter = tmp_path / "Qwen3.6-27B", tmp_path / "Qwen3.6-27B-DFlash"
    target.mkdir()
    drafter.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"],
                                                    "model_type": "qwen3_5", "max_position_embeddings": 262144}))
    (drafter / "config.json").write_text(json.dumps({"block_size": 16, "dflash_config": {"block_size": 16}}))
    return {"model_path": str(target), "draft_model_path": str(drafter)}


# issue 38: extra_buffer_lazy needs the overlap scheduler, which DDTree turns off.
@pytest.mark.parametrize("build", ("ddtree-pr29907", "ddtree-pr29907-b32", "fork-ddtree-flag"))
def test_ddtree_serves_without_the_radix_cache_rather_than_lazy(facts, build, hybrid_models, tmp_path):
    site = double.install(build, tmp_path)
    plan = sglang_speculative_plan(wanted(algorithm="ddtree", **hybrid_models), facts[build], DRAFTER)
    flags = pairs(plan["argv"])
    assert plan["algorithm"] == "ddtree" and flags["--disable-radix-cache"] is True
    assert "--mamba-radix-cache-strategy" not in flags
    assert plan["mamba"] == {"strategy": None, "radix_cache": False, "why": plan["mamba"]["why"]}
    assert "DDTree turns the overlap scheduler off" in plan["mamba"]["why"]
    started = double_starts(site, plan)
    assert started.returncode == 0, started.stderr
    # What the plan rendered before: the double, like SGLang, asserts when it sizes the cache.
    lazy = [a for a in plan["argv"] if a != "--disable-radix-cache"] + ["--mamba-radix-cache-strategy", LAZY]
    refused = double_starts(site, plan, lazy)
    assert "AssertionError: Lazy extra buffer requires overlap schedule" in refused.stderr
    with pytest.raises(AnsibleFilterError, match="extra_buffer_lazy needs the overlap scheduler, and DDTree turns"):
        sglang_speculative_plan(wanted(algorithm="ddtree", mamba_strategy=LAZY), facts[build], DRAFTER)


def test_an_overlap_scheduler_turned_off_by_hand_keeps_lazy_out(facts, hybrid_models, tmp_path):
    site = double.install("v0.5.23", tmp_path)
    config = wanted(extra_args=["--disable-overlap-schedule"], **hybrid_models)
    plan = sglang_speculative_plan(config, facts["v0.5.23"], DRAFTER)
    assert pairs(plan["argv"])["--disable-radix-cache"] is True and "extra_args turn" in plan["mamba"]["why"]
    assert double_starts(site, plan).returncode == 0
    for algorithm in ("dflash", "none"):
        with pytest.raises(AnsibleFilterError, match="extra_buffer_lazy needs the overlap scheduler"):
            sglang_speculative_plan(dict(config, algorithm=algorithm, mamba_strategy=LAZY), facts["v0.5.23"], DRAFTER)


@pytest.mark.parametrize("build, algorithm", [(b, "dflash") for b in LAZY_REFUSED] + [("ddtree-pr29907-early", "ddtree")])
def test_a_build_that_refuses_lazy_with_speculation_serves_without_the_radix_cache(facts, build, algorithm):
    plan = sglang_speculative_plan(wanted(algorithm=algorithm), facts[build], DRAFTER)
    flags = pairs(plan["argv"])
    assert flags["--disable-radix-cache"] is True
    assert not {"--mamba-radix-cache-strategy", "--mamba-scheduler-strategy"} & set(flags)
    assert plan["mamba"] == {"strategy": None, "radix_cache": False, "why": plan["mamba"]["why"]}
    why = plan["mamba"]["why"]
    assert why.startswith("radix cache off: SGLang %s refuses extra_buffer_lazy" % facts[build]["version"]), why
    assert "issue 36537" in why and "pull request 34763" in why
    assert_all_accepted(plan["argv"], facts[build])
    # Asked for explicitly, the server would assert at start: refused before anything changes.
    with pytest.raises(AnsibleFilterError, match="refuses mamba_strategy extra_buffer_lazy together with"):
        sglang_argv(wanted(algorithm=algorithm, mamba_strategy="extra_buffer_lazy"), facts[build], DRAFTER)


@pytest.mark.parametrize("strategy", ["extra_buffer", "auto"])
@pytest.mark.parametrize("build", ["0.5.14", "0.5.23", "ddtree-pr29907"])
def test_the_corrupting_combination_is_refused_without_the_override(facts, build, strategy):
    if strategy == "auto" and build == "v0.5.13":
        return
    with pytest.raises(AnsibleFilterError) as failure:
        sglang_argv(wanted(mamba_strategy=strategy), facts[build], DRAFTER)
    message = str(failure.value)
    assert "mamba_strategy) %s with the radix cache and speculative decoding corrupts" % strategy in message
    assert "SGLang issue 36537" in message and "sglang_service_mamba_extra_buffer_override" in message
    plan = sglang_speculative_plan(wanted(mamba_strategy=strategy, allow_mamba_extra_buffer=True), facts[build], DRAFTER)
    assert pairs(plan["argv"])["--mamba-radix-cache-strategy"] == strategy
    assert "kept by sglang_service_mamba_extra_buffer_override" in plan["mamba"]["why"]
    # Without the radix cache, or without speculation, extra_buffer corrupts nothing.
    for config in (wanted(mamba_strategy=strategy, extra_args=["--disable-radix-cache"]),
                   wanted(mamba_strategy=strategy, algorithm="none")):
        plan = sglang_speculative_plan(config, facts[build], DRAFTER)
        assert pairs(plan["argv"])["--mamba-radix-cache-strategy"] == strategy and plan["mamba"]["why"] is None


def test_no_speculation_leaves_the_servers_strategy(facts):
    plan = sglang_speculative_plan(wanted(algorithm="none"), facts["0.5.23"], DRAFTER)
    assert not [a for a in plan["argv"] if "mamba" in a or "radix" in a]
    assert plan["mamba"] == {"strategy": None, "radix_cache": True, "why": None}
    assert plan["environment"] == {} and plan["drafter_context"] is None


@pytest.mark.parametrize("overrides, message", [
    ({"draft_length": 17}, "draft_length is 17, it must lie between 1 and 16"),
    ({"draft_length": 0}, "draft_length is 0"),
    ({"draft_window": 8, "draft_length": 16}, "draft_window 8 is smaller than the draft length 16"),
    ({"tensor_parallel_size": 2, "gpu_count": 1}, "tensor_parallel_size 2 exceeds the 1 GPU"),
    ({"attention_backend": "fa3"}, "fa3 does not run on compute capability 12.0"),
    ({"attention_backend": "flashmla", "compute_capability": "120"}, "flashmla does not run"),
    ({"attention_backend": "bogus", "compute_capability": None}, "--attention-backend bogus is not accepted"),
    ({"algorithm": "eagle"}, "algorithm must be one of ddtree, dflash, none"),
    ({"draft_model_path": None}, "draft_model_path is required for algorithm dflash"),
    ({"model_path": ""}, "model_path is required"),
    ({"port": 70000}, "port is 70000"),
    ({"mem_fraction_static": 1.2}, "mem_fraction_static must lie between 0 and 1"),
    ({"extra_args": ["--speculative-ddtree-budget", "4"]}, "does not accept --speculative-ddtree-budget"),
    ({"extra_args": ["--speculative-dflash-draft-window-size=8"]}, "does not accept --speculative-dflash-draft-window-size"),
    ({"extra_args": ["--attention-backend", "triton"]}, "extra_args repeat --attention-backend"),
    ({"extra_args": ["--grammar-backend", "bogus"]}, "--grammar-backend bogus is not accepted"),
    ({"extra_args": "--enable-metrics"}, "extra_args must be a list"),
])
def test_configs_that_cannot_be_served(facts, overrides, message):
    config = wanted(attention_backend="triton") if "attention_backend" not in overrides else wanted()
    config.update(overrides)
    with pytest.raises(AnsibleFilterError, match=message.replace("(", r"\(").replace("[", r"\[")):
        sglang_argv(config, facts["0.5.23"], DRAFTER)


def test_draft_length_above_the_trained_block_size(facts):
    with pytest.raises(AnsibleFilterError, match="draft_length 16 exceeds the drafter's trained block size 8"):
        sglang_argv(wanted(draft_length=16), facts["0.5.23"], {"dflash": {"block_size": 8}})


@pytest.mark.parametrize("overrides, message", [
    ({"ddtree_budget": -1}, "ddtree_budget is -1"),
    ({"ddtree_budget": 5000}, "ddtree_budget is 5000"),
    ({"page_size": 16}, "DDTree needs page_size 1, got 16"),
])
def test_ddtree_configs_that_cannot_be_served(facts, overrides, message):
    with pytest.raises(AnsibleFilterError, match=message):
        sglang_argv(wanted(algorithm="ddtree", **overrides), facts["ddtree-pr29907"], DRAFTER)


TARGET = {"path": "/srv/models/Qwen3.6-27B", "context_length": 262144}


@pytest.mark.parametrize("drafter_context, context_length, overwrite", [
    (32768, None, True),      # the target's 262144 served, the drafter declares less
    (32768, 32768, False),    # a served context within the drafter's
    (262144, None, False),
    (None, None, True),       # the drafter's declared context is not recorded
])
def test_a_drafter_declaring_a_shorter_context_gets_the_overwrite(facts, drafter_context, context_length, overwrite):
    drafter = {"path": DRAFTER["path"], "dflash": {"block_size": 16, "context_length": drafter_context}}
    plan = sglang_speculative_plan(wanted(context_length=context_length), facts["0.5.23"], drafter, TARGET)
    assert plan["drafter_context"] == {"drafter": drafter_context, "served": context_length or 262144,
                                       "overwrite": overwrite}
    assert plan["environment"] == ({"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"} if overwrite else {})


def test_a_context_above_the_targets_is_refused(facts):
    # With the overwrite set SGLang would only warn about it for the target too.
    with pytest.raises(AnsibleFilterError, match="context_length 300000 exceeds the 262144 tokens the target declares"):
        sglang_argv(wanted(context_length=300000), facts["0.5.23"], DRAFTER, TARGET)


# Issue 38 item 5: never --enable-mixed-chunk on a hybrid target (SGLang issue 39342).
HYBRID_TARGET = dict(TARGET, model_type="qwen3_5", architectures=["Qwen3_5ForConditionalGeneration"])


@pytest.mark.parametrize("build, algorithm", [(build, "none") for build in REAL + DOUBLE]
                         + [(build, "dflash") for build in DFLASH_ONLY + DOUBLE[2:]]
                         + [(build, "ddtree") for build in DOUBLE[2:]])
def test_the_role_never_renders_mixed_chunk(facts, build, algorithm):
    plan = sglang_speculative_plan(wanted(algorithm=algorithm, enable_metrics=True), facts[build], DRAFTER,
                                   HYBRID_TARGET)
    assert not [word for word in plan["argv"] if word.startswith("--enable-mixed-chunk")]


@pytest.mark.parametrize("extra", [["--enable-mixed-chunk"], ["--enable-mixed-chunk=true"]])
@pytest.mark.parametrize("target, why", [
    (HYBRID_TARGET, "is one \\(model_type qwen3_5\\)"),
    (dict(TARGET, model_type="qwen3_next"), "is one \\(model_type qwen3_next\\)"),
    # No record (another model path): it may be hybrid.
    (None, "has no model_weights record"),
    (TARGET, "has no model_weights record"),
])
def test_mixed_chunk_on_a_hybrid_or_unknown_target_is_refused(facts, extra, target, why):
    with pytest.raises(AnsibleFilterError, match="enable-mixed-chunk.*issue 39342.*" + why):
        sglang_speculative_plan(wanted(extra_args=extra), facts["0.5.23"], DRAFTER, target)


def test_mixed_chunk_on_a_target_recorded_as_not_hybrid_is_passed_on(facts):
    target = dict(TARGET, model_type="qwen3", architectures=["Qwen3ForCausalLM"])
    argv = sglang_argv(wanted(extra_args=["--enable-mixed-chunk"]), facts["0.5.23"], DRAFTER, target)
    assert argv[-1] == "--enable-mixed-chunk"


def test_tensor_parallel_within_the_gpus(facts):
    flags = pairs(sglang_argv(wanted(tensor_parallel_size=2, gpu_count=2), facts["0.5.23"], DRAFTER))
    assert flags["--tp-size"] == "2"


@pytest.mark.parametrize("fact", [None, {}, {"options": []}, "0.5.23"])
def test_missing_fact(fact):
    with pytest.raises(AnsibleFilterError, match="run the sglang role"):
        sglang_argv(wanted(), fact, DRAFTER)


def test_unknown_flag_in_the_fact_is_never_rendered(facts):
    fact = dict(facts["0.5.23"], options=[o for o in facts["0.5.23"]["options"] if o != "--enable-metrics"])
    with pytest.raises(AnsibleFilterError, match="does not accept --enable-metrics"):
        sglang_argv(wanted(enable_metrics=True), fact, DRAFTER)


def test_one_filter_is_registered():
    assert FilterModule().filters() == {"sglang_speculative_plan": sglang_speculative_plan}


# Issue 37 item 7: clients send the served name as model, so it defaults to the target's short
# name, not its directory path.
@pytest.mark.parametrize("build", REAL + DOUBLE)
def test_the_served_name_defaults_to_the_targets_short_name(facts, build):
    plan = sglang_speculative_plan(wanted(algorithm="none"), facts[build])
    assert plan["served_model_name"] == "Qwen3.6-27B"
    assert pairs(plan["argv"])["--served-model-name"] == "Qwen3.6-27B"
    assert_all_accepted(plan["argv"], facts[build])


@pytest.mark.parametrize("overrides, target, name", [
    # The repo id role model_weights recorded names the target, wherever its directory lies.
    ({"model_path": "/srv/models/target"}, {"repo_id": "Qwen/Qwen3.6-27B"}, "Qwen3.6-27B"),
    ({"model_path": "/srv/models/Qwen3.6-27B/"}, None, "Qwen3.6-27B"),
    ({"model_path": "Qwen/Qwen3.6-27B"}, None, "Qwen3.6-27B"),
    # The site's name wins, the full repo id included.
    ({"served_model_name": "Qwen/Qwen3.6-27B"}, {"repo_id": "Qwen/Qwen3.6-27B"}, "Qwen/Qwen3.6-27B"),
    ({"served_model_name": "qwen"}, None, "qwen"),
])
def test_the_served_name_is_the_sites_else_the_repo_ids_else_the_paths_last_part(facts, overrides, target, name):
    plan = sglang_speculative_plan(wanted(**overrides), facts["0.5.23"], drafter=DRAFTER, target=target)
    assert plan["served_model_name"] == name
    assert pairs(plan["argv"])["--served-model-name"] == name


def test_a_build_without_the_served_name_flag_serves_and_records_the_path(facts):
    fact = dict(facts["0.5.23"], options=[o for o in facts["0.5.23"]["options"] if o != "--served-model-name"])
    plan = sglang_speculative_plan(wanted(served_model_name="qwen"), fact, drafter=DRAFTER)
    assert "--served-model-name" not in plan["argv"]
    assert plan["served_model_name"] == "/srv/models/Qwen3.6-27B"


@pytest.mark.parametrize("overrides", [
    {"served_model_name": "Qwen 27B"}, {"served_model_name": "q\tx"}, {"served_model_name": "q\x7fx"},
    {"model_path": "/srv/models/My Model"}, {"model_path": "/"},
])
def test_a_served_name_that_is_not_one_word_is_refused_naming_the_variable(facts, overrides):
    with pytest.raises(AnsibleFilterError, match="sglang_service_served_model_name"):
        sglang_speculative_plan(wanted(**overrides), facts["0.5.23"], drafter=DRAFTER)

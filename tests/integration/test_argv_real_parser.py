"""Every argv sglang_argv renders for the real releases is accepted by that release's REAL
argument parser (SGLang 0.5.14, 0.5.19, 0.5.23 wheels; no GPU needed), and the facts it renders
from, read from --help by _sglang_options, agree with the parser itself.

The oracle environments are built on first use (a few minutes, then cached outside the clone,
see tests/oracle/build_envs.py). A failure to build them fails these tests: they never skip.
"""
import concurrent.futures
import functools
import itertools
import pathlib
import sys
import tempfile
import time

import pytest
from ansible.errors import AnsibleFilterError

REPO = pathlib.Path(__file__).resolve().parents[2]
# The checkout as ansible_collections.pro6000.inference (as tests/unit/conftest.py does), and
# the oracle helpers and the shared test helpers (tests/support.py).
sys.path[:0] = [str(REPO / "collections"), str(REPO / "tests" / "oracle"), str(REPO / "tests")]
import build_envs  # noqa: E402
import oracle  # noqa: E402
from support import run_module_file  # noqa: E402
from ansible_collections.pro6000.inference.plugins.filter.sglang_argv import (  # noqa: E402
    sglang_argv,
    sglang_speculative_plan,
)
from ansible_collections.pro6000.inference.plugins.module_utils._sglang_options import parse_help  # noqa: E402

RELEASES = build_envs.RELEASES
HELP = REPO / "tests" / "fixtures" / "sglang_help"
DRAFTER = {"path": "/srv/models/Qwen3.6-27B-DFlash", "dflash": {"block_size": 16}}
# Flag names SGLang removed in 0.5.20 (hidden or deprecated aliases before).
REMOVED_IN_0_5_20 = ("--speculative-dflash-draft-window-size", "--mamba-scheduler-strategy")


@pytest.fixture(scope="module", autouse=True)
def oracle_envs(request):
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def report(line):  # timings go to the terminal even under output capture
        with capture.global_and_fixture_disabled():
            print("oracle: " + line, flush=True)

    pythons = build_envs.ensure_all(RELEASES, report=report)
    # Each run imports SGLang (seconds of CPU): run them all side by side once, up front.
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda job: job[0](job[1]), [(job, release) for release in RELEASES
                                                   for job in (examined, printed_help, module_result)]))
    report("parsers, --help and module run in %.1f s" % (time.monotonic() - started))
    return pythons


def version_tuple(release):
    return tuple(int(part) for part in release.split("."))


def fixture_text(release):
    return (HELP / ("sglang-%s.txt" % release)).read_text()


def fact(release):
    return dict(parse_help(fixture_text(release)), version=release)


def wanted(**overrides):
    config = {"model_path": "/srv/models/Qwen3.6-27B", "draft_model_path": DRAFTER["path"],
              "served_model_name": "qwen3.6-27b", "host": "127.0.0.1", "port": 30000,
              "gpu_count": 2, "compute_capability": "12.0", "attention_backend": "flashinfer",
              "mem_fraction_static": 0.8, "max_running_requests": 8, "context_length": 32768,
              "enable_metrics": True}
    config.update(overrides)
    return config


def matrix():
    """(name, wanted config) for everything the service role may ask of a release."""
    configs = []
    for draft, window, mamba in itertools.product((8, 16), (None, "same", "double"),
                                                  (None, "extra_buffer", "auto")):
        configs.append(("dflash-%s-%s-%s" % (draft, window, mamba), wanted(
            algorithm="dflash", draft_length=draft, mamba_strategy=mamba,
            draft_window={None: None, "same": draft, "double": 2 * draft}[window])))
    configs += [
        ("dflash-drafter-default", wanted(algorithm="dflash")),
        ("dflash-tp2-triton", wanted(algorithm="dflash", tensor_parallel_size=2,
                                     attention_backend="triton", draft_model_revision="main")),
        ("dflash-trtllm-mha", wanted(algorithm="dflash", attention_backend="trtllm_mha")),
        ("dflash-extra-args", wanted(algorithm="dflash",
                                     extra_args=["--disable-custom-all-reduce", "--log-level", "info"])),
        ("none", wanted(algorithm="none", page_size=16)),
        ("ddtree-fallback-16", wanted(algorithm="ddtree", allow_ddtree_fallback=True, draft_length=16,
                                      draft_window=32, mamba_strategy="extra_buffer")),
        ("ddtree-fallback-8", wanted(algorithm="ddtree", allow_ddtree_fallback=True, draft_length=8,
                                     ddtree_budget=7)),
    ]
    return configs


def rendered(release):
    return [(name, sglang_speculative_plan(config, fact(release), drafter=DRAFTER))
            for name, config in matrix()]


# Control lines: the old flag names (accepted up to 0.5.19, rejected by 0.5.23), a DDTree flag
# and an invalid choice (rejected everywhere).
OLD_NAMES = ["--model-path", "m", "--speculative-algorithm", "DFLASH",
             "--speculative-dflash-draft-window-size", "16", "--mamba-scheduler-strategy", "extra_buffer"]
DDTREE_BUDGET = ["--model-path", "m", "--speculative-ddtree-budget", "15"]
BAD_BACKEND = ["--model-path", "m", "--attention-backend", "bogus"]


@functools.lru_cache(maxsize=None)
def examined(release):
    """The release's parser, run once for all tests: the matrix, then the control lines; its
    help at 200 columns."""
    plans = rendered(release)
    argvs = [plan["argv"] for name, plan in plans] + [OLD_NAMES, DDTREE_BUDGET, BAD_BACKEND]
    report = oracle.examine(release, argvs, columns=200)
    return plans, report


@pytest.mark.parametrize("release", RELEASES)
def test_every_rendered_argv_is_accepted_by_the_real_parser(release):
    plans, report = examined(release)
    verdicts = report["verdicts"][:len(plans)]
    rejected = {name: verdict.error for (name, plan), verdict in zip(plans, verdicts) if not verdict.accepted}
    assert rejected == {}
    for (name, plan), verdict in zip(plans, verdicts):
        values = verdict.values
        assert values["model_path"] == "/srv/models/Qwen3.6-27B"
        if plan["algorithm"] == "none":
            assert values["speculative_algorithm"] is None, name
            continue
        assert values["speculative_algorithm"] == "DFLASH", name
        assert values["speculative_draft_model_path"] == DRAFTER["path"], name
        assert values["speculative_num_draft_tokens"] == int(plan["argv"][plan["argv"].index(
            "--speculative-num-draft-tokens") + 1]), name
        if name.startswith("ddtree"):
            assert plan["fallback"] is True and "no DDTree" in plan["note"]


@pytest.mark.parametrize("release", RELEASES)
def test_removed_and_unknown_flags_are_never_rendered(release):
    plans, parser = examined(release)
    for name, plan in plans:
        flags = {item for item in plan["argv"] if item.startswith("--")}
        assert flags <= set(parser["options"]), (name, flags - set(parser["options"]))
        if version_tuple(release) >= (0, 5, 20):
            assert not flags & set(REMOVED_IN_0_5_20), name
        assert "--speculative-dflash-draft-window-size" not in flags  # hidden everywhere


@pytest.mark.parametrize("release", RELEASES)
def test_ddtree_is_refused_without_fallback(release):
    with pytest.raises(AnsibleFilterError, match="this SGLang build has no DDTree"):
        sglang_argv(wanted(algorithm="ddtree"), fact(release), drafter=DRAFTER)


@pytest.mark.parametrize("release, old_accepted", [("0.5.14", True), ("0.5.19", True), ("0.5.23", False)])
def test_the_oracle_tells_accepted_from_rejected(release, old_accepted):
    old, budget, backend = examined(release)[1]["verdicts"][-3:]
    assert old.accepted is old_accepted, (release, old.error)
    if not old_accepted:
        assert "unrecognized arguments: --speculative-dflash-draft-window-size" in old.error
    assert not budget.accepted and "unrecognized arguments: --speculative-ddtree-budget" in budget.error
    assert not backend.accepted and "invalid choice: 'bogus'" in backend.error


@functools.lru_cache(maxsize=None)
def printed_help(release):
    return oracle.launch_server_help(release)


@functools.lru_cache(maxsize=None)
def module_result(release):
    """sglang_server_options run as Ansible runs it, on the release's interpreter."""
    with tempfile.TemporaryDirectory() as scratch:
        return run_module_file("sglang_server_options", {"python": oracle.interpreter(release), "timeout": 600},
                               scratch, timeout=1300)


@pytest.mark.parametrize("release", RELEASES)
def test_help_fixture_is_what_the_release_prints(release):
    assert printed_help(release) == fixture_text(release)


@pytest.mark.parametrize("release", RELEASES)
def test_help_parser_agrees_with_the_parser_object(release):
    parser = examined(release)[1]
    from_help = parse_help(fixture_text(release))
    assert from_help["options"] == parser["options"]
    assert from_help["choices"] == parser["choices"]
    # What --help cannot show: the hidden aliases (e.g. the old window name up to 0.5.19).
    assert ("--speculative-dflash-draft-window-size" in parser["hidden"]) is (version_tuple(release) < (0, 5, 20))


@pytest.mark.parametrize("release", RELEASES)
def test_help_parser_reads_any_width(release):
    wide = examined(release)[1]["help"]
    assert max(len(line) for line in wide.splitlines()) > 100  # it was formatted wide indeed
    assert parse_help(wide) == parse_help(fixture_text(release))


@pytest.mark.parametrize("release", RELEASES)
def test_module_on_the_real_release(release):
    result = module_result(release)
    assert result.get("failed") is not True, result.get("msg")
    assert result["version"] == release
    assert {key: result[key] for key in ("options", "choices", "speculative_algorithms", "ddtree")} == \
        parse_help(fixture_text(release))

"""The --help parser against the captured help of real releases and of the test double."""
import pathlib
import sys

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils._sglang_options import (
    parse_help,
    parse_version,
)

TESTS = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(TESTS / "oracle"))
import double  # noqa: E402  (tests/oracle is not a package)

HELP = TESTS / "fixtures" / "sglang_help"
RELEASES = ("0.5.14", "0.5.19", "0.5.23")


def real(release):
    return parse_help((HELP / ("sglang-%s.txt" % release)).read_text())


@pytest.mark.parametrize("release", RELEASES)
def test_real_release_offers_dflash_and_no_ddtree(release):
    accepted = real(release)
    assert "DFLASH" in accepted["speculative_algorithms"]
    assert "DDTREE" not in accepted["speculative_algorithms"]
    assert accepted["ddtree"] is None
    assert "--speculative-ddtree-budget" not in accepted["options"]
    assert "--speculative-dflash-enable-ddtree" not in accepted["options"]


def test_real_algorithms_come_from_the_help_sentence():
    # --speculative-algorithm has no argparse choices: "Builtins: EAGLE, ..., DFLASH. Or any name".
    assert real("0.5.14")["speculative_algorithms"] == ["DFLASH", "EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"]
    assert real("0.5.23")["speculative_algorithms"] == [
        "DFLASH", "DSPARK", "EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE", "UNO"]
    assert "--speculative-algorithm" not in real("0.5.23")["choices"]


@pytest.mark.parametrize("release, old_mamba_alias", [("0.5.14", True), ("0.5.19", True), ("0.5.23", False)])
def test_real_window_and_mamba_flag_names(release, old_mamba_alias):
    accepted = real(release)
    assert "--speculative-draft-window-size" in accepted["options"]
    # The 0.5.11 window name is a hidden alias until 0.5.19: --help never shows it.
    assert "--speculative-dflash-draft-window-size" not in accepted["options"]
    assert accepted["choices"]["--mamba-radix-cache-strategy"] == [
        "auto", "extra_buffer", "extra_buffer_lazy", "no_buffer"]
    assert ("--mamba-scheduler-strategy" in accepted["options"]) is old_mamba_alias
    assert {"--speculative-num-draft-tokens", "--speculative-dflash-block-size",
            "--speculative-draft-model-path", "--page-size", "--enable-metrics"} <= set(accepted["options"])


@pytest.mark.parametrize("release", RELEASES)
def test_real_aliases_choices_and_short_options(release):
    accepted = real(release)
    options = accepted["options"]
    assert options == sorted(options) and all(option.startswith("--") for option in options)
    assert "-h" not in options and "--help" in options
    # "--tensor-parallel-size TENSOR_PARALLEL_SIZE, --tp-size TENSOR_PARALLEL_SIZE"
    assert {"--tensor-parallel-size", "--tp-size"} <= set(options)
    backends = accepted["choices"]["--attention-backend"]
    assert {"fa3", "flashinfer", "triton", "trtllm_mha"} <= set(backends)
    # Sentences of help text that mention a flag never make one up: every option found sits on
    # an invocation line of the option list.
    text = (HELP / ("sglang-%s.txt" % release)).read_text()
    invocations = [line for line in text.splitlines() if line.startswith("  -")]
    for option in options:
        assert any(option in line for line in invocations), option


def test_wrapped_choices_and_mentions_in_sentences():
    text = """usage: sglang serve [-h] [--attention-backend {triton,flashinfer,
                    fa3}]

options:
  -h, --help            show this help message and exit
  --attention-backend {triton,flashinfer,
    fa3}
                        Choose the kernels. See also --prefill-attention-backend
                        and --decode-attention-backend.
  --speculative-num-draft-tokens N, --speculative-dflash-block-size N
                        Block size.
  --speculative-algorithm {EAGLE,dflash,DDTREE}
                        Speculative algorithm.

Group:
  Some description that says --not-an-option.
  --enable-metrics      Enable metrics.
"""
    accepted = parse_help(text)
    assert accepted["options"] == ["--attention-backend", "--enable-metrics", "--help",
                                   "--speculative-algorithm", "--speculative-dflash-block-size",
                                   "--speculative-num-draft-tokens"]
    assert accepted["choices"]["--attention-backend"] == ["fa3", "flashinfer", "triton"]
    assert accepted["speculative_algorithms"] == ["DDTREE", "DFLASH", "EAGLE"]
    assert accepted["ddtree"] == "algorithm"


def test_metavar_printed_once_for_all_aliases():
    # Python 3.13 writes "-s, --strategy {a,b}" instead of repeating the metavar.
    accepted = parse_help("options:\n  --old, --new {a,b}  Strategy.\n")
    assert accepted["choices"] == {"--new": ["a", "b"], "--old": ["a", "b"]}


def test_text_without_options_is_refused():
    with pytest.raises(ValueError, match="not argparse --help"):
        parse_help("Traceback (most recent call last):\n  File x\nImportError: no torch\n")


@pytest.mark.parametrize("text, version", [("0.5.23\n", "0.5.23"), ("warning\n0.5.24.dev3+g1234\n", "0.5.24.dev3+g1234")])
def test_version(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("text", ["", "PackageNotFoundError: sglang\n"])
def test_version_refuses_what_is_not_one(text):
    with pytest.raises(ValueError):
        parse_version(text)


@pytest.fixture(scope="module")
def double_help(tmp_path_factory):
    root = tmp_path_factory.mktemp("double")
    return {profile: double.launch_server_help(double.install(profile, root))
            for profile in ("v0.5.13", "v0.5.23", "ddtree-pr29907", "fork-ddtree-flag")}


def test_double_ddtree_build(double_help):
    accepted = parse_help(double_help["ddtree-pr29907"])
    assert accepted["ddtree"] == "algorithm"
    assert {"DDTREE", "DFLASH"} <= set(accepted["speculative_algorithms"])
    assert "--speculative-ddtree-budget" in accepted["options"]


def test_double_fork_build(double_help):
    accepted = parse_help(double_help["fork-ddtree-flag"])
    assert accepted["ddtree"] == "dflash_flag"
    assert "DDTREE" not in accepted["speculative_algorithms"]


def test_double_release_builds(double_help):
    new = parse_help(double_help["v0.5.23"])
    old = parse_help(double_help["v0.5.13"])
    assert new["ddtree"] is None and old["ddtree"] is None
    assert "--mamba-radix-cache-strategy" in new["options"]
    assert "--mamba-scheduler-strategy" not in new["options"]
    assert "--mamba-scheduler-strategy" in old["options"]
    assert "--mamba-radix-cache-strategy" not in old["options"]
    assert "DFLASH" in old["speculative_algorithms"] and "UNO" not in old["speculative_algorithms"]


@pytest.mark.parametrize("profile", ["v0.5.13", "ddtree-pr29907"])
def test_double_help_reads_the_same_at_any_width(tmp_path, profile):
    site = double.install(profile, tmp_path)
    assert parse_help(double.launch_server_help(site, columns=60)) == parse_help(
        double.launch_server_help(site, columns=200))

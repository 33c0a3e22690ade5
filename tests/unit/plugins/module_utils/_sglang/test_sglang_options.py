"""What a build accepts, read from SGLang's own parser object: from the test double's profiles
(the truth: tests/fixtures/sglang_double/python/sglang/srt/double_profiles.py), from reports
shaped like each real release's parser, and the captured readings of the real releases
(tests/fixtures/sglang_parser/, kept equal to the module's reading of each release by
tests/integration/test_argv_real_parser.py) against what their sources declare."""
import json
import pathlib
import sys

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils._sglang.options import accepted

TESTS = pathlib.Path(__file__).resolve().parents[4]
sys.path.insert(0, str(TESTS / "oracle"))
import double  # noqa: E402  (tests/oracle is not a package)

REAL = ("0.5.9", "0.5.14", "0.5.19", "0.5.21", "0.5.23")


def real(release):
    return json.loads((TESTS / "fixtures" / "sglang_parser" / ("sglang-%s.json" % release)).read_text())


@pytest.mark.parametrize("profile", sorted(double.PROFILES))
def test_double_profiles_read_as_their_profile_declares(tmp_path, profile):
    truth = double.PROFILES[profile]
    fact = double.parser_fact(double.install(profile, tmp_path))
    assert fact["version"] == truth["version"]
    assert fact["speculative_algorithms"] == sorted(truth["spec_builtins"])
    assert fact["ddtree"] == truth["ddtree"]
    assert fact["choices"]["--attention-backend"] == sorted(truth["attention_backends"])
    assert truth["mamba_flag"] in fact["options"] and truth["cuda_graph_flag"] in fact["options"]
    # Hidden from --help, accepted by the parser: the object lists it, --help text never did.
    assert ("--speculative-dflash-draft-window-size" in fact["options"]) is truth["legacy_window_alias"]
    assert ("--speculative-ddtree-budget" in fact["options"]) is (truth["ddtree"] == "algorithm")
    assert fact["options"] == sorted(fact["options"]) and "--help" in fact["options"]


def report(**overrides):
    found = {"version": "0.5.23", "options": ["--help", "--model-path", "--speculative-algorithm"],
             "choices": {}, "algorithm_help": None}
    found.update(overrides)
    return found


def test_algorithms_from_choices_as_0_5_9_declares_them():
    # python/sglang/srt/server_args.py of 0.5.9: choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    fact = accepted(report(choices={"--speculative-algorithm": ["EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"]},
                           algorithm_help="Speculative algorithm."))
    assert fact["speculative_algorithms"] == ["EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"]
    assert fact["ddtree"] is None


def test_algorithms_from_the_help_as_0_5_14_to_0_5_23_name_them():
    # python/sglang/srt/arg_groups/fields/spec.py of 0.5.23 (server_args.py up to 0.5.19).
    fact = accepted(report(algorithm_help="Speculative algorithm. Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, "
                                          "NGRAM, DFLASH, DSPARK, UNO. Or any name registered via "
                                          "`SpeculativeAlgorithm.register`."))
    assert fact["speculative_algorithms"] == ["DFLASH", "DSPARK", "EAGLE", "EAGLE3", "NEXTN", "NGRAM",
                                              "STANDALONE", "UNO"]


def test_the_budget_option_of_pull_request_29907_means_ddtree_even_when_the_help_does_not_name_it():
    fact = accepted(report(options=["--model-path", "--speculative-ddtree-budget"],
                           algorithm_help="Speculative algorithm. Builtins: EAGLE, DFLASH. Or any name."))
    assert fact["ddtree"] == "algorithm" and "DDTREE" in fact["speculative_algorithms"]


def test_the_fork_flag_means_ddtree_through_dflash():
    fact = accepted(report(options=["--model-path", "--speculative-dflash-enable-ddtree"],
                           algorithm_help="Speculative algorithm. Builtins: DFLASH. Or any name."))
    assert fact["ddtree"] == "dflash_flag" and "DDTREE" not in fact["speculative_algorithms"]


@pytest.mark.parametrize("bad, message", [({}, "no version"), (report(version=""), "no version"),
                                          (["--model-path"], "no version"),
                                          (report(options=["--help"]), "no --model-path: not SGLang's server parser")])
def test_a_report_that_is_not_sglangs_parser_is_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        accepted(bad)


@pytest.mark.parametrize("release", REAL)
def test_real_releases_offer_what_their_sources_declare(release):
    fact = real(release)
    assert fact["version"] == release
    assert fact["ddtree"] is None and "DDTREE" not in fact["speculative_algorithms"]
    # DFLASH is upstream since 0.5.11 (docs: /work/shared/reference/sglang-dflash-ddtree.md).
    assert ("DFLASH" in fact["speculative_algorithms"]) is (release != "0.5.9")
    assert ("--speculative-algorithm" in fact["choices"]) is (release == "0.5.9")
    assert {"--tensor-parallel-size", "--tp-size", "--page-size", "--enable-metrics",
            "--speculative-num-draft-tokens"} <= set(fact["options"])
    assert {"fa3", "flashinfer", "triton"} <= set(fact["choices"]["--attention-backend"])


@pytest.mark.parametrize("release, window, old_window, mamba, old_mamba", [
    ("0.5.9", False, False, False, True),
    ("0.5.14", True, True, True, True),
    ("0.5.19", True, True, True, True),
    ("0.5.21", True, False, True, False),
    ("0.5.23", True, False, True, False),
])
def test_real_window_and_mamba_flag_names(release, window, old_window, mamba, old_mamba):
    # The 0.5.11 window name and the 0.5.13 mamba name stay aliases until 0.5.19, gone in 0.5.20.
    options = set(real(release)["options"])
    assert ("--speculative-draft-window-size" in options) is window
    assert ("--speculative-dflash-draft-window-size" in options) is old_window
    assert ("--mamba-radix-cache-strategy" in options) is mamba
    assert ("--mamba-scheduler-strategy" in options) is old_mamba


# The validator sources as the releases hold them (abridged to the lines that decide): the
# assert of 0.5.14 to 0.5.16, the DFLASH assert of 0.5.17, and what 0.5.18 on keeps after
# SGLang pull request 34763.
VALIDATOR_0_5_14 = '''    def _validate_mamba_extra_buffer(self, model_arch: str):
        if self.speculative_num_draft_tokens is not None:
            assert (
                not self.enable_mamba_extra_buffer_lazy()
            ), "extra_buffer_lazy unsupported with spec."
'''
VALIDATOR_0_5_17 = '''        if view.mamba_radix_cache_strategy == "extra_buffer_lazy":
            algo = (view.speculative_algorithm or "").upper()
            assert algo != "DFLASH", (
                f"extra_buffer_lazy unsupported with {view.speculative_algorithm}; "
'''
VALIDATOR_0_5_19 = '''def validate_mamba_extra_buffer(view, model_arch: str, *, mamba_cache_chunk_size_of):
    if view.mamba_radix_cache_strategy == "extra_buffer_lazy":
        assert view.disaggregation_mode == "null", (
            "extra_buffer_lazy unsupported under PD disaggregation; use "
'''
LAZY_CHOICES = {"--mamba-radix-cache-strategy": ["auto", "extra_buffer", "extra_buffer_lazy", "no_buffer"]}


@pytest.mark.parametrize("source, choices, verdict", [
    (VALIDATOR_0_5_14, LAZY_CHOICES, False),
    (VALIDATOR_0_5_17, LAZY_CHOICES, False),
    (VALIDATOR_0_5_19, LAZY_CHOICES, True),
    (None, LAZY_CHOICES, None),  # the validator could not be read
    (VALIDATOR_0_5_19, {"--mamba-scheduler-strategy": ["auto", "extra_buffer", "no_buffer"]}, None),  # 0.5.9
])
def test_extra_buffer_lazy_with_speculation_is_read_from_the_validator(source, choices, verdict):
    fact = accepted(report(choices=choices, mamba_validator=source))
    assert fact["mamba_lazy_with_speculation"] is verdict


@pytest.mark.parametrize("release, verdict", [("0.5.9", None), ("0.5.14", False), ("0.5.19", True),
                                              ("0.5.21", True), ("0.5.23", True)])
def test_real_releases_lazy_verdicts(release, verdict):
    # Checked against each release's own validator run by tests/integration/test_argv_real_parser.py.
    assert real(release)["mamba_lazy_with_speculation"] is verdict
    assert real(release)["ddtree_budget"] is None


@pytest.mark.parametrize("options, choices, defaults, budget", [
    (["--model-path"], {}, {}, None),
    (["--model-path", "--speculative-ddtree-budget"], {}, {"--speculative-ddtree-budget": None},
     {"default": None, "minimum": 1, "maximum": None}),
    (["--model-path", "--speculative-ddtree-budget"], {"--speculative-ddtree-budget": [str(n) for n in range(4, 65)]},
     {"--speculative-ddtree-budget": 32}, {"default": 32, "minimum": 4, "maximum": 64}),
])
def test_the_ddtree_budget_default_and_limits_come_from_the_parser(options, choices, defaults, budget):
    assert accepted(report(options=options, choices=choices, defaults=defaults))["ddtree_budget"] == budget


@pytest.mark.parametrize("profile", sorted(double.PROFILES))
def test_double_profiles_declare_their_budget_and_lazy_verdict(tmp_path, profile):
    truth = double.PROFILES[profile]
    fact = double.parser_fact(double.install(profile, tmp_path))
    assert fact["ddtree_budget"] == (truth["ddtree_budget"] if truth["ddtree"] == "algorithm" else None)
    assert fact["mamba_lazy_with_speculation"] is (truth["mamba_lazy"] == "accepted")

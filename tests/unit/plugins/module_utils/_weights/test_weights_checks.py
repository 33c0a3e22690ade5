"""What model_stage refuses before anything changes (repository ids, revisions, paths), and the
facts it reads from a target's and a drafter's config."""

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils._weights import checks
from ansible_collections.pro6000.inference.plugins.module_utils._weights import errors


@pytest.mark.parametrize("repo_id", ["Qwen/Qwen3.6-27B", "gpt2", "z-lab/Qwen3.6-27B-DFlash", "a_b/c.d"])
def test_hub_repository_ids_are_accepted(repo_id):
    assert checks.check_repo_id(repo_id) == repo_id


@pytest.mark.parametrize("repo_id", ["../..", "a/../b", "a/b/c", "a//b", "-a/b", "a/b.", "a--b/c", "a/b.git",
                                     "/a/b", "a/b ", "", "a/" + "b" * 97])
def test_repository_ids_outside_the_hub_syntax_are_refused(repo_id):
    with pytest.raises(errors.WeightsError, match="repo_id"):
        checks.check_repo_id(repo_id)


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "0123456789abcdef0123456789abcdef01234567"])
def test_revisions_that_are_commits_or_ref_names_are_accepted(revision):
    assert checks.check_revision(revision) == revision


@pytest.mark.parametrize("revision", ["../..", "a/../b", "..", "a/.hidden", "/main", "main/", "a b", "x.lock",
                                      "a@{1}", "a//b", "~1", ""])
def test_revisions_that_could_leave_a_path_or_are_no_ref_names_are_refused(revision):
    with pytest.raises(errors.WeightsError, match="revision"):
        checks.check_revision(revision)


@pytest.mark.parametrize("value", ["/", "srv/models", "/srv/models/", "/srv/../etc", "/srv/models\n/x", "/srv/\x00m",
                                   "/srv/m\udcff"])
def test_a_model_root_must_be_a_plain_absolute_directory(value):
    with pytest.raises(errors.WeightsError, match="must be an absolute, normalised directory path other than '/'"):
        checks.check_dir_path(value, "model_weights_root")
    assert checks.check_dir_path("/srv/models", "model_weights_root") == "/srv/models"


@pytest.mark.parametrize("value", ["/etc/shadow", "../manifest.json", "a/../../b", "m\nx.json", "", "./m.json",
                                   "m\udcff.json", None])
def test_a_manifest_name_must_stay_inside_the_source(value):
    with pytest.raises(errors.WeightsError, match="must be a file name inside the mirror's revision or the source path"):
        checks.check_manifest_name(value)
    assert checks.check_manifest_name("sub/manifest.json") == "sub/manifest.json"


TARGET = {"model_type": "qwen3_5", "text_config": {"num_hidden_layers": 64}}


DRAFTER = {"architectures": ["DFlashDraftModel"], "block_size": 16,
           "dflash_config": {"target_layer_ids": [1, 16, 31, 46, 61], "mask_token_id": 7},
           "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 2048}


def test_target_layer_count_is_read_from_the_top_level_or_text_config():
    assert checks.target_facts(TARGET, "t")["num_hidden_layers"] == 64
    assert checks.target_facts({"num_hidden_layers": 48}, "t")["num_hidden_layers"] == 48
    with pytest.raises(errors.WeightsError, match="num_hidden_layers"):
        checks.target_facts({"model_type": "x"}, "t")


@pytest.mark.parametrize("config, declared", [
    ({"text_config": {"max_position_embeddings": 262144}}, 262144),  # Qwen3.6 keeps it in text_config
    ({"max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0, "rope_type": "yarn"}}, 131072),
    ({"max_position_embeddings": 32768,
      "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 8192}}, 32768),
    ({"seq_length": 8192, "max_position_embeddings": 4096}, 8192),  # the first key SGLang looks at wins
    ({}, 2048),  # SGLang's fallback
])
def test_the_declared_context_is_derived_as_sglang_derives_it(config, declared):
    # get_context_length, python/sglang/srt/utils/hf_transformers/common.py of 0.5.23.
    assert checks.context_length(config) == declared
    assert checks.target_facts(dict(config, num_hidden_layers=4), "t")["context_length"] == declared
    assert checks.drafter_facts(dict(DRAFTER, **config), "d", 64)["context_length"] == declared


def test_a_dflash_drafter_is_recognised_and_its_fields_reported():
    facts = checks.drafter_facts(DRAFTER, "d", 64)
    assert facts["block_size"] == 16 and facts["target_layer_ids"] == [1, 16, 31, 46, 61]
    assert facts["mask_token_id"] == 7 and facts["sliding_window"] == 2048
    via_auto_map = dict(DRAFTER, architectures=["Other"], auto_map={"AutoModel": "dflash.DFlashDraftModel"})
    assert checks.drafter_facts(via_auto_map, "d", 64)["block_size"] == 16
    nested = dict(DRAFTER, block_size=None, dflash_config=dict(DRAFTER["dflash_config"], block_size=8))
    assert checks.drafter_facts(nested, "d", 64)["block_size"] == 8


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["LlamaForCausalLM"]}, "not a DFlash drafter"),
    ({"block_size": 1}, "block_size"),
    ({"block_size": "16"}, "block_size"),
    ({"dflash_config": {"target_layer_ids": [1, 64], "mask_token_id": 7}}, r"\[64\] lie outside the target's 64"),
    ({"dflash_config": {"target_layer_ids": [], "mask_token_id": 7}}, "non-empty"),
    ({"dflash_config": {"target_layer_ids": [1]}}, "mask_token_id"),
    ({"dflash_config": None}, "dflash_config is missing"),
])
def test_a_bad_drafter_config_fails_with_the_reason(change, message):
    with pytest.raises(errors.WeightsError, match=message):
        checks.drafter_facts(dict(DRAFTER, **change), "d", 64)


def test_load_config_names_the_file_when_it_is_not_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(errors.WeightsError, match="config.json is not valid JSON"):
        checks.load_config(str(tmp_path))

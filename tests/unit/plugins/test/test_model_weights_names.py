"""The rules repository ids and revisions are checked by before anything changes: model_stage's
own (filter model_weights_rules applies them for role model_weights), and the test plugins
hub_repo_id and git_ref_name (playbooks/lock.yml checks its inputs with both, role sglang checks
sglang_git_ref with the latter). Cases from huggingface_hub's validate_repo_id and git
check-ref-format."""
import pytest

from ansible_collections.pro6000.inference.plugins.test.git_ref_name import git_ref_name
from ansible_collections.pro6000.inference.plugins.test.hub_repo_id import hub_repo_id


@pytest.mark.parametrize("value, valid", [
    ("Qwen/Qwen3.6-27B", True), ("z-lab/Qwen3.6-27B-DFlash", True), ("gpt2", True), ("a_b/c.d-e", True),
    ("", False), ("-a/b", False), ("a/b-", False), ("a/b.", False), ("a--b/c", False), ("a/b..c", False),
    ("a/b.git", False), ("a/b/c", False), ("a b/c", False), ("a/" + "b" * 97, False), (None, False), (3, False),
])
def test_hub_repo_id(value, valid):
    assert hub_repo_id(value) is valid


@pytest.mark.parametrize("value, valid", [
    ("0" * 40, True), ("main", True), ("v1.0", True), ("refs/pr/3", True), ("release/2026-12", True),
    ("", False), ("a..b", False), ("a//b", False), ("main/", False), (".hidden", False), ("a/.b", False),
    ("a.lock", False), ("a.lock/b", False), ("-main", False), ("a b", False), ("a@{1}", False),
    ("a" * 256, False), (None, False), (40, False),
])
def test_git_ref_name(value, valid):
    assert git_ref_name(value) is valid

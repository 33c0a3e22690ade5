"""The hub helper's environment and error handling (the helper itself runs in test_model_stage)."""
import sys

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils import _weights_hub as hub
from ansible_collections.pro6000.inference.plugins.module_utils._weights import WeightsError


def test_token_and_endpoint_reach_the_child_only_when_given():
    parent = {"PATH": "/usr/bin", "HF_TOKEN": "from-the-parent", "HF_ENDPOINT": "http://elsewhere"}
    env = hub.helper_environment(parent, "http://127.0.0.1:8084/", "hf_secret", "/x/hf-home", None)
    assert env["HF_TOKEN"] == "hf_secret" and env["HF_ENDPOINT"] == "http://127.0.0.1:8084"
    assert env["HF_HOME"] == "/x/hf-home" and env["PATH"] == "/usr/bin"
    bare = hub.helper_environment(parent, "", "", "/x/hf-home", "/etc/ca.pem")
    assert "HF_TOKEN" not in bare and "HF_ENDPOINT" not in bare
    assert bare["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1" and bare["SSL_CERT_FILE"] == "/etc/ca.pem"
    assert parent["HF_TOKEN"] == "from-the-parent"


def test_a_missing_interpreter_is_named():
    with pytest.raises(WeightsError, match="/nowhere/python does not exist"):
        hub.run_helper("/nowhere/python", {"command": "list"}, {})


def test_a_client_error_is_reported_with_the_repository(tmp_path):
    env = hub.helper_environment({"PATH": "/usr/bin"}, "http://127.0.0.1:9", "", str(tmp_path), None)
    with pytest.raises(WeightsError, match="hub resolve of org/model failed: .*"):
        hub.run_helper(sys.executable, {"command": "resolve", "repo_id": "org/model", "revision": "main"}, env,
                       timeout=120)

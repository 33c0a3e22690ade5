"""The hub helper's environment, error handling and writer (its downloads run in test_model_stage)."""
import hashlib
import json
import os
import sys

import pytest

from ansible_collections.pro6000.inference.plugins.module_utils._weights import hub
from ansible_collections.pro6000.inference.plugins.module_utils import _weights_hub_helper as helper
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError


def test_token_endpoint_and_timeouts_reach_the_child_only_when_given():
    parent = {"PATH": "/usr/bin", "HF_TOKEN": "from-the-parent", "HF_ENDPOINT": "http://elsewhere"}
    env = hub.helper_environment(parent, "http://127.0.0.1:8084/", "hf_secret", "/x/hf-home", None, 7)
    assert env["HF_TOKEN"] == "hf_secret" and env["HF_ENDPOINT"] == "http://127.0.0.1:8084"
    assert env["HF_HOME"] == "/x/hf-home" and env["PATH"] == "/usr/bin"
    assert env["HF_HUB_ETAG_TIMEOUT"] == env["HF_HUB_DOWNLOAD_TIMEOUT"] == "7"
    bare = hub.helper_environment(parent, "", "", "/x/hf-home", "/etc/ca.pem", 60)
    assert "HF_TOKEN" not in bare and "HF_ENDPOINT" not in bare
    assert bare["HF_HUB_DISABLE_IMPLICIT_TOKEN"] == "1" and bare["SSL_CERT_FILE"] == "/etc/ca.pem"
    assert parent["HF_TOKEN"] == "from-the-parent"


def test_the_helper_ships_as_the_source_of_its_own_file():
    with open(helper.__file__) as stream:
        assert hub.HELPER_SOURCE == stream.read()


def test_a_missing_interpreter_is_named():
    with pytest.raises(WeightsError, match="/nowhere/python does not exist"):
        hub.run_helper("/nowhere/python", {"command": "list"}, {})


def test_a_client_error_is_reported_with_the_repository(tmp_path):
    env = hub.helper_environment({"PATH": "/usr/bin"}, "http://127.0.0.1:9", "", str(tmp_path), None, 5)
    with pytest.raises(WeightsError, match="hub resolve of org/model failed: .*"):
        hub.run_helper(sys.executable, {"command": "resolve", "repo_id": "org/model", "revision": "main",
                                        "timeout": 5}, env)


def test_the_writer_continues_short_writes_and_hashes_what_is_on_disk(tmp_path, monkeypatch):
    real = os.pwrite
    monkeypatch.setattr(helper.os, "pwrite", lambda fd, data, offset: real(fd, bytes(data[:100]), offset))
    part = tmp_path / "f.part"
    part.write_bytes(b"abc")
    data = b"abc" + os.urandom(5000)
    fd = os.open(part, os.O_RDWR)
    try:
        writer = helper.HashingWriter(fd, {"algo": "sha256", "size": len(data)})
        writer.write(data[3:])
        assert writer.read == len(data) - 3 and writer.hasher.hexdigest() == hashlib.sha256(data).hexdigest()
        writer.truncate(0)                              # the server ignored Range
        writer.write(data)
        assert writer.hasher.hexdigest() == hashlib.sha256(data).hexdigest()
    finally:
        os.close(fd)
    assert part.read_bytes() == data


def test_the_lock_command_pins_every_file_of_a_trusted_copy(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.safetensors").write_bytes(b"weights")
    (tmp_path / "config.json").write_bytes(b"{}")
    (tmp_path / "manifest.json").write_bytes(b"{}")
    helper.write_lock(["org/model", "c" * 40, "--dir", str(tmp_path)])
    lock = json.loads(capsys.readouterr().out)
    assert lock == {"repo_id": "org/model", "commit": "c" * 40, "files": [
        {"path": "config.json", "size": 2, "sha256": hashlib.sha256(b"{}").hexdigest()},
        {"path": "sub/w.safetensors", "size": 7, "sha256": hashlib.sha256(b"weights").hexdigest()}]}

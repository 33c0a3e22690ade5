"""The API key reaches SGLang through the secrets file role sglang_service renders, checked with
the REAL config merger and argument parser of every release the oracle covers (0.5.9 to 0.5.23).

The unit runs `--config %d/server-secrets.yaml` (systemd's credentials directory) so that the key
is never in argv; SGLang's `prepare_server_args` folds the file into the arguments in-process.
Real Ansible renders the role's template; each release's own `ConfigArgumentMerger` (under
sglang.srt, from 0.5.19 under sglang.srt.utils) merges it and the release's parser must yield the
key, with the command line still winning over the file as SGLang documents.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "oracle")]
import build_envs  # noqa: E402

KEY = "k3y-with:colons/and+signs=="

_MERGE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
try:
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
except ImportError:
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger

parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
argv = ConfigArgumentMerger(parser).merge_config_with_args(json.loads(sys.argv[1]))
json.dump({"argv": argv, "api_key": parser.parse_args(argv).api_key}, sys.stdout)
"""


@pytest.fixture(scope="module")
def secrets_file(tmp_path_factory):
    """The secrets file as the role's template renders it, with real Ansible."""
    path = tmp_path_factory.mktemp("secrets") / "server-secrets.yaml"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))
    subprocess.run(
        ["ansible", "localhost", "-c", "local", "-m", "ansible.builtin.template",
         "-a", "src=%s dest=%s" % (REPO / "roles/sglang_service/templates/sglang.secrets.yaml.j2", path),
         "-e", json.dumps({"sglang_service_api_key": KEY, "common_service_group": "sglang",
                           "__sglang_service_replica": {"unit": "sglang-qwen-0.service"}})],
        check=True, capture_output=True, env=env, timeout=120)
    return path


@pytest.mark.parametrize("release", build_envs.RELEASES)
def test_release_reads_the_key_from_the_rendered_secrets_file(sglang_releases, release, secrets_file):
    argv = ["--model-path", "/srv/models/target", "--config", str(secrets_file), "--port", "30001"]
    proc = sglang_releases.interpreter(release).run(_MERGE, [json.dumps(argv)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["api_key"] == KEY
    assert "--config" not in result["argv"]

"""The README's "Reaching the endpoint" examples, run as written on the lab host, where the README
tells a `make lab` user to paste them (`docker exec -it pro6000-lab bash`): the blocks come from
README.md itself (tests/scripts/readme_block.py), so the README is the one source."""
import base64
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "scripts"))
from readme_block import readme_block  # noqa: E402

MODEL = "Qwen3.6-27B"


def run_as_written(host, script, interpreter="bash -euo pipefail"):
    """Runs the block byte for byte (base64 keeps the shell's quoting out of it), without a key
    in the environment, as the lab has none."""
    encoded = base64.b64encode(script.encode()).decode()
    return host.run("echo %s | base64 -d > /tmp/readme-example && env -u SGLANG_API_KEY %s /tmp/readme-example"
                    % (encoded, interpreter))


def test_the_curl_example_gets_a_chat_completion_from_the_gateway(host):
    result = run_as_written(host, readme_block("endpoint-curl"))
    assert result.rc == 0, result.stderr
    reply = json.loads(result.stdout)
    assert reply["object"] == "chat.completion" and reply["model"] == MODEL
    assert isinstance(reply["choices"][0]["message"]["content"], str)
    assert reply["choices"][0]["message"]["content"].strip()
    assert reply["usage"]["completion_tokens"] > 0


def test_the_model_the_readme_names_is_the_one_served_and_no_other_is_answered(host):
    listed = json.loads(host.check_output("curl -sSf http://127.0.0.1:30000/v1/models"))
    assert MODEL in [model["id"] for model in listed["data"]]
    # The same request for another model: the name the README gives is what makes it work.
    other = readme_block("endpoint-curl").replace('"model": "%s"' % MODEL, '"model": "Qwen3-8B"')
    assert other != readme_block("endpoint-curl")
    reply = run_as_written(host, other.replace("curl -sS ", "curl -sS -o /dev/null -w '%{http_code}' ", 1))
    assert reply.stdout == "404"


@pytest.fixture(scope="module")
def openai_client(host):
    result = run_as_written(host, readme_block("endpoint-openai-install"))
    assert result.rc == 0, result.stdout + result.stderr
    yield "/root/openai-client/bin/python"
    host.run("rm -rf /root/openai-client /tmp/readme-example")


def test_the_openai_client_example_gets_a_chat_completion_from_the_gateway(host, openai_client):
    result = run_as_written(host, readme_block("endpoint-openai"), openai_client)
    assert result.rc == 0, result.stderr
    # The example prints the model, then the answer's text.
    model, text = result.stdout.strip().split(" ", 1)
    assert model == MODEL
    assert text.strip()

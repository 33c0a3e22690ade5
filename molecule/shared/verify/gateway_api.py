"""The gateway's API as a client and an operator reach it, through the container (curl inside it),
for the verifiers of the scenarios that run the gateway in front of replicas: `default` (the lab)
and `replicas`."""
import json

GATEWAY = "http://127.0.0.1:30000"
CONTROL_PLANE_KEY_FILE = "/etc/sglang-qwen-gateway/control-plane-key"
# The scenarios serve without an inference key: the gateway forwards whatever key a client sends.
INFERENCE_KEY = "an-inference-client-key"
# issue 36: with the inference key (or, with none, with no key at all) a client registered a
# worker of its own at the gateway and removed the real ones, then received every chat.
INTRUDER = {"url": "http://127.0.0.1:9"}


def control_plane_key(host):
    """Read as root, as the role and the smoke gate read it."""
    return host.file(CONTROL_PLANE_KEY_FILE).content_string.strip()


def status(host, url, key=None, body=None):
    """The HTTP status curl gets; -H and -d only where given."""
    command = "curl -s -o /dev/null -w '%%{http_code}' %s" % url
    if key:
        command += " -H 'Authorization: Bearer %s'" % key
    if body is not None:
        command += " -H 'Content-Type: application/json' -d '%s'" % json.dumps(body)
    return host.check_output(command)


def assert_only_the_control_plane_key_opens_the_workers(host):
    """No key and the inference key are refused at the workers and the cache; the control-plane
    key lists the workers; the inference key still gets a chat."""
    assert status(host, GATEWAY + "/workers", None, INTRUDER) == "401"
    assert status(host, GATEWAY + "/workers", INFERENCE_KEY, INTRUDER) == "401"
    assert status(host, GATEWAY + "/flush_cache", INFERENCE_KEY, {}) == "401"
    assert status(host, GATEWAY + "/workers", control_plane_key(host)) == "200"
    # smg routes by model: the id it lists.
    chat = {"model": json.loads(host.check_output("curl -sf %s/v1/models", GATEWAY))["data"][0]["id"], "max_tokens": 4,
            "messages": [{"role": "user", "content": "hello"}]}
    assert status(host, GATEWAY + "/v1/chat/completions", INFERENCE_KEY, chat) == "200"

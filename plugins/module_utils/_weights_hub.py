# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Talks to a Hugging Face hub (or an internal hub mirror) through the real huggingface_hub client.

huggingface_hub is not part of the module's standard library world: it lives in a dedicated
virtual environment on the host. The module runs HELPER_SOURCE with that environment's
interpreter; the token and the endpoint travel in the child's environment only (HF_TOKEN,
HF_ENDPOINT), never on its command line or on disk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess

from ansible_collections.pro6000.inference.plugins.module_utils._weights import WeightsError

# Runs inside the hub virtual environment. Reads one JSON request on stdin, writes one JSON
# answer on stdout. Commands: "resolve" (the commit a branch or tag points at), "list" (the
# files of a revision with their sizes and digests) and "fetch" (download the given files of a
# commit into local_dir).
HELPER_SOURCE = r'''
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import filter_repo_objects


def resolve(request):
    return {"commit": HfApi().model_info(request["repo_id"], revision=request["revision"]).sha}


def list_files(request):
    api = HfApi()
    commit = request["revision"] if request.get("is_commit") else resolve(request)["commit"]
    entries = [
        item for item in api.list_repo_tree(request["repo_id"], revision=commit, recursive=True)
        if isinstance(item, RepoFile)
    ]
    wanted = set(filter_repo_objects(
        [item.path for item in entries],
        allow_patterns=request.get("allow_patterns") or None,
        ignore_patterns=request.get("ignore_patterns") or None,
    ))
    files = []
    for item in entries:
        if item.path not in wanted:
            continue
        if item.lfs is not None:
            files.append({"path": item.path, "size": item.lfs.size, "sha256": item.lfs.sha256})
        else:
            files.append({"path": item.path, "size": item.size, "git_sha1": item.blob_id})
    return {"commit": commit, "files": files}


def fetch_files(request):
    def fetch(path):
        hf_hub_download(request["repo_id"], path, revision=request["commit"], local_dir=request["local_dir"])
        return path

    errors = {}
    with ThreadPoolExecutor(max_workers=max(1, request.get("workers", 8))) as pool:
        futures = {path: pool.submit(fetch, path) for path in request["files"]}
        for path, future in futures.items():
            try:
                future.result()
            except Exception as exc:
                errors[path] = "%s: %s" % (type(exc).__name__, exc)
    return {"errors": errors}


def main():
    request = json.load(sys.stdin)
    command = {"resolve": resolve, "list": list_files, "fetch": fetch_files}[request["command"]]
    try:
        answer = command(request)
    except Exception as exc:
        answer = {"error": "%s: %s" % (type(exc).__name__, exc)}
    json.dump(answer, sys.stdout)


main()
'''


def helper_environment(base_env, endpoint, token, hf_home, ca_file):
    """The child's environment: hub endpoint and token only here, no progress bars, no telemetry."""
    env = dict(base_env)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"):
        env.pop(name, None)
    env.update({
        "HF_HOME": hf_home,
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1" if not token else "0",
    })
    if endpoint:
        env["HF_ENDPOINT"] = endpoint.rstrip("/")
    if token:
        env["HF_TOKEN"] = token
    if ca_file:
        env["SSL_CERT_FILE"] = ca_file
    return env


def run_helper(python, request, env, timeout=None):
    """Run HELPER_SOURCE with python; return its JSON answer or raise WeightsError."""
    if not os.access(python, os.X_OK):
        raise WeightsError("the hub client interpreter %s does not exist: install huggingface_hub first" % python)
    try:
        proc = subprocess.run(
            [python, "-c", HELPER_SOURCE], input=json.dumps(request), env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        raise WeightsError("the hub client did not finish %s within %s s" % (request["command"], timeout))
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        raise WeightsError("the hub client failed (exit %s): %s" % (proc.returncode, proc.stderr.strip()[-2000:]))
    if answer.get("error"):
        raise WeightsError("hub %s of %s failed: %s" % (request["command"], request.get("repo_id"), answer["error"]))
    return answer

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Talks to a Hugging Face hub (or an internal hub mirror) through the real huggingface_hub client.

huggingface_hub is not part of the module's standard library world: it lives in a dedicated
virtual environment on the host. The module runs _weights_hub_helper.py (shipped with the
module as one of its module_utils) with that environment's interpreter; the token and the
endpoint travel in the child's environment only (HF_TOKEN, HF_ENDPOINT), never on its command
line or on disk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import inspect
import json
import os
import subprocess

from ansible_collections.pro6000.inference.plugins.module_utils import _weights_hub_helper
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError, mask_secrets

HELPER_SOURCE = inspect.getsource(_weights_hub_helper)


def helper_environment(base_env, endpoint, token, hf_home, ca_file, timeout):
    """The child's environment: hub endpoint and token only here, the module's timeout for every
    request (the client's own default is 10 s), plain HTTP downloads, no progress bars, no telemetry."""
    env = dict(base_env)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"):
        env.pop(name, None)
    env.update({
        "HF_HOME": hf_home,
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1" if not token else "0",
        "HF_HUB_ETAG_TIMEOUT": str(timeout),
        "HF_HUB_DOWNLOAD_TIMEOUT": str(timeout),
    })
    if endpoint:
        env["HF_ENDPOINT"] = endpoint.rstrip("/")
    if token:
        env["HF_TOKEN"] = token
    if ca_file:
        env["SSL_CERT_FILE"] = ca_file
    return env


def run_helper(python, request, env, lock_fd=None):
    """Run the helper with python; return its JSON answer or raise WeightsError.

    The helper gets a session (and process group) of its own, so that signals meant for the
    module's terminal do not reach it half-way, and dies with the module (the helper asks for
    PR_SET_PDEATHSIG); lock_fd, the module's lock, is inherited so that the lock stays held for
    as long as the helper lives.
    """
    if not os.access(python, os.X_OK):
        raise WeightsError("the hub client interpreter %s does not exist: install huggingface_hub first" % python)
    request = dict(request, parent_pid=os.getpid())
    # subprocess rather than run_command: the helper gets the lock's descriptor (pass_fds) and a
    # session of its own (start_new_session), which run_command cannot give.
    proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
        [python, "-c", HELPER_SOURCE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env, universal_newlines=True, start_new_session=True,
        pass_fds=(lock_fd,) if lock_fd is not None else (),
    )
    stdout, stderr = proc.communicate(json.dumps(request))
    try:
        answer = json.loads(stdout)
    except ValueError:
        raise WeightsError("the hub client failed (exit %s): %s" % (proc.returncode,
                                                                    mask_secrets(stderr.strip()[-2000:])))
    if answer.get("error"):
        raise WeightsError("hub %s of %s failed: %s" % (request["command"], request.get("repo_id"),
                                                        mask_secrets(answer["error"])))
    return answer

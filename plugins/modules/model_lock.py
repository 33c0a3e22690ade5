#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_lock
short_description: Resolve a model revision to its commit and write the site's lock file
description:
  - Resolves O(revision) (a branch, a tag or a commit) to its 40-hex commit on the hub, lists the
    commit's files with their sizes and sha256 and writes them, with the repository id and the
    commit, as the lock file that M(pro6000.inference.model_stage) (option C(lock)) and role
    C(model_weights) check every staged byte against.
  - The hub gives the sha256 of large (LFS) files in its listing; the small files, which it
    describes by their git blob id only, are downloaded into a scratch directory and hashed.
    With O(trusted_copy) every file of a copy the site trusts is hashed instead, and the hub is
    not asked.
  - The same engine as the collection's helper (C(_weights_hub_helper.py lock)), run with
    O(hub_python) through the real C(huggingface_hub) client; the file's text is the helper's, byte
    for byte.
  - Every option is checked before the hub is asked, and the whole lock is built and checked as
    M(pro6000.inference.model_stage) reads it before O(dest) is written. An existing O(dest) of
    another content is left as it is and the run fails naming what differs (the commit, files
    added, removed or changed), unless O(force) is set; then the result lists the same.
version_added: 0.1.0
author:
  - pro6000.inference developers (@pro6000)
options:
  repo_id:
    description:
      - Repository id in the hub's syntax, for example C(Qwen/Qwen3.6-27B).
    type: str
    required: true
  revision:
    description:
      - The revision to pin, a branch or tag (resolved to the commit it points at now) or a 40-hex commit.
      - With O(trusted_copy), a commit only.
    type: str
    required: true
  dest:
    description:
      - The lock file to write, an absolute path whose directory exists, for example
        C(<inventory>/group_vars/pro6000/model_weights_target_lock.json).
    type: str
    required: true
  var:
    description:
      - Write the lock as the value of one key, O(var), instead of the bare lock, so that the file
        is a C(group_vars) file setting that variable (C(model_weights_target_lock), C(model_weights_drafter_lock)).
      - A variable name (letters, digits, underscores, not starting with a digit).
    type: str
  trusted_copy:
    description:
      - A directory holding a copy of the commit's files that the site trusts (a verified
        download, a mounted share). Every file is hashed there and the hub is not asked.
      - Its O(manifest_name) and names starting with C(.) are not pinned.
    type: path
  include:
    description:
      - Shell patterns, of which a file must match one to be pinned (as a model's C(allow_patterns)
        stages a subset). Empty pins every file.
    type: list
    elements: str
    default: []
  exclude:
    description:
      - Shell patterns of files that are not pinned (as a model's C(ignore_patterns)).
    type: list
    elements: str
    default: []
  manifest_name:
    description:
      - The mirror manifest of O(trusted_copy), which is not pinned.
    type: str
    default: manifest.json
  force:
    description:
      - Replace an existing O(dest) whose content differs. Without it such a file is kept and
        the run fails, naming the differences.
    type: bool
    default: false
  hub_python:
    description:
      - Interpreter of a Python environment that holds C(huggingface_hub). Empty means the
        interpreter this module runs with (the controller's, where C(requirements-controller.txt)
        installs the client).
    type: path
  timeout:
    description:
      - Seconds a request to the hub may stall before it fails.
    type: int
    default: 60
extends_documentation_fragment:
  - pro6000.inference.hub
  - pro6000.inference.attributes
attributes:
  check_mode:
    support: full
    details: Resolves and builds the lock (reading the hub or the copy) and reports whether O(dest) would change; writes nothing.
  diff_mode:
    support: full
    details: Shows the old and the new text of O(dest).
  idempotent:
    support: full
    details: The same commit and files leave O(dest) as it is.
notes:
  - Runs where the lock file belongs, usually the controller (C(delegate_to) C(localhost), or
    playbook C(pro6000.inference.lock)).
  - A branch resolves to wherever it points when the module runs; the commit the lock pins is in
    RV(commit), and the model's revision pin is to be set to it.
seealso:
  - module: pro6000.inference.model_stage
"""

EXAMPLES = r"""
- name: Pin the target's main branch as the production inventory's lock file
  pro6000.inference.model_lock:
    repo_id: Qwen/Qwen3.6-27B
    revision: main
    dest: "{{ inventory_dir }}/group_vars/pro6000/model_weights_target_lock.json"
    var: model_weights_target_lock
  delegate_to: localhost
  register: target_lock

- name: Pin a commit from a copy the site trusts
  pro6000.inference.model_lock:
    repo_id: z-lab/Qwen3.6-27B-DFlash
    revision: 0123456789abcdef0123456789abcdef01234567
    trusted_copy: /srv/verified/Qwen3.6-27B-DFlash
    dest: /srv/site-inventory/group_vars/pro6000/model_weights_drafter_lock.json
    var: model_weights_drafter_lock
"""

RETURN = r"""
path:
  description: The lock file (O(dest)).
  returned: always
  type: str
repo_id:
  description: The repository the lock is for.
  returned: always
  type: str
revision:
  description: The revision asked for.
  returned: always
  type: str
commit:
  description: The 40-hex commit the revision resolved to, which the lock pins.
  returned: success
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
files:
  description: Number of files pinned.
  returned: success
  type: int
bytes:
  description: Total size of the pinned files.
  returned: success
  type: int
differences:
  description:
    - What the new lock changes in the file O(dest) held, one sentence each (the commit, each
      file added, removed or changed). Empty when O(dest) was absent or is unchanged.
  returned: always
  type: list
  elements: str
  sample: ["commit 1111111111111111111111111111111111111111 becomes 2222222222222222222222222222222222222222"]
lock:
  description: The lock (C(repo_id), C(commit), C(files) with C(path), C(size), C(sha256)).
  returned: success
  type: dict
"""

import json
import os
import re
import shutil
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pro6000.inference.plugins.module_utils._files import replace_file
from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import (
    COMMIT_RE, check_manifest_name, check_repo_id, check_revision, check_url)
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError, mask_secrets
from ansible_collections.pro6000.inference.plugins.module_utils._weights.hub import helper_environment, run_helper
from ansible_collections.pro6000.inference.plugins.module_utils._weights.lock import lock_files, manifest_bytes
from ansible_collections.pro6000.inference.plugins.module_utils._weights_hub_helper import lock_text

VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FILE_MODE = 0o644


def check_options(params):
    """Refuse bad input before the hub or any file is touched, naming the option."""
    check_repo_id(params["repo_id"])
    check_revision(params["revision"])
    check_manifest_name(params["manifest_name"])
    dest = params["dest"]
    if not dest.startswith("/") or os.path.normpath(dest) != dest or not dest.isprintable():
        raise WeightsError("dest %r must be an absolute, normalised file path (no '~', '..', '.' or trailing '/')" % dest)
    if not os.path.isdir(os.path.dirname(dest)):
        raise WeightsError("dest %s: its directory %s does not exist" % (dest, os.path.dirname(dest)))
    if os.path.isdir(dest):
        raise WeightsError("dest %s is a directory, not a lock file" % dest)
    if params["var"] is not None and not VAR_RE.match(params["var"]):
        raise WeightsError("var %r is not a variable name (letters, digits and '_', not starting with a digit)"
                           % params["var"])
    if params["trusted_copy"] is not None:
        if not os.path.isdir(params["trusted_copy"]):
            raise WeightsError("trusted_copy %s is not a directory" % params["trusted_copy"])
        if not COMMIT_RE.match(params["revision"]):
            raise WeightsError("revision %r must be the 40-hex commit of trusted_copy: a copy cannot say which "
                               "commit a branch or tag names" % params["revision"])
    elif params["hub_endpoint"]:
        check_url(params["hub_endpoint"], "hub_endpoint")
    if params["timeout"] < 1:
        raise WeightsError("timeout must be at least 1, not %d" % params["timeout"])


def read_existing(dest):
    try:
        with open(dest, "rb") as stream:
            return stream.read()
    except FileNotFoundError:
        return None
    except (IOError, OSError) as exc:
        raise WeightsError("dest %s cannot be read: %s" % (dest, exc))


def unwrap(document, var):
    """The lock inside what a lock file held (the bare lock, or {var: lock})."""
    if var and isinstance(document, dict) and list(document) == [var]:
        return document[var]
    return document


def differences(before, lock, var):
    """What replacing the text before with lock changes, one sentence each."""
    try:
        old = unwrap(json.loads(before.decode("utf-8")), var)
    except ValueError:
        return ["the file is not a lock file (not JSON)"]
    if not isinstance(old, dict) or not isinstance(old.get("files"), list):
        return ["the file is not a lock file%s" % (" of variable %s" % var if var else "")]
    found = []
    for key in ("repo_id", "commit"):
        if old.get(key) != lock[key]:
            found.append("%s %s becomes %s" % (key, old.get(key), lock[key]))
    old_files = dict((entry.get("path"), entry) for entry in old["files"] if isinstance(entry, dict))
    new_files = dict((entry["path"], entry) for entry in lock["files"])
    for path in sorted(set(old_files) | set(new_files)):
        if path not in new_files:
            found.append("%s is no longer pinned" % path)
        elif path not in old_files:
            found.append("%s is pinned anew" % path)
        elif [old_files[path].get(key) for key in ("size", "sha256")] != [new_files[path][key] for key in ("size", "sha256")]:
            found.append("%s changes size or sha256" % path)
    return found or ["the text differs (same commit and files)"]


def build(module):
    """The lock, from the helper's engine, checked as model_stage will read it."""
    params = module.params
    request = {"command": "lock", "repo_id": params["repo_id"], "revision": params["revision"],
               "dir": params["trusted_copy"], "include": params["include"], "exclude": params["exclude"],
               "manifest_name": params["manifest_name"], "timeout": params["timeout"]}
    hf_home = tempfile.mkdtemp(prefix="model-lock-hf-home.")
    try:
        env = helper_environment(os.environ, params["hub_endpoint"], params["hub_token"], hf_home,
                                 params["ca_file"], params["timeout"])
        lock = run_helper(params["hub_python"] or sys.executable, request, env)["lock"]
    finally:
        shutil.rmtree(hf_home, ignore_errors=True)
    if not lock["files"]:
        raise WeightsError("%s at %s: no file is left to pin (include %s, exclude %s)"
                           % (params["repo_id"], lock["commit"], params["include"], params["exclude"]))
    commit, files = lock_files(lock, params["repo_id"], params["revision"])
    return lock, commit, files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            dest=dict(type="str", required=True),
            var=dict(type="str"),
            trusted_copy=dict(type="path"),
            include=dict(type="list", elements="str", default=[]),
            exclude=dict(type="list", elements="str", default=[]),
            manifest_name=dict(type="str", default="manifest.json"),
            force=dict(type="bool", default=False),
            hub_python=dict(type="path"),
            hub_endpoint=dict(type="str", default=""),
            hub_token=dict(type="str", default="", no_log=True),
            ca_file=dict(type="path"),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, path=params["dest"], repo_id=params["repo_id"], revision=params["revision"],
                  differences=[])
    try:
        check_options(params)
        lock, commit, files = build(module)
        before = read_existing(params["dest"])
    except WeightsError as exc:
        module.fail_json(msg=mask_secrets(str(exc)), **result)
    text = lock_text(lock, params["var"]).encode("utf-8")
    result.update(commit=commit, files=len(files), bytes=manifest_bytes(files), lock=lock)
    if before == text:
        module.exit_json(**result)
    if before is not None:
        result["differences"] = differences(before, lock, params["var"])
        if not params["force"]:
            module.fail_json(msg="%s holds another lock; left as it is (force: true replaces it): %s"
                                 % (params["dest"], "; ".join(result["differences"])), **result)
    result["changed"] = True
    if module._diff:
        result["diff"] = dict(before_header=params["dest"], after_header=params["dest"],
                              before=(before or b"").decode("utf-8", "replace"), after=text.decode("utf-8"))
    if not module.check_mode:
        replace_file(params["dest"], text, FILE_MODE, module.atomic_move)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role model_weights' rules for each model it stages, in the rules idiom of every role."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: model_weights_rules
short_description: The rules role model_weights' paths and models must follow, as name, value, rule and why
version_added: "0.1.0"
description:
  - C(model_weights_root), C(model_weights_path_root) and C(model_weights_manifest_name), then for
    every model of C(model_weights_models) its C(name), C(repo_id), C(revision), C(path) and
    C(lock), checked by the rules module M(pro6000.inference.model_stage) applies (an absolute,
    normalised directory other than C(/) without control characters; a manifest name that stays
    inside the source; the hub's repository id rule, git's ref name rule), each as the mapping
    the roles pass to M(pro6000.inference.host_state)'s
    O(pro6000.inference.host_state#module:rules), named by the variable (a model's fields as
    C(model_weights_models[NAME].FIELD)).
options:
  _input:
    description: C(model_weights_models).
    type: list
    elements: dict
    required: true
  source:
    description: C(model_weights_source), a model's source when it names none.
    type: str
    required: true
  allow_floating_revision:
    description: C(model_weights_allow_floating_revision).
    type: bool
    required: true
  require_lock:
    description: C(model_weights_require_lock).
    type: bool
    required: true
  paths:
    description:
      - The role's paths, C(root) (C(model_weights_root)), C(path_root) (C(model_weights_path_root))
        and C(manifest_name) (C(model_weights_manifest_name)).
    type: dict
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Check the models before anything changes
  pro6000.inference.host_state:
    rules: >-
      {{ model_weights_models | pro6000.inference.model_weights_rules(model_weights_source,
         model_weights_allow_floating_revision, model_weights_require_lock,
         {'root': model_weights_root, 'path_root': model_weights_path_root,
          'manifest_name': model_weights_manifest_name}) }}
"""

RETURN = r"""
_value:
  description: One mapping per variable, model and field, C(name), C(value), C(rule) (whether it holds) and C(why).
  type: list
  elements: dict
"""

import re

from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import (
    COMMIT_RE, check_dir_path, check_manifest_name, check_repo_id, check_revision, passes,
)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def model_rules(model, source, path_root, allow_floating_revision, require_lock):
    source = model.get("source") or source
    name = str(model.get("name", ""))
    repo_id = model.get("repo_id") or ""
    revision = str(model.get("revision", ""))
    path = model.get("path", path_root) or ""
    lock = model.get("lock") or {}
    pinned = bool(COMMIT_RE.match(revision))
    checks = [
        ("name", name, bool(NAME_RE.match(name)), "must be a plain directory name"),
        ("repo_id", repo_id, (source == "path" and "path" in model and repo_id == "") or passes(check_repo_id, repo_id),
         "must be a hub repository id such as Qwen/Qwen3.6-27B (required unless a path model names its path)"),
        ("revision", revision, passes(check_revision, revision) and (pinned or allow_floating_revision),
         "must be a 40-hex commit (model_weights_target_revision / model_weights_drafter_revision for the default "
         "models), or a branch or tag name without '..' when model_weights_allow_floating_revision is true"),
        ("path", path, source != "path" or passes(lambda value: check_dir_path(value, "path"), path),
         "a path model needs its path or model_weights_path_root as an absolute, normalised path without control "
         "characters"),
        ("lock", lock.get("commit", "(none)"),
         (not require_lock or bool(lock)) and (not lock or lock.get("commit", "") == revision or not pinned),
         "must be the lock file of the pinned revision (%s); model_weights_require_lock refuses a model without one. "
         "Write it with ansible-playbook pro6000.inference.lock (README.md, \"Pins and lock files\")" % revision),
    ]
    return [{"name": "model_weights_models[%s].%s" % (name, field), "value": value, "rule": bool(rule), "why": why}
            for field, value, rule, why in checks]


def path_rules(root, path_root, manifest_name):
    """The role's paths by model_stage's own checks: dest is <root>/<name>, the manifest is read
    inside the source (an absolute name would read any file on the host as root)."""
    checks = [
        ("model_weights_root", root, passes(lambda value: check_dir_path(value, "model_weights_root"), root),
         "must be an absolute, normalised directory path other than '/', without '..', '.', a trailing '/' or "
         "control characters (a line break)"),
        ("model_weights_path_root", path_root,
         path_root == "" or passes(lambda value: check_dir_path(value, "model_weights_path_root"), path_root),
         "must be empty or an absolute, normalised directory path without control characters"),
        ("model_weights_manifest_name", manifest_name, passes(check_manifest_name, manifest_name),
         "must be a file name inside the mirror's revision or the source path: relative, without '..', '.', "
         "empty parts or control characters"),
    ]
    return [{"name": name, "value": value, "rule": bool(rule), "why": why} for name, value, rule, why in checks]


def model_weights_rules(models, source, allow_floating_revision, require_lock, paths):
    return path_rules(paths["root"], paths["path_root"], paths["manifest_name"]) + [
        rule for model in models for rule in model_rules(model, source, paths["path_root"], allow_floating_revision,
                                                         require_lock)]


class FilterModule:
    def filters(self):
        return {"model_weights_rules": model_weights_rules}

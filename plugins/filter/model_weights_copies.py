# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where role model_weights keeps each model and what model_stage marks its copy with."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: model_weights_copies
short_description: Each model's link and the identity its staged copy's marker holds
version_added: "0.1.0"
description:
  - For every model of C(model_weights_models), C(path) (C(<root>/<name>), the link
    M(pro6000.inference.model_stage) manages) and C(identity), the keys model_stage writes into
    the marker of the copy it stages (C(source), C(repo_id), C(revision), the sorted patterns),
    as M(pro6000.inference.host_state)'s O(pro6000.inference.host_state#module:weights) takes them,
    with the owner (root), group and modes model_stage gives the copy.
options:
  _input:
    description: C(model_weights_models).
    type: list
    elements: dict
    required: true
  root:
    description: C(model_weights_root).
    type: str
    required: true
  source:
    description: C(model_weights_source), a model's source when it names none.
    type: str
    required: true
  group:
    description: The group that reads the weights (C(common_service_group)); the owner is root.
    type: str
    required: true
  dir_mode:
    description: C(model_weights_dir_mode).
    type: str
    required: true
  file_mode:
    description: C(model_weights_file_mode).
    type: str
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Compare the staged copies with the wanted models
  pro6000.inference.host_state:
    weights: >-
      {{ model_weights_models | pro6000.inference.model_weights_copies(model_weights_root, model_weights_source,
         common_service_group, model_weights_dir_mode, model_weights_file_mode) }}
"""

RETURN = r"""
_value:
  description: One mapping per model, C(path), C(identity), C(owner), C(group), C(dir_mode) and C(file_mode).
  type: list
  elements: dict
"""

from ansible_collections.pro6000.inference.plugins.module_utils._weights.tree import marker_identity


def model_weights_copies(models, root, source, group, dir_mode, file_mode):
    return [{"path": "%s/%s" % (root.rstrip("/"), model["name"]),
             "identity": marker_identity(model.get("source") or source, model.get("repo_id"), model["revision"],
                                         model.get("allow_patterns"), model.get("ignore_patterns")),
             "owner": "root", "group": group, "dir_mode": dir_mode, "file_mode": file_mode}
            for model in models]


class FilterModule:
    def filters(self):
        return {"model_weights_copies": model_weights_copies}

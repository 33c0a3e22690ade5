# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of every SGLang replica as role sglang_service writes them (tasks/replica.yml), in
the shape module host_state compares: the one place that says their paths, owners and modes
for the comparison."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_replica_files
short_description: Each SGLang replica's environment, secrets and unit file, as module host_state compares them
version_added: 0.1.0
description:
  - For each replica of P(pro6000.inference.sglang_replica_plan#filter), three
    O(pro6000.inference.host_state#module:files) entries of M(pro6000.inference.host_state),
    its environment file (root's alone, mode C(0600)) and its secrets file (root and
    O(paths.group) read it, mode C(0640)), both compared by content, and its unit (mode C(0644)),
    compared by the SHA-1 of its rendered text as M(ansible.builtin.template) computes it.
  - The texts are rendered by the caller, as the replica tasks render them (lookup
    P(pro6000.inference.template_each#lookup)), since a filter cannot render templates.
options:
  _input:
    description: The replicas of the plan, each with its C(name).
    type: list
    elements: dict
    required: true
  renderings:
    description: For each replica, in the same order, its rendered environment, secrets and unit, in that order.
    type: list
    elements: list
    required: true
  paths:
    description: >-
      C(unit), C(env) and C(secrets), each a path with C(%s) standing for the replica's name, and
      C(group), the service group that reads the secrets.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Compare the replicas' files with what the role would write
  pro6000.inference.host_state:
    files: >-
      {{ layout.replicas | pro6000.inference.sglang_replica_files(
           query('pro6000.inference.template_each', 'sglang.env.j2', 'sglang.secrets.yaml.j2', 'sglang.service.j2',
                 items=layout.replicas, item_name='__sglang_service_replica'),
           {'unit': '/etc/systemd/system/%s.service', 'env': '/etc/sglang/%s.env',
            'secrets': '/etc/sglang/%s.secrets.yaml', 'group': 'sglang'}) }}
"""

RETURN = r"""
_value:
  description: Three entries per replica (environment, secrets, unit), replica by replica.
  type: list
  elements: dict
"""

import hashlib

from ansible.errors import AnsibleFilterError


def sglang_replica_files(replicas, renderings, paths):
    if len(renderings) != len(replicas) or any(len(texts) != 3 for texts in renderings):
        raise AnsibleFilterError("sglang_replica_files: wants an environment, secrets and unit text for each of the "
                                 "%d replica(s), got %d rendering(s)" % (len(replicas), len(renderings)))
    files = []
    for replica, (env, secrets, unit) in zip(replicas, renderings):
        name = replica["name"]
        files += [
            {"path": paths["env"] % name, "content": env, "owner": "root", "group": "root", "mode": "0600"},
            {"path": paths["secrets"] % name, "content": secrets, "owner": "root", "group": paths["group"], "mode": "0640"},
            {"path": paths["unit"] % name, "checksum": hashlib.sha1(unit.encode("utf-8", "surrogateescape")).hexdigest(),
             "owner": "root", "group": "root", "mode": "0644"},
        ]
    return files


class FilterModule:
    def filters(self):
        return {"sglang_replica_files": sglang_replica_files}

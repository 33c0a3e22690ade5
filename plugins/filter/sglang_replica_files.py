# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every SGLang replica's files from the one per-kind declaration of role sglang_service
(vars/main.yml, __sglang_service_replica_spec): the entries its comparison, its change, its
rollback and its retire all read, so that no step spells a replica's files out."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_replica_files
short_description: Each SGLang replica's files from one per-kind declaration
version_added: 0.1.0
description:
  - For each replica and each kind of O(spec), in the order of O(spec), one entry with the
    replica's C(path) (its name put in for C(%s)), C(template), C(owner), C(group), C(mode) and
    C(secret), an entry of O(pro6000.inference.host_state#module:files) of
    M(pro6000.inference.host_state), which the change step's M(ansible.builtin.template) loop also
    reads.
  - With O(item_name), each entry also gets C(template_vars), the replica under that name, so that
    host_state's action plugin renders each replica's templates as a task looping over the
    replicas with that C(loop_var) renders them.
  - With O(last_good_dir), each entry also gets its C(kind), C(kept), the path of the copy kept
    there once the replica passed its health gate, and C(kept_mode), that copy's mode (what
    keeping, rolling back and retiring read).
options:
  _input:
    description: The replicas of P(pro6000.inference.sglang_replica_plan#filter), or only their names (retiring needs no more).
    type: list
    elements: raw
    required: true
  spec:
    description:
      - Kind (C(unit), C(env), C(secrets)) to its declaration, C(path) with C(%s) standing for the
        replica's name, C(template), C(owner), C(group), C(mode), C(secret) and C(kept_mode).
    type: dict
    required: true
  item_name:
    description: The variable under which the templates see the replica.
    type: str
  last_good_dir:
    description: Where the copies that last passed the health gate are kept.
    type: str
"""

EXAMPLES = r"""
- name: Compare the replicas' files with what the role would write
  pro6000.inference.host_state:
    files: "{{ layout.replicas | pro6000.inference.sglang_replica_files(spec, item_name='__sglang_service_replica') }}"

- name: Remove the files of the retired replicas and their last good copies
  ansible.builtin.file:
    path: "{{ item }}"
    state: absent
  loop: "{{ retired | map(attribute='path') | list + retired | map(attribute='kept') | list }}"
  vars:
    retired: "{{ ['sglang-qwen'] | pro6000.inference.sglang_replica_files(spec, last_good_dir='/etc/sglang-qwen/last-good') }}"
"""

RETURN = r"""
_value:
  description: One entry per replica and kind, replica by replica, each replica's kinds in the order of O(spec).
  type: list
  elements: dict
"""

import posixpath

from ansible.errors import AnsibleFilterError

# What each kind declares for the comparison and the change, and for the copy kept of it.
DECLARED = ("template", "owner", "group", "mode", "secret")
KEPT = ("kept_mode",)


def sglang_replica_files(replicas, spec, item_name=None, last_good_dir=None):
    if not isinstance(spec, dict) or not spec:
        raise AnsibleFilterError("sglang_replica_files: spec must map each kind of file to its declaration")
    for kind, declared in spec.items():
        missing = [key for key in ("path",) + DECLARED + (KEPT if last_good_dir else ()) if key not in declared]
        if missing or "%s" not in declared["path"]:
            raise AnsibleFilterError("sglang_replica_files: spec.%s needs path (with %%s for the replica's name), %s; "
                                     "missing %s" % (kind, ", ".join(DECLARED + KEPT), ", ".join(missing) or "%s in path"))
    files = []
    for replica in replicas:
        name = replica if isinstance(replica, str) else replica["name"]
        for kind, declared in spec.items():
            path = declared["path"] % name
            entry = dict({"path": path}, **{key: declared[key] for key in DECLARED})
            if item_name:
                entry["template_vars"] = {item_name: replica}
            if last_good_dir:
                entry.update(kind=kind, kept=posixpath.join(last_good_dir, posixpath.basename(path)), kept_mode=declared["kept_mode"])
            files.append(entry)
    return files


class FilterModule:
    def filters(self):
        return {"sglang_replica_files": sglang_replica_files}

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: local_fact
short_description: Record a local fact file and load the host's local facts into the play
version_added: 0.1.0
description:
  - Writes O(facts) as JSON to C(<fact_path>/<name>.fact), creating O(fact_path) when it is
    missing, then reads every local fact file back the way M(ansible.builtin.setup) does, so that
    C(ansible_facts['ansible_local'][<name>]) holds what the host now records.
  - One module run instead of three (create the directory, copy the file, gather the local
    facts again). Each role of this collection records what it did this way for the roles that
    follow.
  - The file is replaced atomically and only when its content or mode differs.
options:
  name:
    description:
      - Name of the fact, the key under C(ansible_local) and the file name without C(.fact).
      - Letters, digits and underscores.
    type: str
    required: true
  facts:
    description: What to record, any JSON-serialisable mapping.
    type: dict
    required: true
  fact_path:
    description: Directory of the local fact files, as in M(ansible.builtin.setup).
    type: path
    default: /etc/ansible/facts.d
extends_documentation_fragment:
  - pro6000.inference.attributes
  - pro6000.inference.attributes.facts
attributes:
  check_mode:
    support: full
    details: Reports whether the file would change, writes nothing, and loads the facts the host records now.
  diff_mode:
    support: full
    details: Shows the old and the new content of the fact file.
  idempotent:
    support: full
    details: The same facts leave the file as it is.
notes:
  - The directory is created with mode C(0755), the file with mode C(0644). Facts are readable by
    every user of the host, so never record a secret.
  - Kept instead of M(ansible.builtin.copy) plus M(ansible.builtin.setup) with
    C(gather_subset=[local]) because those do the same in more module runs on the host. The copy
    action runs C(stat) and then C(copy) when the content differs, C(setup) runs after it, and a
    missing C(fact_path) needs M(ansible.builtin.file) first (two to four runs, against one).
author:
  - pro6000.inference developers (@pro6000)
"""

EXAMPLES = r"""
- name: Record the toolkit facts for later roles
  pro6000.inference.local_fact:
    name: cuda_toolkit
    facts:
      default_version: "13.1"
      cuda_home: /usr/local/cuda

- name: Use them right away
  ansible.builtin.debug:
    msg: "{{ ansible_facts['ansible_local'].cuda_toolkit.cuda_home }}"
"""

RETURN = r"""
path:
  description: The fact file.
  returned: always
  type: str
  sample: /etc/ansible/facts.d/cuda_toolkit.fact
ansible_facts:
  description: The local facts as M(ansible.builtin.setup) reads them after the write.
  returned: success
  type: complex
  contains:
    ansible_local:
      description: Each fact file of O(fact_path) by name.
      returned: success
      type: dict
      sample: {"cuda_toolkit": {"cuda_home": "/usr/local/cuda", "default_version": "13.1"}}
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.local import LocalFactCollector

from ansible_collections.pro6000.inference.plugins.module_utils._files import replace_file

DIRECTORY_MODE = 0o755
FILE_MODE = 0o644


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            facts=dict(type="dict", required=True),
            fact_path=dict(type="path", default="/etc/ansible/facts.d"),
        ),
        supports_check_mode=True,
    )
    name, fact_path = module.params["name"], module.params["fact_path"]
    if not re.match(r"^\w+$", name, re.ASCII):
        module.fail_json(msg="name %r must be letters, digits and underscores: it becomes "
                             "ansible_local.<name> and <name>.fact" % name)
    path = os.path.join(fact_path, name + ".fact")
    try:
        content = (json.dumps(module.params["facts"], indent=4, sort_keys=True,
                              separators=(",", ": ")) + "\n").encode("utf-8")
    except (TypeError, ValueError) as error:
        module.fail_json(msg="facts for %s cannot be written as JSON: %s" % (name, error), path=path)

    changed = False
    if not os.path.isdir(fact_path):
        changed = True
        if not module.check_mode:
            os.makedirs(fact_path)
            os.chmod(fact_path, DIRECTORY_MODE)
    else:
        changed = module.set_mode_if_different(fact_path, DIRECTORY_MODE, changed)

    before = _read(path)
    if before != content:
        changed = True
        if not module.check_mode:
            replace_file(path, content, FILE_MODE, module.atomic_move)
    if before is not None or not module.check_mode:
        # Content already right does not make the mode right.
        changed = module.set_mode_if_different(path, FILE_MODE, changed)

    result = dict(changed=changed, path=path,
                  ansible_facts={"ansible_local": LocalFactCollector().collect(module=module)["local"]})
    if module._diff and before != content:
        result["diff"] = dict(before_header=path, after_header=path,
                              before=(before or b"").decode("utf-8", "replace"),
                              after=content.decode("utf-8"))
    module.exit_json(**result)


if __name__ == "__main__":
    main()

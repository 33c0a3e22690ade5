# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The commit role sglang builds, from the wanted ref and what git ls-remote listed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_git_commit
short_description: The commit a git ref names, from the lines of C(git ls-remote)
version_added: "0.1.0"
description:
  - O(commit) when set; O(ref) itself when it is a full commit id; else the commit the ref
    names in the listing, an annotated tag peeled to its commit (C(^{})) first, then a tag,
    then a branch, then the ref as written (C(HEAD), C(refs/pull/1/head)).
  - An empty string when the listing does not hold the ref.
options:
  _input:
    description: C(stdout_lines) of C(git ls-remote -- REPO REF REF^{}) (C(commit<TAB>ref) lines).
    type: list
    elements: str
    required: true
  ref:
    description: C(sglang_git_ref).
    type: str
    required: true
  commit:
    description: C(sglang_git_commit); when set, it is the answer.
    type: str
    default: ""
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Choose the commit to build
  ansible.builtin.set_fact:
    commit: "{{ ls_remote.stdout_lines | pro6000.inference.sglang_git_commit(sglang_git_ref, sglang_git_commit) }}"
"""

RETURN = r"""
_value:
  description: A 40-character commit id, or an empty string.
  type: str
"""

import re

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def sglang_git_commit(lines, ref, commit=""):
    if commit:
        return commit
    if COMMIT_RE.match(ref):
        return ref
    listed = {}
    for line in lines:
        sha, _tab, name = line.partition("\t")
        listed[name] = sha
    # A tag's peeled entry (^{}) is its commit; the plain entry of an annotated tag is the tag object.
    for name in (ref + "^{}", "refs/tags/" + ref + "^{}", "refs/tags/" + ref, "refs/heads/" + ref, ref):
        if name in listed:
            return listed[name]
    return ""


class FilterModule:
    def filters(self):
        return {"sglang_git_commit": sglang_git_commit}

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role sglang's rules for what it builds: a pinned commit or an exact release, in the rules idiom
of every role (a moving ref would rebuild and restart the fleet whenever it moves)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_source_rules
short_description: The rules that pin what role sglang builds, as name, value, rule and why
version_added: "0.1.0"
description:
  - For C(sglang_source=git), C(sglang_git_ref) must be a 40-hex commit, or be pinned by
    C(sglang_git_commit), or be followed on purpose (C(sglang_git_ref_floating)); once the
    repository answered, the ref must exist there and resolve to C(sglang_git_commit).
  - For C(sglang_source=index), C(sglang_version) must be one exact release (C(0.5.23) or
    C(==0.5.23)); ranges, wildcards and C(latest) are refused.
  - Each as the mapping the roles pass to M(pro6000.inference.host_state)'s
    O(pro6000.inference.host_state#module:rules).
options:
  _input:
    description: C(sglang_source), V(git) or V(index).
    type: str
    required: true
  git_ref:
    description: C(sglang_git_ref).
    type: str
    required: true
  git_commit:
    description: C(sglang_git_commit), empty when unpinned.
    type: str
    required: true
  git_ref_floating:
    description: C(sglang_git_ref_floating).
    type: bool
    required: true
  version:
    description: C(sglang_version).
    type: str
    required: true
  ls_remote:
    description:
      - The registered result of C(git ls-remote -- REPO REF REF^{}) on the host; empty (or with a
        non-zero C(rc)) when the repository was not asked or could not answer (no git on the host
        yet), and then nothing is said about what the ref resolves to.
    type: dict
    default: {}
  repo:
    description: C(sglang_git_repo), for the messages.
    type: str
    default: ""
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Check what would be built before anything changes
  pro6000.inference.host_state:
    rules: >-
      {{ sglang_source | pro6000.inference.sglang_source_rules(sglang_git_ref, sglang_git_commit,
         sglang_git_ref_floating, sglang_version, ls_remote, sglang_git_repo) }}
"""

RETURN = r"""
_value:
  description: One mapping per rule, C(name), C(value), C(rule) (whether it holds) and C(why).
  type: list
  elements: dict
"""

import re

from ansible_collections.pro6000.inference.plugins.filter.sglang_git_commit import sglang_git_commit

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# One PEP 440 release, bare (the role installs sglang==VERSION) or as pip's exact pin.
EXACT_VERSION_RE = re.compile(r"^(==)?[0-9]+(\.[0-9]+)*((a|b|rc|\.post|\.dev)[0-9]+)*$")


def sglang_source_rules(source, git_ref, git_commit, git_ref_floating, version, ls_remote=None, repo=""):
    git = source == "git"
    ref_is_commit = bool(COMMIT_RE.match(git_ref))
    ls_remote = ls_remote or {}
    # The commit the ref names: itself, what the repository listed ("" when not listed), or unknown.
    resolved = None
    if ref_is_commit:
        resolved = git_ref
    elif ls_remote.get("rc") == 0:
        resolved = sglang_git_commit(ls_remote.get("stdout_lines") or [], git_ref)
    checks = [
        ("sglang_git_ref", git_ref, not git or ref_is_commit or bool(git_commit) or bool(git_ref_floating),
         "is not a commit and nothing pins it: set sglang_git_commit to the 40-hex commit it must resolve to "
         "(or sglang_git_ref to that commit), or set sglang_git_ref_floating: true to follow the ref, knowing that "
         "every run then asks the repository and a moved ref (a new push, a force-push) rebuilds and restarts "
         "every host"),
        ("sglang_git_ref", git_ref, not git or resolved != "", "does not exist in %s" % repo),
        ("sglang_git_commit", git_commit, not git or not git_commit or not resolved or resolved == git_commit,
         "is not what sglang_git_ref = %s resolves to in %s (%s): the ref moved since it was pinned. Pin %s once it "
         "is tested, or set sglang_git_ref to the commit to keep" % (git_ref, repo, resolved, resolved)),
        ("sglang_version", version, source != "index" or bool(EXACT_VERSION_RE.match(str(version))),
         "must be one exact release such as 0.5.23 or ==0.5.23: a range, a wildcard or latest would install "
         "whatever the index serves that day"),
    ]
    return [{"name": name, "value": value, "rule": bool(rule), "why": why} for name, value, rule, why in checks]


class FilterModule:
    def filters(self):
        return {"sglang_source_rules": sglang_source_rules}

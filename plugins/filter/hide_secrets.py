# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hides known secrets in text that goes into a message (a journal excerpt, a log)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: hide_secrets
short_description: Replace every known secret in a text by a placeholder
version_added: "0.2.0"
description:
  - Replaces each non-empty secret of O(secrets) in the input by O(placeholder), longest first so
    that a secret that contains another is hidden whole.
  - For text that the collection puts into a failure message, such as the journal excerpt of a
    server that failed its health gate (SGLang logs its arguments, the API key among them, at
    start). Only the exact strings are hidden; the chat bot masks their usual encodings itself.
options:
  _input:
    description: The text.
    type: str
    required: true
  secrets:
    description: The secrets to hide; empty strings are ignored.
    type: list
    elements: str
    required: true
  placeholder:
    description: What each secret becomes.
    type: str
    default: "(hidden)"
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Fail with a journal excerpt that carries no secret
  ansible.builtin.fail:
    msg: "{{ journal.stdout | pro6000.inference.hide_secrets([api_key, hub_token]) }}"
"""

RETURN = r"""
_value:
  description: The text with every secret replaced.
  type: str
"""


def hide_secrets(text, secrets, placeholder="(hidden)"):
    text = str(text)
    for secret in sorted({str(s) for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, placeholder)
    return text


class FilterModule:
    def filters(self):
        return {"hide_secrets": hide_secrets}

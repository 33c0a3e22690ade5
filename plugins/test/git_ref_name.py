# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a string is a revision (commit or git ref name) by the rule module model_stage applies, so that role
sglang refuses a bad sglang_git_ref before anything changes. Documented in git_ref_name.yml beside this
file (one file per test, so that ansible-doc and galaxy-importer find each one's documentation)."""

from __future__ import annotations

from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import check_revision, passes


def git_ref_name(value):
    return passes(check_revision, value)


class TestModule:
    def tests(self):
        return {"git_ref_name": git_ref_name}

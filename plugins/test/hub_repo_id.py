# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a string is a hub repository id by the rule module model_stage applies, so that role
model_weights refuses bad input before anything changes. Documented in hub_repo_id.yml beside this
file (one file per test, so that ansible-doc and galaxy-importer find each one's documentation)."""

from __future__ import annotations

from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import check_repo_id, passes


def hub_repo_id(value):
    return passes(check_repo_id, value)


class TestModule:
    def tests(self):
        return {"hub_repo_id": hub_repo_id}

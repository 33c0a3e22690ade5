# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the modules reach the model hub: one description for model_stage and model_lock."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  hub_endpoint:
    description:
      - Hub endpoint (an internal hub mirror), passed to the client as E(HF_ENDPOINT). Empty
        means the client's default.
    type: str
    default: ""
  hub_token:
    description:
      - Hub access token. Passed to the client through its environment only, never written to disk.
    type: str
    default: ""
  ca_file:
    description:
      - Extra CA bundle for HTTPS to the hub (and to the mirror, where the module reads one).
    type: path
"""

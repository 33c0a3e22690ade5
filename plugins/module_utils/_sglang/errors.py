# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The error of the SGLang client, which every other part raises (the ground floor).
"""

from __future__ import annotations


class SGLangError(Exception):
    """A request could not be completed (transport failure, timeout, bad URL)."""

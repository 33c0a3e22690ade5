# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The errors of the weights engine, which every other part raises (the ground floor).

Standard library only: this code runs on the managed host inside the model_stage module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


# A query string may carry a signature (signed CDN URLs: sig=, X-Amz-Signature=, Signature=).
URL_QUERY_RE = re.compile(r"((?:https?|ftp|file)://[^\s?#'\"<>]*)\?[^\s'\"<>]*")


class WeightsError(Exception):
    """A failure the module reports as is (the message names what and why)."""


class PermanentError(WeightsError):
    """A failure that another attempt cannot fix (HTTP 404, 403, a wrong digest): never retried."""


def mask_secrets(text):
    """Drop the query string of every URL in text: signed CDN URLs must not reach task output."""
    return URL_QUERY_RE.sub(r"\1?<query hidden>", text)

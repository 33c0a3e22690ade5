"""Percentiles of the benchmark's figures (module_utils/_sglang/figures.py)."""

import pytest


from ansible_collections.pro6000.inference.plugins.module_utils._sglang import figures as sglang_figures


def test_summarise_percentiles():
    summary = sglang_figures.summarise([5, 1, 3, 2, 4, None])
    assert summary["count"] == 5 and summary["min"] == 1 and summary["max"] == 5
    assert summary["p50"] == 3 and summary["p90"] == pytest.approx(4.6) and summary["mean"] == 3
    assert sglang_figures.summarise([]) is None

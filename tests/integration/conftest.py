"""The real parsers' interpreters, started once per session (tests/oracle/oracle.py), and the
shared test helpers importable as ``support`` (tests/support.py)."""
import pathlib
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "oracle"), str(TESTS)]
import oracle  # noqa: E402


@pytest.fixture(scope="session")
def sglang_releases():
    """oracle.Releases: one running interpreter per SGLang release, for every check of the session."""
    releases = oracle.Releases()
    yield releases
    releases.close()

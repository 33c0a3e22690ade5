"""The real parsers' interpreters, started once per session (tests/oracle/oracle.py)."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "oracle"))
import oracle  # noqa: E402


@pytest.fixture(scope="session")
def sglang_releases():
    """oracle.Releases: one running interpreter per SGLang release, for every check of the session."""
    releases = oracle.Releases()
    yield releases
    releases.close()

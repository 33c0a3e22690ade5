"""Make the checkout importable as ansible_collections.pro6000.inference for unit tests, and
the shared test helpers as ``support`` (tests/support.py)."""
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
for path in (REPO_ROOT / "collections", REPO_ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

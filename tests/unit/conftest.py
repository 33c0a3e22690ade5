"""Make the checkout importable as ansible_collections.pro6000.inference for unit tests."""
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
COLLECTIONS = REPO_ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

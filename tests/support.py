"""Helpers that the unit tests, the benchmarks and the doubles' own scripts share.

Importable as ``support`` once the repository's tests/ directory is on sys.path
(tests/unit/conftest.py, tests/benchmarks/_double.py and chatops/tests/chatops_support.py put it
there).
"""
import importlib.util
import socket


def free_port():
    """A loopback TCP port that nothing listens on: free to bind, refused to connect to."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def load_module(name, path):
    """Import the script at ``path`` (a fixture's script, not part of a package) as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

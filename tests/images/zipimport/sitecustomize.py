"""Loads the zip-import bytecode cache beside it into every Python started with this directory on
PYTHONPATH: the controller's side of the test stages, where each module run on localhost
compiled its module_utils from the AnsiballZ zip again (a `stat` task on localhost cost the
machine 0.42 CPU-s without the cache, 0.33 with it; tests/benchmarks/test-suite-time.md, lever 7).
It shadows a sitecustomize of the interpreter's own (Ubuntu's reports crashes to apport), which
the tests do not need.
"""
import zipimport_bytecode_cache  # noqa: F401  pylint: disable=unused-import

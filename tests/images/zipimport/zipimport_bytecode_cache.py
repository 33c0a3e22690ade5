"""A bytecode cache for code imported from zip files, for the Pythons the tests run modules with.

Ansible runs every module as a fresh interpreter that imports its module_utils from the
AnsiballZ zip it was sent, and zipimport compiles each source on each import (twice: once more
for the module's file name, zipimporter.get_filename), never writing bytecode. A test container
runs thousands of modules: a stat module cost 0.21 CPU-s there, 0.13 with this cache, and a
playbook of 60 stat and copy tasks 34 CPU-s of the machine's against 26 (issue #42). It keeps
each compiled source under /tmp (a tmpfs per container), keyed by the interpreter's version and
the source's hash, so the same code runs, named by the same file names in tracebacks; only the
compiling is saved. A real host compiles every time; nothing the roles do differs by it.

Loaded at every interpreter's start: in the test images by a .pth file beside it
(tests/images/build.sh); on the controller, for the modules that the pytest stage and the
scenarios run on localhost, by sitecustomize.py in this directory, which PYTHONPATH names there
(tests/scripts/run-all.sh, .config/molecule/config.yml). Anything unexpected means no cache,
never a failed import.
"""

import marshal
import os
import stat
import sys
import zipimport

_compile_uncached = getattr(zipimport, "_compile_source", None)
# Bytecode is an interpreter version's own (its cache tag, as in __pycache__'s file names).
_cache_dir = f"/tmp/.zipimport-bytecode-{os.getuid()}-{sys.implementation.cache_tag}"


# Whether the cache can be used: found once, at this interpreter's first compile from a zip (most
# interpreters never compile from one), instead of on each of a module run's hundred compiles.
_cache_usable = None


def _cache_is_ours():
    """The cache is run as code: only a directory of this user that nobody else can write."""
    global _cache_usable  # pylint: disable=global-statement
    if _cache_usable is None:
        try:
            os.makedirs(_cache_dir, mode=0o700, exist_ok=True)
            found = os.lstat(_cache_dir)
            _cache_usable = stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o077
        except OSError:
            _cache_usable = False
    return _cache_usable


def _named(code, filename):
    consts = tuple(_named(const, filename) if isinstance(const, type(code)) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _cached(entry, pathname):
    try:
        with open(entry, "rb") as cached:
            return _named(marshal.loads(cached.read()), pathname)
    except (OSError, ValueError, EOFError, TypeError, AttributeError):
        return None


def _keep(entry, code):
    partial = f"{entry}.{os.getpid()}"
    try:
        with open(partial, "wb") as fresh:
            fresh.write(marshal.dumps(code))
        os.replace(partial, entry)
    except OSError:
        pass


def _compile_source(pathname, source):
    from hashlib import sha256

    if not _cache_is_ours():
        return _compile_uncached(pathname, source)
    entry = os.path.join(_cache_dir, sha256(source).hexdigest())
    code = _cached(entry, pathname)
    if code is None:
        code = _compile_uncached(pathname, source)
        _keep(entry, code)
    return code


if _compile_uncached is not None:
    zipimport._compile_source = _compile_source

"""Packs files that a prepare playbook puts into a container as one tar archive on the controller,
so that one unarchive task moves them: a directory copy costs a round trip per file (the
figures are in tests/benchmarks/test-suite-time.md).

    python tests/scripts/pack.py CACHE NAME SOURCE=DEST...

Each SOURCE (a file or a directory, with everything under it) goes to DEST, an absolute path in
the container; the archive is unpacked at "/". It holds no entry above a DEST, so unpacking never
touches the modes of /usr or /opt. Python's caches (__pycache__, *.pyc) are left out: the
controller's interpreter wrote them, they are not inputs.

The archive is CACHE/NAME-<hash>.tar, the hash taken over every member's path, mode and content
and over this script: it is built only when one of them changed, under a private name renamed
into place, so that runs side by side never read a half-written archive. A new one removes the
archives of the same NAME that no run packed for an hour (a run needs its archive only from its
pack task to its unpack task), so that the cache does not grow with every change of a fixture.
Prints
{"path": ..., "built": true|false} as JSON.
"""
import hashlib
import json
import os
import pathlib
import re
import sys
import tarfile
import tempfile
import time

LEFT_OUT = ("__pycache__",)
LEFT_OUT_SUFFIXES = (".pyc",)
STALE_AFTER_S = 3600


def members(source, dest):
    """(path on the controller, name in the archive) of SOURCE and everything under it, sorted."""
    source = pathlib.Path(source)
    if not source.exists():
        raise SystemExit("pack.py: %s does not exist" % source)
    if not dest.startswith("/"):
        raise SystemExit("pack.py: %s is not an absolute path in the container" % dest)
    top = dest.strip("/")
    found = [(source, top)]
    if source.is_dir():
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(source)
            if any(part in LEFT_OUT for part in relative.parts) or path.suffix in LEFT_OUT_SUFFIXES:
                continue
            found.append((path, "%s/%s" % (top, relative.as_posix())))
    return found


def content_hash(entries):
    digest = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    for path, name in entries:
        digest.update(("%s %o\n" % (name, path.stat().st_mode)).encode())
        if path.is_file():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def as_root(info):
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def pack(cache, name, pairs):
    entries = [entry for source, dest in pairs for entry in members(source, dest)]
    cache = pathlib.Path(cache)
    archive = cache / ("%s-%s.tar" % (name, content_hash(entries)))
    if archive.exists():
        # Its age is the time since a run last used it (see remove_stale).
        os.utime(archive)
        return archive, False
    cache.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=archive.name + ".partial.", dir=cache)
    try:
        with os.fdopen(handle, "wb") as stream, tarfile.open(fileobj=stream, mode="w") as tar:
            for path, member in entries:
                tar.add(path, arcname=member, recursive=False, filter=as_root)
        os.chmod(partial, 0o644)
        os.replace(partial, archive)
    except BaseException:
        os.unlink(partial)
        raise
    remove_stale(cache, name, archive)
    return archive, True


def remove_stale(cache, name, kept):
    same_name = re.compile(r"%s-[0-9a-f]{16}\.tar$" % re.escape(name))
    for other in cache.iterdir():
        if other != kept and same_name.match(other.name):
            try:
                if other.stat().st_mtime < time.time() - STALE_AFTER_S:
                    other.unlink()
            except FileNotFoundError:  # removed by a run beside this one
                pass


def main(argv):
    if len(argv) < 3 or not all("=" in pair for pair in argv[2:]):
        raise SystemExit(__doc__.split("\n\n")[1])
    archive, built = pack(argv[0], argv[1], [pair.split("=", 1) for pair in argv[2:]])
    print(json.dumps({"path": str(archive), "built": built}))


if __name__ == "__main__":
    main(sys.argv[1:])

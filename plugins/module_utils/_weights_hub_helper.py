# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hub side of model_stage: runs in the virtual environment that holds huggingface_hub.

model_stage imports nothing from here (huggingface_hub is not in its interpreter); it reads
this file's source and runs it with the hub environment's interpreter (module_utils/_weights/hub.py).
One JSON request on stdin, one JSON answer on stdout:

  resolve  the commit a branch or tag points at
  list     the files of a commit (after allow/ignore patterns) with sizes and digests
  fetch    download files into <local_dir>/<path>.part, resuming what earlier runs left there
           (HTTP Range through the client's own session, headers and error mapping), hashing
           while writing; answers each file's digest and the bytes it read
  lock     a site's lock file of a revision (module model_lock)

The process dies with the module (PR_SET_PDEATHSIG) and holds the module's lock through an
inherited descriptor, so no download outlives the run that asked for it.

Run by hand, it writes a site's lock file (see roles/model_weights/README.md):

  python3 _weights_hub_helper.py lock REPO_ID COMMIT [--dir TRUSTED_COPY] [--var NAME] [--include PATTERN]...
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import ctypes
import fnmatch
import hashlib
import json
import os
import re
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

CHUNK = 8 * 1024 * 1024
PR_SET_PDEATHSIG = 1  # linux/prctl.h
URL_QUERY_RE = re.compile(r"((?:https?|ftp|file)://[^\s?#'\"<>]*)\?[^\s'\"<>]*")


class Permanent(Exception):
    """A failure that another attempt cannot fix."""


def mask(text):
    """Signed CDN URLs (sig=, X-Amz-Signature=) must not reach the module's output."""
    return URL_QUERY_RE.sub(r"\1?<query hidden>", text)


def describe(exc):
    return mask("%s: %s" % (type(exc).__name__, exc))


def die_with_parent(parent_pid):
    """Ask the kernel for SIGKILL when the module's thread that started us ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the module ended before prctl took effect
        os._exit(1)


def configure_client(timeout):
    """Every request of the client stalls at most timeout seconds (its sessions default to none)."""
    from huggingface_hub.utils import _http

    def client_factory():
        client = _http.default_client_factory()
        client.timeout = timeout
        return client

    _http.set_client_factory(client_factory)


def new_hasher(algo, size):
    if algo == "sha256":
        return hashlib.sha256()
    hasher = hashlib.sha1()  # a git blob id: sha1 of "blob <size>\0" and the content
    hasher.update(("blob %d\0" % size).encode("ascii"))
    return hasher


def resolve(request):
    from huggingface_hub import HfApi
    info = HfApi().model_info(request["repo_id"], revision=request["revision"], timeout=request.get("timeout"))
    return {"commit": info.sha}


def list_files(request):
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    commit = request["revision"] if request.get("is_commit") else resolve(request)["commit"]
    entries = [item for item in HfApi().list_repo_tree(request["repo_id"], revision=commit, recursive=True)
               if isinstance(item, RepoFile)]
    wanted = set(filter_repo_objects([item.path for item in entries],
                                     allow_patterns=request.get("allow_patterns") or None,
                                     ignore_patterns=request.get("ignore_patterns") or None))
    files = []
    for item in entries:
        if item.path not in wanted:
            continue
        if item.lfs is not None:
            files.append({"path": item.path, "size": item.lfs.size, "sha256": item.lfs.sha256})
        else:
            files.append({"path": item.path, "size": item.size, "git_sha1": item.blob_id})
    return {"commit": commit, "files": files}


class HashingWriter:
    """The partial file of one download: appends, checks every write, hashes what it writes,
    and starts over when the server ignored Range."""

    def __init__(self, fd, entry):
        self.fd = fd
        self.entry = entry
        self.position = os.fstat(fd).st_size
        self.hasher = None
        self.rehash(self.position)
        self.read = 0

    def rehash(self, upto):
        self.hasher = new_hasher(self.entry["algo"], self.entry["size"])
        offset = 0
        while offset < upto:
            block = os.pread(self.fd, min(CHUNK, upto - offset), offset)
            if not block:
                raise OSError("the partial file shrank while it was read")
            self.hasher.update(block)
            offset += len(block)

    def write(self, data):
        view = memoryview(data)
        self.hasher.update(view)
        while view:
            written = os.pwrite(self.fd, view, self.position)
            if written <= 0:
                raise OSError("short write at byte %d" % self.position)
            view = view[written:]
            self.position += written
            self.read += written
        return len(data)

    def truncate(self, size):
        os.ftruncate(self.fd, size)
        self.rehash(size)
        self.position = size


def get_range(session, url, headers, writer, entry):
    """One GET of what writer lacks, through the client's session; every byte received is
    written and hashed at once, so that a cut or a kill loses nothing that arrived."""
    from huggingface_hub.utils import hf_raise_for_status

    headers = dict(headers, **{"Accept-Encoding": "identity"})
    if writer.position:
        headers["Range"] = "bytes=%d-" % writer.position
    with session.stream("GET", url, headers=headers) as response:
        hf_raise_for_status(response)
        if writer.position and response.status_code == 200:
            writer.truncate(0)  # the server ignored Range: the whole file comes again
        elif response.status_code == 206:
            match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != writer.position:
                raise Permanent("%s answered a range that was not asked for: %s"
                                % (entry["path"], response.headers.get("Content-Range")))
        for chunk in response.iter_bytes():
            writer.write(chunk[:entry["size"] - writer.position])
            if writer.position >= entry["size"]:
                break
    if writer.position < entry["size"]:
        raise IOError("connection ended at byte %d of %d" % (writer.position, entry["size"]))


def download(request, entry, writer):
    """Fill writer with one file. The hub answers where it lies (HEAD /resolve, followed only on
    the hub: get_hf_file_metadata), then the file comes with Range from what is on disk. retries
    counts attempts in a row without progress; a 4xx other than 408/429 is never retried."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers, get_session

    url = hf_hub_url(request["repo_id"], entry["path"], revision=request["commit"])
    failures = 0
    error = None
    while writer.position < entry["size"]:
        before = writer.position
        try:
            metadata = get_hf_file_metadata(url, timeout=request["timeout"])
            if metadata.commit_hash != request["commit"]:
                raise Permanent("%s is served from commit %s, not %s"
                                % (entry["path"], metadata.commit_hash, request["commit"]))
            if metadata.size is not None and metadata.size != entry["size"]:
                raise Permanent("%s has %d bytes on the hub, %d expected"
                                % (entry["path"], metadata.size, entry["size"]))
            headers = build_hf_headers()
            # As the client does: the token goes to the hub, never to a CDN on another host.
            if urlsplit(metadata.location).netloc != urlsplit(url).netloc:
                headers.pop("authorization", None)
            get_range(get_session(), metadata.location, headers, writer, entry)
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if 400 <= status < 500 and status not in (408, 429):
                raise Permanent(describe(exc))
            error = exc
        except Permanent:
            raise
        except Exception as exc:  # noqa: BLE001  connection drops and timeouts are retried
            error = exc
        else:
            continue
        failures = 1 if writer.position > before else failures + 1
        if failures > request["retries"]:
            raise RuntimeError("giving up after %d attempt(s) without progress at byte %d of %d: %s"
                               % (failures, writer.position, entry["size"], describe(error)))
        time.sleep(min(2 ** failures, 30) * 0.25)


def fetch_one(request, entry):
    """One file into <local_dir>/<path>.part; what was read stays there for the next run."""
    part = os.path.join(request["local_dir"], entry["path"]) + ".part"
    if not os.path.isdir(os.path.dirname(part)):
        os.makedirs(os.path.dirname(part))
    # The module made the directories (never links); a link planted at the part is not followed.
    if os.path.islink(part):
        os.unlink(part)
    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    writer = None
    try:
        if os.fstat(fd).st_size > entry["size"]:
            os.ftruncate(fd, 0)
        writer = HashingWriter(fd, entry)
        download(request, entry, writer)
        os.fsync(fd)
        return {"digest": writer.hasher.hexdigest(), "size": os.fstat(fd).st_size, "read": writer.read}
    except Exception as exc:  # noqa: BLE001  reported per file
        return {"error": mask(str(exc)) if isinstance(exc, Permanent) else describe(exc),
                "permanent": isinstance(exc, Permanent), "read": writer.read if writer else 0}
    finally:
        os.close(fd)


def fetch_files(request):
    files = request["files"]
    with ThreadPoolExecutor(max_workers=max(1, min(request.get("workers", 8), len(files) or 1))) as pool:
        answers = list(pool.map(lambda entry: fetch_one(request, entry), files))
    return {"files": dict((entry["path"], answer) for entry, answer in zip(files, answers))}


def serve_request():
    request = json.load(sys.stdin)
    die_with_parent(request["parent_pid"])
    configure_client(request.get("timeout"))
    command = {"resolve": resolve, "list": list_files, "fetch": fetch_files, "lock": build_lock}[request["command"]]
    try:
        answer = command(request)
    except Exception as exc:  # noqa: BLE001  reported to the module, which names the command
        answer = {"error": describe(exc)}
    json.dump(answer, sys.stdout)


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def pinned(path, include, exclude):
    """Whether a lock pins path: it matches an include pattern (when there are any) and no exclude."""
    return ((not include or any(fnmatch.fnmatch(path, p) for p in include))
            and not any(fnmatch.fnmatch(path, p) for p in exclude))


def build_lock(request):
    """A lock file: every file's path, size and sha256, the repository and the commit, read from
    a trusted copy (request's dir, where revision must be the commit) or from the hub the client
    is configured for (revision, a branch or tag, resolved to its commit first)."""
    include, exclude = request.get("include") or [], request.get("exclude") or []
    commit = request["revision"]
    files = []
    if request.get("dir"):
        for base, dirs, names in os.walk(request["dir"]):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(base, name), request["dir"])
                if rel != request.get("manifest_name", "manifest.json") and not name.startswith(".") \
                        and pinned(rel, include, exclude):
                    full = os.path.join(base, name)
                    files.append({"path": rel, "size": os.path.getsize(full), "sha256": sha256_of(full)})
    else:
        from huggingface_hub import hf_hub_download
        listing = list_files({"repo_id": request["repo_id"], "revision": commit,
                              "is_commit": bool(re.match(r"^[0-9a-f]{40}$", commit)), "timeout": request.get("timeout")})
        commit = listing["commit"]
        with tempfile.TemporaryDirectory() as scratch:
            for entry in listing["files"]:
                if not pinned(entry["path"], include, exclude):
                    continue
                if "sha256" not in entry:  # a small file: the hub gives its git blob id only
                    local = hf_hub_download(request["repo_id"], entry["path"], revision=commit, local_dir=scratch)
                    entry = {"path": entry["path"], "size": os.path.getsize(local), "sha256": sha256_of(local)}
                files.append(entry)
    return {"lock": {"repo_id": request["repo_id"], "commit": commit, "files": sorted(files, key=lambda f: f["path"])}}


def lock_text(lock, var=None):
    """A lock file's text: the lock, or {var: lock} for a group_vars file that sets variable var."""
    return json.dumps({var: lock} if var else lock, indent=1, sort_keys=True) + "\n"


def write_lock(argv):
    """Print a lock file (build_lock) for a commit."""
    parser = argparse.ArgumentParser(prog="_weights_hub_helper.py lock", description=build_lock.__doc__)
    parser.add_argument("repo_id")
    parser.add_argument("commit")
    parser.add_argument("--dir", help="a trusted copy of the commit's files (hashed here)")
    parser.add_argument("--include", action="append", default=[], help="shell pattern of files to pin (repeat)")
    parser.add_argument("--exclude", action="append", default=[], help="shell pattern of files to leave out")
    parser.add_argument("--manifest-name", default="manifest.json", help="file of --dir that is not pinned")
    parser.add_argument("--var", help="print {VAR: lock}: a group_vars file that sets variable VAR")
    args = parser.parse_args(argv)
    if not re.match(r"^[0-9a-f]{40}$", args.commit):
        parser.error("COMMIT must be a 40-hex commit")
    answer = build_lock({"repo_id": args.repo_id, "revision": args.commit, "dir": args.dir, "include": args.include,
                         "exclude": args.exclude, "manifest_name": args.manifest_name})
    sys.stdout.write(lock_text(answer["lock"], args.var))


if __name__ == "__main__":
    if sys.argv[1:2] == ["lock"]:
        write_lock(sys.argv[2:])
    else:
        serve_request()

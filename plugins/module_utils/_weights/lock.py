# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a copy must hold: manifests (a source's list of files with sizes and digests) and the
site's lock files, which pin the digests a source's listing is checked against.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import COMMIT_RE, utf8
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import PermanentError, WeightsError
from ansible_collections.pro6000.inference.plugins.module_utils._weights.tree import JOURNAL_NAME, MARKER_NAME, STAGING_PREFIX


SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")


def check_relpath(path):
    """Return a repository-relative path, refusing anything that could leave the tree."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or not utf8(path) \
            or not path.isprintable():
        raise WeightsError("unsafe file path in manifest: %r" % (path,))
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise WeightsError("unsafe file path in manifest: %r" % (path,))
    if parts[0] in (MARKER_NAME, JOURNAL_NAME) or parts[0].startswith(STAGING_PREFIX) or path.endswith(".part"):
        # <file>.part is where a file is written before it is checked: a listed name must not be one.
        raise WeightsError("reserved file name in manifest: %r" % (path,))
    return path


def normalize_manifest(entries):
    """Turn a list of {path, size, sha256 | git_sha1} into {path: {size, algo, digest}}."""
    if not isinstance(entries, list) or not entries:
        raise WeightsError("the manifest lists no files")
    files = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise WeightsError("manifest entry is not an object: %r" % (entry,))
        path = check_relpath(entry.get("path"))
        if path in files:
            raise WeightsError("duplicate path in manifest: %s" % path)
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise WeightsError("manifest entry %s has no valid size" % path)
        sha256 = (entry.get("sha256") or "").lower()
        git_sha1 = (entry.get("git_sha1") or "").lower()
        if SHA256_RE.match(sha256):
            files[path] = {"size": size, "algo": "sha256", "digest": sha256}
        elif SHA1_RE.match(git_sha1):
            files[path] = {"size": size, "algo": "git_sha1", "digest": git_sha1}
        else:
            raise WeightsError("manifest entry %s has neither a sha256 nor a git blob sha1" % path)
    for path in files:
        for parent in parents_of(path):
            if parent in files:
                raise WeightsError("manifest lists %s both as a file and as a directory" % parent)
    return files


def parents_of(path):
    """The directories of a relative path, outermost first: a/b/c -> a, a/b."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]


def parse_manifest_document(text, origin, repo_id=None, revision=None):
    """Parse a manifest (JSON object with a "files" list) read from origin; the repo_id and
    revision it names, when it names them, must be the ones asked for."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise WeightsError("manifest %s is not valid JSON: %s" % (origin, exc))
    if not isinstance(document, dict) or "files" not in document:
        raise WeightsError("manifest %s has no \"files\" list" % origin)
    for key, wanted in (("repo_id", repo_id), ("revision", revision)):
        if wanted is not None and document.get(key, wanted) != wanted:
            raise PermanentError("manifest %s describes %s %r, not %r" % (origin, key, document[key], wanted))
    return normalize_manifest(document["files"])


def lock_files(lock, repo_id, revision):
    """{path: entry} of a site's lock file (repo_id, commit, files with path, size, sha256).

    The lock must be for this repository and, when revision is a commit, for that commit."""
    if not isinstance(lock, dict) or not isinstance(lock.get("files"), list):
        raise WeightsError("lock: not a lock file (an object with repo_id, commit and files)")
    if repo_id is not None and lock.get("repo_id") != repo_id:
        raise WeightsError("lock: the lock file is for repository %r, not %r" % (lock.get("repo_id"), repo_id))
    commit = lock.get("commit")
    if not isinstance(commit, str) or not COMMIT_RE.match(commit):
        raise WeightsError("lock: commit %r is not a 40-hex commit" % (commit,))
    if COMMIT_RE.match(revision) and commit != revision:
        raise WeightsError("lock: the lock file pins commit %s, the revision asked for is %s" % (commit, revision))
    if any(not SHA256_RE.match(str(entry.get("sha256", ""))) for entry in lock["files"] if isinstance(entry, dict)):
        raise WeightsError("lock: every file needs a sha256")
    return commit, normalize_manifest(lock["files"])


def check_against_lock(offered, locked, origin):
    """Fail, naming each file, where what the source offers differs from the site's lock.

    offered: {path: entry} from the source's listing or manifest (sha256 or git blob id)."""
    problems = []
    for path in sorted(set(offered) | set(locked)):
        have, want = offered.get(path), locked.get(path)
        if want is None:
            problems.append("%s is offered but not in the lock file" % path)
        elif have is None:
            problems.append("%s is in the lock file but not offered" % path)
        elif have["size"] != want["size"]:
            problems.append("%s: size %d, the lock file says %d" % (path, have["size"], want["size"]))
        elif have["algo"] == "sha256" and have["digest"] != want["digest"]:
            problems.append("%s: sha256 %s, the lock file says %s" % (path, have["digest"], want["digest"]))
    if problems:
        raise PermanentError("%s differs from the lock file: %s" % (origin, "; ".join(problems)))


def manifest_bytes(files):
    return sum(entry["size"] for entry in files.values())

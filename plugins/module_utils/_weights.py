# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staging of model weight trees: manifests, digests, resumable transfers, markers.

Standard library only: this code runs on the managed host inside the model_stage module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import re
import shutil
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import HTTPSHandler, ProxyHandler, Request, build_opener

MARKER_NAME = ".model_weights.json"
JOURNAL_NAME = ".model_weights.staging.json"
# huggingface_hub keeps its resume metadata under <local_dir>/.cache/huggingface.
HUB_LOCAL_CACHE = ".cache"
STAGING_PREFIX = ".staging-"
CHUNK = 8 * 1024 * 1024
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")


class WeightsError(Exception):
    """A failure the module reports as is (the message names what and why)."""


# --------------------------------------------------------------------------- manifests

def check_relpath(path):
    """Return a repository-relative path, refusing anything that could leave the tree."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        raise WeightsError("unsafe file path in manifest: %r" % (path,))
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise WeightsError("unsafe file path in manifest: %r" % (path,))
    if parts[0] in (MARKER_NAME, JOURNAL_NAME) or parts[0].startswith(STAGING_PREFIX):
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
    return files


def parse_manifest_document(text, origin):
    """Parse a mirror manifest (JSON object with a "files" list) fetched from origin."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise WeightsError("manifest %s is not valid JSON: %s" % (origin, exc))
    if not isinstance(document, dict) or "files" not in document:
        raise WeightsError("manifest %s has no \"files\" list" % origin)
    return normalize_manifest(document["files"])


def manifest_bytes(files):
    return sum(entry["size"] for entry in files.values())


# --------------------------------------------------------------------------- digests

def new_hasher(algo, size):
    if algo == "sha256":
        return hashlib.sha256()
    if algo == "git_sha1":
        # A git blob id is the sha1 of "blob <size>\0" followed by the content.
        hasher = hashlib.sha1()
        hasher.update(("blob %d\0" % size).encode("ascii"))
        return hasher
    raise WeightsError("unknown digest algorithm %s" % algo)


def _hash_stream(stream, hasher, limit=None):
    """Feed hasher from stream (up to limit bytes); hashlib releases the GIL on big buffers."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    done = 0
    while limit is None or done < limit:
        want = CHUNK if limit is None else min(CHUNK, limit - done)
        got = stream.readinto(view[:want])
        if not got:
            break
        hasher.update(view[:got])
        done += got
    return done


def file_digest(path, algo):
    size = os.path.getsize(path)
    hasher = new_hasher(algo, size)
    with open(path, "rb", buffering=0) as stream:
        _hash_stream(stream, hasher)
    return hasher.hexdigest()


def parallel_map(func, items, workers):
    """Run func over items on a thread pool; return {item: result or exception}."""
    results = {}
    items = list(items)
    if not items:
        return results
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        futures = dict((item, pool.submit(func, item)) for item in items)
        for item, future in futures.items():
            try:
                results[item] = future.result()
            except Exception as exc:  # noqa: BLE001  (reported per file by the caller)
                results[item] = exc
    return results


def verify_files(root, files, paths, workers):
    """Hash paths under root in parallel; return the sorted list of paths that do not match."""
    def check(path):
        full = os.path.join(root, path)
        entry = files[path]
        if os.path.getsize(full) != entry["size"]:
            return False
        return file_digest(full, entry["algo"]) == entry["digest"]

    results = parallel_map(check, paths, workers)
    return sorted(path for path, ok in results.items() if ok is not True)


# --------------------------------------------------------------------------- transfers

class Source:
    """Opens one manifest file at a byte offset; returns (stream, offset the stream starts at)."""

    def open_at(self, path, offset):
        raise NotImplementedError

    def describe(self, path):
        raise NotImplementedError


class PathSource(Source):
    def __init__(self, root):
        self.root = root

    def open_at(self, path, offset):
        stream = open(os.path.join(self.root, path), "rb", buffering=0)
        stream.seek(offset)
        return stream, offset

    def describe(self, path):
        return os.path.join(self.root, path)


def url_opener(ca_file=None):
    """An opener that honours the proxy environment and an optional extra CA bundle."""
    context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    return build_opener(ProxyHandler(), HTTPSHandler(context=context))


class HttpSource(Source):
    def __init__(self, base_url, timeout=60, ca_file=None, headers=None):
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout = timeout
        self.opener = url_opener(ca_file)
        self.headers = dict(headers or {})

    def url(self, path):
        return self.base_url + quote(path, safe="/")

    def describe(self, path):
        return self.url(path)

    def get(self, path, offset=0):
        headers = dict(self.headers)
        headers["Accept-Encoding"] = "identity"
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        try:
            return self.opener.open(Request(self.url(path), headers=headers), timeout=self.timeout)
        except HTTPError as exc:
            raise WeightsError("GET %s answered HTTP %s %s" % (self.url(path), exc.code, exc.reason))
        except URLError as exc:
            raise WeightsError("GET %s failed: %s" % (self.url(path), exc.reason))

    def open_at(self, path, offset):
        response = self.get(path, offset)
        if offset and response.status == 206:
            content_range = response.headers.get("Content-Range", "")
            match = re.match(r"bytes (\d+)-", content_range)
            if not match or int(match.group(1)) != offset:
                response.close()
                raise WeightsError("%s answered a range that was not asked for: %s" % (self.url(path), content_range))
            return response, offset
        # 200: the server ignored Range (or there was nothing to resume): start again at 0.
        return response, 0

    def read_text(self, path):
        response = self.get(path)
        try:
            return response.read().decode("utf-8")
        finally:
            response.close()


def transfer(source, path, part_path, entry, retries, on_bytes):
    """Fetch one file into part_path, resuming what is there, hashing while writing.

    Returns the number of bytes read from the source. Raises WeightsError when the file cannot
    be completed or its digest does not match (the partial file is then removed so that the
    next attempt starts clean).
    """
    size = entry["size"]
    attempt = 0
    transferred = 0
    while True:
        have = os.path.getsize(part_path) if os.path.exists(part_path) else 0
        if have > size:
            os.unlink(part_path)
            have = 0
        hasher = new_hasher(entry["algo"], size)
        try:
            with open(part_path, "ab+", buffering=0) as out:
                out.seek(0)
                if have:
                    _hash_stream(out, hasher, have)
                stream, start = source.open_at(path, have) if have < size else (None, have)
                try:
                    if stream is not None and start != have:
                        out.truncate(start)
                        hasher = new_hasher(entry["algo"], size)
                        have = start
                    out.seek(have)
                    buf = bytearray(CHUNK)
                    view = memoryview(buf)
                    while stream is not None and have < size:
                        got = stream.readinto(view[:min(CHUNK, size - have)])
                        if not got:
                            break
                        hasher.update(view[:got])
                        out.write(view[:got])
                        have += got
                        transferred += got
                        on_bytes(got)
                finally:
                    if stream is not None:
                        stream.close()
                if have == size:
                    os.fsync(out.fileno())
        except Exception as exc:  # noqa: BLE001
            # A dropped connection surfaces as OSError or http.client.HTTPException (IncompleteRead);
            # every failure is retried from what is already on disk.
            error = exc
        else:
            error = None
            if have == size:
                digest = hasher.hexdigest()
                if digest != entry["digest"]:
                    os.unlink(part_path)
                    raise WeightsError(
                        "%s: %s %s does not match the expected %s" % (path, entry["algo"], digest, entry["digest"]))
                return transferred
            error = WeightsError("%s: connection ended at byte %d of %d" % (source.describe(path), have, size))
        attempt += 1
        if attempt > retries:
            raise WeightsError("%s: giving up after %d attempt(s): %s" % (source.describe(path), attempt, error))
        time.sleep(min(2 ** attempt, 30) * 0.25)


# --------------------------------------------------------------------------- tree state

def read_json(path):
    try:
        with open(path) as stream:
            return json.load(stream)
    except (IOError, OSError, ValueError):
        return None


def write_json_atomic(path, document, mode=0o644):
    tmp = path + ".tmp"
    with open(tmp, "w") as stream:
        json.dump(document, stream, indent=1, sort_keys=True)
        stream.write("\n")
        stream.flush()
        os.fsync(stream.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def file_state(path):
    stat = os.stat(path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class Journal:
    """Files already verified in a staging directory, so that a resumed run skips them."""

    def __init__(self, staging):
        self.path = os.path.join(staging, JOURNAL_NAME)
        self.lock = threading.Lock()
        document = read_json(self.path)
        self.entries = document.get("files", {}) if isinstance(document, dict) else {}

    def trusted(self, staging, path, entry):
        recorded = self.entries.get(path)
        full = os.path.join(staging, path)
        if not recorded or not os.path.isfile(full):
            return False
        return (recorded.get("digest") == entry["digest"] and file_state(full) == {
            "size": recorded.get("size"), "mtime_ns": recorded.get("mtime_ns")})

    def record(self, staging, path, entry):
        state = file_state(os.path.join(staging, path))
        with self.lock:
            self.entries[path] = dict(state, digest=entry["digest"])
            write_json_atomic(self.path, {"files": self.entries})


def quick_check(root, marker, verify_all, workers):
    """Check a verified tree against its marker: sizes and mtimes, hashes only where needed.

    Returns the sorted list of files that are missing or whose content no longer matches.
    """
    files = marker["files"]
    suspects = []
    bad = []
    for path, recorded in files.items():
        full = os.path.join(root, path)
        try:
            state = file_state(full)
        except OSError:
            bad.append(path)
            continue
        if state["size"] != recorded["size"]:
            bad.append(path)
        elif verify_all or state["mtime_ns"] != recorded.get("mtime_ns"):
            suspects.append(path)
    bad.extend(verify_files(root, files, suspects, workers))
    return sorted(bad)


def apply_ownership(path, uid, gid, mode, dry_run=False):
    """chown/chmod one path (or only tell, with dry_run); return True when something differs."""
    stat = os.lstat(path)
    wrong_owner = (uid is not None and stat.st_uid != uid) or (gid is not None and stat.st_gid != gid)
    wrong_mode = stat.st_mode & 0o7777 != mode
    if not dry_run:
        if wrong_owner:
            os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        if wrong_mode:
            os.chmod(path, mode)
    return wrong_owner or wrong_mode


def apply_tree_ownership(root, uid, gid, dir_mode, file_mode, dry_run=False):
    changed = apply_ownership(root, uid, gid, dir_mode, dry_run)
    for base, dirs, names in os.walk(root):
        for name in dirs:
            changed = apply_ownership(os.path.join(base, name), uid, gid, dir_mode, dry_run) or changed
        for name in names:
            changed = apply_ownership(os.path.join(base, name), uid, gid, file_mode, dry_run) or changed
    return changed


def free_bytes(path):
    """Free bytes on the file system that holds path (or its nearest existing parent)."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return shutil.disk_usage(probe).free, probe


def switch_link(link, target):
    """Point link at target atomically (a new link renamed over the old one)."""
    tmp = "%s.switch-%d" % (link, os.getpid())
    try:
        os.unlink(tmp)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
    os.symlink(target, tmp)
    os.replace(tmp, link)
    fsync_dir(os.path.dirname(link))


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def human_bytes(count):
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return "%d B" % count if unit == "B" else "%.1f %s" % (value, unit)


# --------------------------------------------------------------------------- model configs

def load_config(root):
    path = os.path.join(root, "config.json")
    try:
        with open(path) as stream:
            config = json.load(stream)
    except (IOError, OSError) as exc:
        raise WeightsError("%s cannot be read: %s" % (path, exc))
    except ValueError as exc:
        raise WeightsError("%s is not valid JSON: %s" % (path, exc))
    if not isinstance(config, dict):
        raise WeightsError("%s is not a JSON object" % path)
    return config


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def target_facts(config, origin):
    """model_type and layer count of a target config (top level or text_config, as Qwen3.5 has it)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    if not _int(layers) or layers < 1:
        raise WeightsError("%s: num_hidden_layers is missing or not a positive integer" % origin)
    return {
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures") or [],
        "num_hidden_layers": layers,
    }


def drafter_facts(config, origin, target_layers):
    """The DFlash fields a drafter must carry; target_layers (or None) bounds target_layer_ids."""
    architectures = config.get("architectures") or []
    auto_map = config.get("auto_map") or {}
    mapped = [str(value) for value in auto_map.values()] if isinstance(auto_map, dict) else []
    if "DFlashDraftModel" not in architectures and not any(v.endswith("DFlashDraftModel") for v in mapped):
        raise WeightsError("%s is not a DFlash drafter: architectures %s and auto_map %s name no DFlashDraftModel"
                           % (origin, architectures, mapped))
    dflash = config.get("dflash_config")
    if not isinstance(dflash, dict):
        raise WeightsError("%s: dflash_config is missing" % origin)
    block_size = dflash.get("block_size", config.get("block_size"))
    if not _int(block_size) or block_size < 2:
        raise WeightsError("%s: block_size is missing or not an integer >= 2 (found %r)" % (origin, block_size))
    layer_ids = dflash.get("target_layer_ids")
    if not isinstance(layer_ids, list) or not layer_ids or not all(_int(i) for i in layer_ids):
        raise WeightsError("%s: dflash_config.target_layer_ids must be a non-empty list of integers" % origin)
    if target_layers is not None:
        outside = [i for i in layer_ids if i < 0 or i >= target_layers]
        if outside:
            raise WeightsError("%s: dflash_config.target_layer_ids %s lie outside the target's %d layers (0..%d)"
                               % (origin, outside, target_layers, target_layers - 1))
    mask_token_id = dflash.get("mask_token_id", config.get("mask_token_id"))
    if not _int(mask_token_id):
        raise WeightsError("%s: dflash_config.mask_token_id is missing" % origin)
    return {
        "block_size": block_size,
        "target_layer_ids": layer_ids,
        "mask_token_id": mask_token_id,
        "layer_types": config.get("layer_types") or [],
        "sliding_window": config.get("sliding_window"),
        "num_hidden_layers": config.get("num_hidden_layers"),
    }

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_stage
short_description: Stage a model weight tree atomically from a hub, an HTTP mirror or a path
description:
  - Downloads or copies the files of one model revision into a staging directory next to
    O(dest), checks every file against its sha256 (or, for small hub files, its git blob id),
    validates C(config.json), and only then points the link O(dest) at the verified copy.
    The previous copy keeps serving until the new one is verified.
  - Transfers and hashing run on a thread pool. An interrupted run resumes where it stopped;
    verified files are kept, partial files continue with HTTP C(Range) requests.
  - A verified copy carries a marker (C(.model_weights.json)) with each file's size, modification
    time and digest. A later run compares sizes and times only and hashes just the files that
    look touched; a file that no longer matches is fetched again, alone.
  - Copies live in C(<dest>.revs/); O(dest) is a relative symbolic link to one of them.
version_added: 0.1.0
author:
  - pro6000.inference developers (@pro6000)
options:
  dest:
    description:
      - Stable path the service reads, for example C(/srv/models/Qwen3.6-27B).
      - Must be absent or a symbolic link managed by this module.
    type: path
    required: true
  source:
    description:
      - Where the files come from.
      - V(hub) uses the C(huggingface_hub) client in O(hub_python)'s environment against
        O(hub_endpoint).
      - V(mirror) reads C(<mirror_url>/<repo_id>/<revision>/) and its manifest O(manifest_name).
      - V(path) copies from O(source_path) on the host (a local disk or a mounted share).
    type: str
    required: true
    choices: [hub, mirror, path]
  repo_id:
    description:
      - Repository id, for example C(Qwen/Qwen3.6-27B). Required for V(hub) and V(mirror).
    type: str
  revision:
    description:
      - Revision to stage. For V(hub), a 40-hex commit is used without asking the hub which
        commit it is; a branch or tag is resolved on every run.
    type: str
    required: true
  mirror_url:
    description:
      - Base URL of the HTTP(S) mirror, for O(source=mirror).
    type: str
  source_path:
    description:
      - Directory holding the model files, for O(source=path).
    type: path
  manifest_name:
    description:
      - Name of the manifest (JSON with C(files), each C(path), C(size), C(sha256)) at the root of a
        mirror revision or a source path. A source path without one is hashed before copying.
    type: str
    default: manifest.json
  allow_patterns:
    description:
      - Only hub files matching at least one of these shell patterns are staged.
    type: list
    elements: str
    default: []
  ignore_patterns:
    description:
      - Hub files matching any of these shell patterns are left out.
    type: list
    elements: str
    default: []
  hub_python:
    description:
      - Interpreter of the virtual environment that holds C(huggingface_hub), for O(source=hub).
    type: path
  hub_endpoint:
    description:
      - Hub endpoint (an internal hub mirror), passed to the client as E(HF_ENDPOINT). Empty
        means the client's default.
    type: str
    default: ""
  hub_token:
    description:
      - Hub access token. Passed to the client through its environment only, never written to disk.
    type: str
    default: ""
  ca_file:
    description:
      - Extra CA bundle for HTTPS to the mirror or the hub.
    type: path
  kind:
    description:
      - What the model is for. V(target) requires C(num_hidden_layers) in C(config.json);
        V(drafter) requires a DFlash drafter config; V(other) only requires the files.
    type: str
    default: other
    choices: [target, drafter, other]
  target_config:
    description:
      - C(config.json) of the target model, for O(kind=drafter). When it exists,
        C(dflash_config.target_layer_ids) must lie within the target's layer count.
    type: path
  owner:
    description:
      - User that owns the staged files (the service user).
    type: str
    default: root
  group:
    description:
      - Group that owns the staged files.
    type: str
    default: root
  dir_mode:
    description:
      - Octal mode of staged directories.
    type: str
    default: "0755"
  file_mode:
    description:
      - Octal mode of staged files.
    type: str
    default: "0644"
  workers:
    description:
      - Parallel transfers and hashing threads.
    type: int
    default: 8
  retries:
    description:
      - How often one file transfer is retried (resuming) within a run before the run fails.
    type: int
    default: 3
  timeout:
    description:
      - Seconds a network read may stall before it counts as a failure.
    type: int
    default: 60
  verify:
    description:
      - V(quick) hashes only files whose size or modification time differs from the marker;
        V(full) hashes every file of the current copy.
    type: str
    default: quick
    choices: [quick, full]
  keep_previous:
    description:
      - How many earlier verified copies stay on disk after a switch (for a manual rollback).
    type: int
    default: 1
  reserve_bytes:
    description:
      - Bytes that must stay free on the destination file system after staging.
    type: int
    default: 0
extends_documentation_fragment:
  - pro6000.inference.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the copy would be staged, repaired or re-owned; fetches nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A verified copy of the wanted revision is left as it is; nothing is transferred.
notes:
  - Needs the destination, its staging directory and earlier copies on one file system (the
    switch is a rename and hard links reuse unchanged files between revisions).
"""

EXAMPLES = r"""
- name: Stage the drafter from the hub at a pinned commit
  pro6000.inference.model_stage:
    dest: /srv/models/Qwen3.6-27B-DFlash
    source: hub
    repo_id: z-lab/Qwen3.6-27B-DFlash
    revision: 0123456789abcdef0123456789abcdef01234567
    hub_python: /opt/model-weights/venv/bin/python
    hub_token: "{{ vault_hf_token }}"
    kind: drafter
    target_config: /srv/models/Qwen3.6-27B/config.json
    owner: sglang
    group: sglang

- name: Stage the target from an internal HTTP mirror
  pro6000.inference.model_stage:
    dest: /srv/models/Qwen3.6-27B
    source: mirror
    mirror_url: https://mirror.example.internal/models
    repo_id: Qwen/Qwen3.6-27B
    revision: 0123456789abcdef0123456789abcdef01234567
    kind: target
"""

RETURN = r"""
path:
  description: The stable path (the link O(dest)).
  returned: always
  type: str
revision_dir:
  description: The verified copy O(dest) points at (or would point at, in check mode).
  returned: always
  type: str
revision:
  description: The revision asked for.
  returned: always
  type: str
commit:
  description: The hub commit the revision resolved to (hub only, else null).
  returned: always
  type: str
bytes:
  description: Total size of the staged files.
  returned: always
  type: int
files:
  description: Number of staged files.
  returned: always
  type: int
fetched_files:
  description: Files transferred from the source by this run.
  returned: always
  type: list
  elements: str
fetched_bytes:
  description: Bytes read from the source by this run (resumed parts count only what was read).
  returned: always
  type: int
linked_files:
  description: Files reused from an earlier verified copy through hard links.
  returned: always
  type: int
repaired:
  description: Files of the current copy that no longer matched their digest and were fetched again.
  returned: always
  type: list
  elements: str
verified_at:
  description: When the copy was verified (ISO 8601, UTC), from its marker.
  returned: when a verified copy exists
  type: str
config:
  description: C(model_type), C(architectures), C(num_hidden_layers) of a target.
  returned: when O(kind=target)
  type: dict
dflash:
  description: C(block_size), C(target_layer_ids), C(mask_token_id), C(layer_types), C(sliding_window) of a drafter.
  returned: when O(kind=drafter)
  type: dict
"""

import datetime
import fcntl
import grp
import os
import pwd
import re
import shutil
import threading

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pro6000.inference.plugins.module_utils._weights import (
    COMMIT_RE, HUB_LOCAL_CACHE, JOURNAL_NAME, MARKER_NAME, STAGING_PREFIX, HttpSource, Journal, PathSource,
    WeightsError, apply_ownership, apply_tree_ownership, drafter_facts, file_digest, file_state, free_bytes,
    fsync_dir, human_bytes, load_config, manifest_bytes, normalize_manifest, parallel_map,
    parse_manifest_document, quick_check, read_json, switch_link, target_facts, transfer, verify_files,
    write_json_atomic,
)
from ansible_collections.pro6000.inference.plugins.module_utils._weights_hub import helper_environment, run_helper


def safe_name(text):
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


class Stager:
    def __init__(self, module):
        self.module = module
        self.params = params = module.params
        self.dest = os.path.abspath(params["dest"])
        self.revs = self.dest + ".revs"
        self.workers = max(1, params["workers"])
        self.uid = pwd.getpwnam(params["owner"]).pw_uid
        self.gid = grp.getgrnam(params["group"]).gr_gid
        self.dir_mode = int(params["dir_mode"], 8)
        self.file_mode = int(params["file_mode"], 8)
        self.identity = {
            "source": params["source"],
            "repo_id": params["repo_id"],
            "revision": params["revision"],
            "allow_patterns": sorted(params["allow_patterns"]),
            "ignore_patterns": sorted(params["ignore_patterns"]),
        }
        self.fetched_bytes = 0
        self.bytes_lock = threading.Lock()
        self.result = {
            "changed": False, "path": self.dest, "revision": params["revision"], "commit": None,
            "fetched_files": [], "fetched_bytes": 0, "linked_files": 0, "repaired": [],
        }

    # ----------------------------------------------------------------- sources

    def is_pinned_commit(self):
        return bool(COMMIT_RE.match(self.params["revision"]))

    def hub_env(self, hf_home):
        return helper_environment(os.environ, self.params["hub_endpoint"], self.params["hub_token"], hf_home,
                                  self.params["ca_file"])

    def hub_request(self, command, **request):
        request.update(command=command, repo_id=self.params["repo_id"])
        return run_helper(self.params["hub_python"], request, self.hub_env(os.path.join(self.revs, ".hf-home")))

    def hub_list(self):
        answer = self.hub_request("list", revision=self.params["revision"], is_commit=self.is_pinned_commit(),
                                  allow_patterns=self.params["allow_patterns"],
                                  ignore_patterns=self.params["ignore_patterns"])
        return normalize_manifest(answer["files"]), answer["commit"]

    def mirror_source(self):
        base = "%s/%s/%s" % (self.params["mirror_url"].rstrip("/"), self.params["repo_id"], self.params["revision"])
        return HttpSource(base, timeout=self.params["timeout"], ca_file=self.params["ca_file"])

    def manifest(self):
        """(files, commit) of what is wanted, read from the source."""
        source = self.params["source"]
        if source == "hub":
            return self.hub_list()
        name = self.params["manifest_name"]
        if source == "mirror":
            mirror = self.mirror_source()
            return parse_manifest_document(mirror.read_text(name), mirror.describe(name)), None
        root = self.params["source_path"]
        manifest_path = os.path.join(root, name)
        if os.path.isfile(manifest_path):
            with open(manifest_path) as stream:
                return parse_manifest_document(stream.read(), manifest_path), None
        return self.hash_source_tree(root, name), None

    def hash_source_tree(self, root, manifest_name):
        """Without a manifest, the digests are taken from the source itself before copying."""
        if not os.path.isdir(root):
            raise WeightsError("source_path %s is not a directory" % root)
        paths = []
        for base, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in names:
                rel = os.path.relpath(os.path.join(base, name), root)
                if rel != manifest_name and not name.startswith("."):
                    paths.append(rel)
        digests = parallel_map(lambda rel: file_digest(os.path.join(root, rel), "sha256"), paths, self.workers)
        for rel, digest in digests.items():
            if isinstance(digest, Exception):
                raise WeightsError("cannot read %s: %s" % (os.path.join(root, rel), digest))
        return normalize_manifest([
            {"path": rel, "size": os.path.getsize(os.path.join(root, rel)), "sha256": digests[rel]} for rel in paths])

    # ----------------------------------------------------------------- current copy

    def current_copy(self):
        if os.path.lexists(self.dest) and not os.path.islink(self.dest):
            raise WeightsError("%s exists and is not a link: move it away (or into %s) so that it can be managed"
                               % (self.dest, self.revs))
        if not os.path.islink(self.dest):
            return None, None
        current = os.path.realpath(self.dest)
        marker = read_json(os.path.join(current, MARKER_NAME)) if os.path.isdir(current) else None
        if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
            return current, None
        return current, marker

    def same_identity(self, marker):
        return all(marker.get(key) == value for key, value in self.identity.items())

    # ----------------------------------------------------------------- validation

    def validate(self, root):
        kind = self.params["kind"]
        facts = {}
        if kind == "other":
            return facts
        config = load_config(root)
        origin = os.path.join(self.dest, "config.json")
        if kind == "target":
            facts["config"] = target_facts(config, origin)
        else:
            target_layers = None
            target_config = self.params["target_config"]
            if target_config and os.path.exists(target_config):
                target_layers = target_facts(load_config(os.path.dirname(target_config)), target_config)[
                    "num_hidden_layers"]
            elif target_config and not self.module.check_mode:
                raise WeightsError("target config %s does not exist: stage the target model first" % target_config)
            facts["dflash"] = drafter_facts(config, origin, target_layers)
        return facts

    # ----------------------------------------------------------------- main flow

    def run(self):
        current, marker = self.current_copy()
        if marker is not None and self.same_identity(marker):
            files = dict((path, dict(entry)) for path, entry in marker["files"].items())
            commit = marker.get("commit")
            moved = (self.params["source"] == "hub" and not self.is_pinned_commit()
                     and self.hub_request("resolve", revision=self.params["revision"])["commit"] != commit)
            if moved:
                files, commit = self.hub_list()
            else:
                bad = quick_check(current, marker, self.params["verify"] == "full", self.workers)
                if not bad:
                    return self.keep(current, marker)
                self.result["repaired"] = bad
        elif self.module.check_mode:
            # Fetching the manifest could need a client that is only going to be installed.
            self.result.update(changed=True, revision_dir=None)
            return self.result
        else:
            files, commit = self.manifest()
        return self.stage(files, commit, current)

    def keep(self, current, marker):
        """The current copy is the wanted one and intact: fix ownership if needed, report."""
        self.result.update(self.validate(current))
        changed = apply_tree_ownership(current, self.uid, self.gid, self.dir_mode, self.file_mode,
                                       dry_run=self.module.check_mode)
        self.result.update(self.summary(current, marker), changed=changed)
        return self.result

    def summary(self, root, marker):
        files = marker["files"]
        return {"revision_dir": root, "commit": marker.get("commit"), "files": len(files),
                "bytes": sum(entry["size"] for entry in files.values()), "verified_at": marker.get("verified_at")}

    def stage(self, files, commit, current):
        staging = os.path.join(self.revs, STAGING_PREFIX + safe_name(commit or self.params["revision"]))
        self.result.update(changed=True, commit=commit, files=len(files), bytes=manifest_bytes(files),
                           revision_dir=staging)
        if self.module.check_mode:
            return self.result
        self.make_dir(self.revs)
        with open(os.path.join(self.revs, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.make_dir(staging)
            self.fill(staging, files, commit, current)
            self.result.update(self.validate(staging))
            final = self.publish(staging, files, commit)
        self.result["revision_dir"] = final
        return self.result

    def make_dir(self, path):
        if not os.path.isdir(path):
            os.makedirs(path)
        apply_ownership(path, self.uid, self.gid, self.dir_mode)

    def verified_copies(self):
        """(directory, marker) of every verified copy in <dest>.revs."""
        for name in sorted(os.listdir(self.revs)):
            full = os.path.join(self.revs, name)
            marker = read_json(os.path.join(full, MARKER_NAME)) if not name.startswith(".") else None
            if os.path.isdir(full) and isinstance(marker, dict) and isinstance(marker.get("files"), dict):
                yield full, marker

    def donors(self, current):
        """digest -> path of files in verified copies that still match their markers."""
        damaged = set(self.result["repaired"])
        donors = {}
        for root, marker in self.verified_copies():
            for path, recorded in marker["files"].items():
                full = os.path.join(root, path)
                if (root == current and path in damaged) or not os.path.isfile(full):
                    continue
                if file_state(full) == {"size": recorded["size"], "mtime_ns": recorded.get("mtime_ns")}:
                    donors[recorded["digest"]] = full
        return donors

    def fill(self, staging, files, commit, current):
        journal = Journal(staging)
        pending = [path for path in sorted(files) if not journal.trusted(staging, path, files[path])]
        present = [path for path in pending if os.path.isfile(os.path.join(staging, path))]
        mismatched = set(verify_files(staging, files, present, self.workers))
        for path in present:
            if path in mismatched:
                os.unlink(os.path.join(staging, path))
            else:
                self.finish_file(staging, path, files[path], journal)
        pending = [path for path in pending if path not in present or path in mismatched]

        donors = self.donors(current)
        to_fetch = []
        for path in pending:
            donor = donors.get(files[path]["digest"])
            if donor is None or not self.link(donor, os.path.join(staging, path)):
                to_fetch.append(path)
                continue
            self.result["linked_files"] += 1
            journal.record(staging, path, files[path])

        self.check_space(staging, files, to_fetch)
        if self.params["source"] == "hub":
            errors = self.fetch_from_hub(staging, files, commit, to_fetch, journal)
        else:
            errors = self.fetch_with_transfers(staging, files, to_fetch, journal)
        self.result["fetched_bytes"] = self.fetched_bytes
        if errors:
            raise WeightsError("%d of %d file(s) could not be staged (the staging copy %s is kept and the next run "
                               "resumes it): %s" % (len(errors), len(to_fetch), staging,
                                                    "; ".join("%s: %s" % item for item in sorted(errors.items()))))
        self.remove_strays(staging, files)

    def link(self, donor, target):
        parent = os.path.dirname(target)
        if not os.path.isdir(parent):
            os.makedirs(parent)
        try:
            os.link(donor, target)
        except OSError:
            return False
        return True

    def check_space(self, staging, files, to_fetch):
        need = self.params["reserve_bytes"]
        for path in to_fetch:
            part = os.path.join(staging, path) + ".part"
            have = os.path.getsize(part) if os.path.isfile(part) else 0
            need += max(0, files[path]["size"] - have)
        free, where = free_bytes(staging)
        if need > free:
            raise WeightsError(
                "not enough free space in %s for %s: need %d bytes (%s, including a reserve of %d bytes), "
                "free %d bytes (%s)" % (where, self.dest, need, human_bytes(need), self.params["reserve_bytes"],
                                        free, human_bytes(free)))

    def count_bytes(self, count):
        with self.bytes_lock:
            self.fetched_bytes += count

    def fetch_with_transfers(self, staging, files, to_fetch, journal):
        if self.params["source"] == "mirror":
            source = self.mirror_source()
        else:
            source = PathSource(self.params["source_path"])

        def fetch(path):
            full = os.path.join(staging, path)
            parent = os.path.dirname(full)
            if not os.path.isdir(parent):
                os.makedirs(parent)
            transfer(source, path, full + ".part", files[path], self.params["retries"], self.count_bytes)
            os.replace(full + ".part", full)
            self.finish_file(staging, path, files[path], journal)

        return self.collect(parallel_map(fetch, to_fetch, self.workers))

    def fetch_from_hub(self, staging, files, commit, to_fetch, journal):
        if not to_fetch:
            return {}
        before = self.partial_hub_bytes(staging)
        answer = run_helper(self.params["hub_python"], {
            "command": "fetch", "repo_id": self.params["repo_id"], "commit": commit, "files": to_fetch,
            "local_dir": staging, "workers": self.workers,
        }, self.hub_env(os.path.join(staging, HUB_LOCAL_CACHE, "hf-home")))
        errors = dict(answer["errors"])
        fetched = [path for path in to_fetch if path not in errors]
        self.count_bytes(max(0, sum(files[path]["size"] for path in fetched) - before))
        for path in verify_files(staging, files, fetched, self.workers):
            os.unlink(os.path.join(staging, path))
            errors[path] = "%s does not match the hub's %s" % (path, files[path]["algo"])
        for path in fetched:
            if path not in errors:
                self.finish_file(staging, path, files[path], journal)
                self.result["fetched_files"].append(path)
        return errors

    @staticmethod
    def partial_hub_bytes(staging):
        """Bytes huggingface_hub already holds in .incomplete files: resumed, so not read again."""
        total = 0
        for base, _dirs, names in os.walk(os.path.join(staging, HUB_LOCAL_CACHE, "huggingface", "download")):
            total += sum(os.path.getsize(os.path.join(base, name)) for name in names if name.endswith(".incomplete"))
        return total

    def collect(self, results):
        errors = {}
        for path, outcome in sorted(results.items()):
            if isinstance(outcome, Exception):
                errors[path] = str(outcome)
            else:
                self.result["fetched_files"].append(path)
        return errors

    def finish_file(self, staging, path, entry, journal):
        apply_ownership(os.path.join(staging, path), self.uid, self.gid, self.file_mode)
        journal.record(staging, path, entry)

    def remove_strays(self, staging, files):
        """Leave exactly the manifest's files: client caches and leftovers of earlier attempts go."""
        shutil.rmtree(os.path.join(staging, HUB_LOCAL_CACHE), ignore_errors=True)
        for base, dirs, names in os.walk(staging, topdown=False):
            for name in names:
                full = os.path.join(base, name)
                rel = os.path.relpath(full, staging)
                if rel not in files and rel != JOURNAL_NAME:
                    os.unlink(full)
            for name in dirs:
                full = os.path.join(base, name)
                if not os.listdir(full):
                    os.rmdir(full)

    def publish(self, staging, files, commit):
        """Write the marker, move the copy into place, switch the link, prune old copies."""
        journal = Journal(staging)
        marker = dict(self.identity, commit=commit,
                      verified_at=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      files={})
        for path, entry in files.items():
            marker["files"][path] = dict(entry, mtime_ns=journal.entries[path]["mtime_ns"])
        apply_tree_ownership(staging, self.uid, self.gid, self.dir_mode, self.file_mode)
        write_json_atomic(os.path.join(staging, MARKER_NAME), marker, self.file_mode)
        apply_ownership(os.path.join(staging, MARKER_NAME), self.uid, self.gid, self.file_mode)
        os.unlink(journal.path)
        base = os.path.join(self.revs, safe_name(commit or self.params["revision"]))
        final, counter = base, 1
        while os.path.lexists(final):
            counter += 1
            final = "%s.%d" % (base, counter)
        os.rename(staging, final)
        fsync_dir(self.revs)
        switch_link(self.dest, os.path.relpath(final, os.path.dirname(self.dest)))
        self.prune(final, marker)
        self.result.update(self.summary(final, marker))
        return final

    def prune(self, final, marker):
        """Keep keep_previous earlier copies of other revisions; drop replaced copies and stale staging."""
        earlier = []
        for name in os.listdir(self.revs):
            full = os.path.join(self.revs, name)
            if full == final or not os.path.isdir(full):
                continue
            if name.startswith(STAGING_PREFIX) or name == ".hf-home":
                shutil.rmtree(full)
                continue
            other = read_json(os.path.join(full, MARKER_NAME)) or {}
            if other.get("revision") == marker["revision"] and other.get("commit") == marker["commit"]:
                shutil.rmtree(full)  # a damaged copy of this very revision, now replaced
            else:
                earlier.append((other.get("verified_at") or "", full))
        for _verified_at, full in sorted(earlier, reverse=True)[self.params["keep_previous"]:]:
            shutil.rmtree(full)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            source=dict(type="str", required=True, choices=["hub", "mirror", "path"]),
            repo_id=dict(type="str"),
            revision=dict(type="str", required=True),
            mirror_url=dict(type="str"),
            source_path=dict(type="path"),
            manifest_name=dict(type="str", default="manifest.json"),
            allow_patterns=dict(type="list", elements="str", default=[]),
            ignore_patterns=dict(type="list", elements="str", default=[]),
            hub_python=dict(type="path"),
            hub_endpoint=dict(type="str", default=""),
            hub_token=dict(type="str", default="", no_log=True),
            ca_file=dict(type="path"),
            kind=dict(type="str", default="other", choices=["target", "drafter", "other"]),
            target_config=dict(type="path"),
            owner=dict(type="str", default="root"),
            group=dict(type="str", default="root"),
            dir_mode=dict(type="str", default="0755"),
            file_mode=dict(type="str", default="0644"),
            workers=dict(type="int", default=8),
            retries=dict(type="int", default=3),
            timeout=dict(type="int", default=60),
            verify=dict(type="str", default="quick", choices=["quick", "full"]),
            keep_previous=dict(type="int", default=1),
            reserve_bytes=dict(type="int", default=0),
        ),
        required_if=[
            ("source", "hub", ("repo_id", "hub_python")),
            ("source", "mirror", ("repo_id", "mirror_url")),
            ("source", "path", ("source_path",)),
        ],
        supports_check_mode=True,
    )
    for name in ("dir_mode", "file_mode"):
        if not re.match(r"^0?[0-7]{3,4}$", module.params[name]):
            module.fail_json(msg="%s must be an octal mode such as 0755, not %r" % (name, module.params[name]))
    for name, lookup in (("owner", pwd.getpwnam), ("group", grp.getgrnam)):
        try:
            lookup(module.params[name])
        except KeyError:
            if module.check_mode:
                # A check run on a host where the account is only going to be created.
                module.exit_json(changed=True, msg="%s %s does not exist yet" % (name, module.params[name]))
            module.fail_json(msg="%s %r does not exist on this host" % (name, module.params[name]))
    stager = Stager(module)
    try:
        result = stager.run()
    except WeightsError as exc:
        module.fail_json(msg=str(exc), **stager.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

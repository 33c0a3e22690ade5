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
  - The expected digests come from O(lock), the site's lock file, when it is given; what the
    source lists or serves must then match it, file by file, or the run fails before the switch
    naming each file. Without a lock file they come from the source itself (the hub's listing,
    the mirror's or path's manifest), and the result says so (RV(digest_source)).
  - Transfers and hashing run on a thread pool. An interrupted run resumes where it stopped, also
    after a kill; verified files are kept, partial files (C(<file>.part) in the staging
    directory, for every source) continue with HTTP C(Range) requests. Files are hashed while
    they are written, each 1 MiB piece as it lies in the file; a plain C(http://) body goes from
    the socket into the file inside the kernel (C(splice)), and finished ranges go to the disk
    while the rest arrives. Retries count attempts in a row that brought no new byte; a client
    error such as HTTP 404 is not retried.
  - A verified copy carries a marker (C(.model_weights.json)) with each file's size, modification
    time and digest. A later run compares sizes and times only and hashes just the files that
    look touched (and records the new time of a touched file that still matches); a file that no
    longer matches is fetched again, alone. With O(verify=full), a file reused from another copy
    is hashed before it is linked.
  - Copies live in C(<dest>.revs/); O(dest) is a relative symbolic link to one of them.
version_added: 0.1.0
author:
  - pro6000.inference developers (@pro6000)
options:
  dest:
    description:
      - Stable path the service reads, for example C(/srv/models/Qwen3.6-27B).
      - An absolute, normalised path (C(~) is not expanded). Must be absent or a symbolic link
        into C(<dest>.revs/) made by this module.
    type: str
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
      - Repository id in the hub's syntax, for example C(Qwen/Qwen3.6-27B). Required for V(hub) and V(mirror).
    type: str
  revision:
    description:
      - Revision to stage, a commit or a git ref name (no C(..)). For V(hub), a 40-hex commit is
        used without asking the hub which commit it is; a branch or tag is resolved on every run.
    type: str
    required: true
  lock:
    description:
      - The site's lock file for this model (its content, a dict) with C(repo_id), C(commit) and
        C(files), each with C(path), C(size) and C(sha256). Written once from a trusted source
        with C(python3 plugins/module_utils/_weights_hub_helper.py lock REPO_ID COMMIT [--dir COPY]).
      - The source's file list must equal the lock's, with the same sizes (and sha256 where the
        source gives one), and every staged byte must match the lock's sha256; a hub branch must
        resolve to the lock's commit.
    type: dict
  mirror_url:
    description:
      - Base URL of the HTTP(S) mirror, for O(source=mirror). Only C(http://) and C(https://)
        (also for redirects).
    type: str
  source_path:
    description:
      - Absolute path of the directory holding the model files, for O(source=path).
    type: path
  link_mode:
    description:
      - How O(source=path) files reach the copy. V(copy) lets the kernel copy them
        (C(copy_file_range), C(sendfile)) while the same bytes are hashed.
      - V(reflink) shares the source's extents (btrfs, XFS) and V(hardlink) links the source
        files themselves, where the source lies on the destination's file system; otherwise they
        copy. With V(hardlink) the served files and the source are one file each (ownership and
        mode included), so only for a source that nothing changes.
      - A hard link is the source's own inode, and changing its owner or mode would change the
        source. So V(hardlink) links only files that already have O(owner), O(group) and
        O(file_mode); any other file is copied (the run warns, naming how many), and no later run
        changes the owner or mode of a file that has links outside C(<dest>.revs/).
    type: str
    default: copy
    choices: [copy, reflink, hardlink]
  source_symlinks:
    description:
      - What a symbolic link in O(source_path) may be. The source is data, so every file is opened
        without following a link, and the files the module stages are new files (or, with
        O(link_mode=hardlink), links of regular files), never links.
      - V(refuse) fails the run before anything is staged when a link (of a file, or of a
        directory on the way to a file) leads outside O(source_path), naming it; a link that
        stays inside is staged as a copy of the file it leads to.
      - V(copy) stages the bytes a link leads to wherever that is, as a new file with
        O(file_mode) (for a source such as a hub cache snapshot, whose files link into
        C(../../blobs/)). Only for a source whose links the site trusts, since a link to a file only
        root may read publishes that file's content.
      - Files that are neither regular files nor links (FIFOs, sockets, devices) are refused.
    type: str
    default: refuse
    choices: [refuse, copy]
  manifest_name:
    description:
      - Name of the manifest (JSON with C(files), each C(path), C(size), C(sha256)) at the root of a
        mirror revision or a source path. A source path without one is hashed before copying.
      - A relative path inside the revision or source path (no leading C(/), no C(..), no control
        characters), or the run fails before anything is read.
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
      - User that owns the staged files. Keep the default V(root) and let the service read the
        files through O(group), since an owner may rewrite its files and a quick check (O(verify=quick))
        trusts sizes and times.
      - The directories (C(<dest>.revs/), each copy and everything under them), the marker, the
        journal and C(<dest>.revs/.lock) always belong to the user the module runs as (root),
        whatever O(owner) is, since root later creates, renames and writes files there; a
        directory another account owned could hold a link root would follow. A run takes over
        (re-owns) what an earlier layout gave the service user, without fetching anything again.
    type: str
    default: root
  group:
    description:
      - Group of the staged files and directories (the service's group, which reads the weights).
    type: str
    default: root
  dir_mode:
    description:
      - Octal mode of staged directories. The group and others may not write (no C(0o022) bits)
        nor any special bit be set.
    type: str
    default: "0755"
  file_mode:
    description:
      - Octal mode of staged files and of the marker. The group and others may not write (no
        C(0o022) bits) nor any special bit be set.
    type: str
    default: "0644"
  workers:
    description:
      - Parallel transfers and hashing threads.
    type: int
    default: 8
  retries:
    description:
      - How often one file transfer is retried (resuming) in a row without getting a new byte,
        within a run, before the run fails. Also the hub client's budget.
    type: int
    default: 3
  timeout:
    description:
      - Seconds a network request or read may stall before it counts as a failure (also for
        every request of the hub client).
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
  - The hub client runs as a child process in a session of its own that the kernel kills when
    the module ends (C(PR_SET_PDEATHSIG)); it holds the module's lock on C(<dest>.revs/.lock)
    while it lives.
  - URLs in messages lose their query strings (signed CDN URLs carry their signature there).
  - Root never follows a link in C(<dest>.revs/) - the lock, the journal, the marker and every
    file whose owner or mode it sets are opened with C(O_NOFOLLOW) (the lock from a descriptor of
    the directory), modes set with C(fchmod) on the opened file, trees walked from directory
    descriptors; a link found where the lock or a copy's file belongs fails the run naming it.
  - File names that are not UTF-8 in O(source_path) are refused before anything is staged.
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
    lock: "{{ lookup('ansible.builtin.file', inventory_dir ~ '/weights-locks/Qwen3.6-27B.json') | from_json }}"
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
  description: Bytes read from the source by this run (resumed parts count only what was read, for every source).
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
digest_source:
  description:
    - Where the expected digests came from. V(lock) the site's lock file (O(lock)); V(source) the
      source itself (the hub's listing, the manifest, or the path's files hashed before copying).
  returned: always
  type: str
  sample: lock
verified_at:
  description: When the copy was verified (ISO 8601, UTC), from its marker.
  returned: when a verified copy exists
  type: str
config:
  description:
    - C(model_type), C(architectures), C(num_hidden_layers) and C(context_length) of a target
      (the context its config declares, derived as SGLang's C(get_context_length) does).
  returned: when O(kind=target)
  type: dict
dflash:
  description:
    - C(block_size), C(target_layer_ids), C(mask_token_id), C(layer_types), C(sliding_window),
      C(num_hidden_layers) and C(context_length) of a drafter.
  returned: when O(kind=drafter)
  type: dict
fact_key:
  description:
    - The key under which role C(model_weights) records this model in its local fact,
      V(target) or V(drafter) for those kinds, else the last component of O(dest).
  returned: success
  type: str
  sample: target
fact:
  description:
    - The entry role C(model_weights) records under RV(fact_key), with C(path), C(source),
      C(repo_id), C(revision), C(commit), C(bytes), C(files), C(digest_source) and
      C(verified_at), the keys of RV(config) beside them, and RV(dflash) when returned.
  returned: success
  type: dict
"""

import datetime
import fcntl
import grp
import os
import pwd
import re
import shutil
import stat as statmod
import threading

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pro6000.inference.plugins.module_utils._weights import (
    COMMIT_RE, JOURNAL_NAME, LINK_MODES, LOCK_NAME, MARKER_NAME, SOURCE_SYMLINKS, STAGING_PREFIX, HttpSource,
    Journal, WeightsError, apply_ownership, apply_tree_ownership, check_against_lock, check_manifest_name,
    check_repo_id, check_revision, check_url, copy_local, copy_marker, drafter_facts, file_digest, free_bytes,
    fsync_dir, human_bytes, is_regular, link_target, load_config, lock_files, make_parents, manifest_bytes,
    marker_identity, mask_secrets, normalize_manifest, open_lock, open_regular, outside_links, parallel_map,
    parse_manifest_document, quick_check, read_json, resolve_source, switch_link, target_facts, transfer, utf8,
    verify_files, write_json_atomic,
)
from ansible_collections.pro6000.inference.plugins.module_utils._weights_hub import helper_environment, run_helper


# The hub client's home (HF_HOME) while it runs, in <dest>.revs.
HF_HOME = ".hf-home"


def safe_name(text):
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def digest_key(entry):
    return entry["algo"], entry["digest"], entry["size"]


class Stager:
    def __init__(self, module):
        self.module = module
        self.params = params = module.params
        self.dest = params["dest"]
        self.revs = self.dest + ".revs"
        self.workers = params["workers"]
        self.uid = pwd.getpwnam(params["owner"]).pw_uid
        self.gid = grp.getgrnam(params["group"]).gr_gid
        self.dir_mode = int(params["dir_mode"], 8)
        self.file_mode = int(params["file_mode"], 8)
        self.identity = marker_identity(params["source"], params["repo_id"], params["revision"],
                                        params["allow_patterns"], params["ignore_patterns"])
        self.lock = None
        if params["lock"] is not None:
            self.lock = lock_files(params["lock"], params["repo_id"], params["revision"])
            if params["source"] != "hub" and not COMMIT_RE.match(params["revision"]):
                raise WeightsError("lock: a lock file pins a commit, so revision must be that commit, not %r"
                                   % params["revision"])
        self.lock_fd = None
        # Inodes hashed and found good (or bad) in this run: a hard link shares its inode's fate.
        self.good_inodes = set()
        self.bad_inodes = set()
        self.fetched_bytes = 0
        self.bytes_lock = threading.Lock()
        # rel -> (path without links, whether links led there) of the files of a path source.
        self.source_files = {}
        self.copied_not_linked = []
        self.result = {
            "changed": False, "path": self.dest, "revision": params["revision"], "commit": None,
            "fetched_files": [], "fetched_bytes": 0, "linked_files": 0, "repaired": [],
            "digest_source": "lock" if self.lock else "source",
        }

    def move(self, src, dest):
        self.module.atomic_move(src, dest)

    # ----------------------------------------------------------------- sources

    def is_pinned_commit(self):
        return bool(COMMIT_RE.match(self.params["revision"]))

    def hub_env(self):
        return helper_environment(os.environ, self.params["hub_endpoint"], self.params["hub_token"],
                                  os.path.join(self.revs, HF_HOME), self.params["ca_file"], self.params["timeout"])

    def hub_request(self, command, **request):
        request.update(command=command, repo_id=self.params["repo_id"], timeout=self.params["timeout"],
                       retries=self.params["retries"])
        return run_helper(self.params["hub_python"], request, self.hub_env(), self.lock_fd)

    def hub_list(self):
        answer = self.hub_request("list", revision=self.params["revision"], is_commit=self.is_pinned_commit(),
                                  allow_patterns=self.params["allow_patterns"],
                                  ignore_patterns=self.params["ignore_patterns"])
        return normalize_manifest(answer["files"]), answer["commit"]

    def mirror_source(self):
        base = "%s/%s/%s" % (self.params["mirror_url"].rstrip("/"), self.params["repo_id"], self.params["revision"])
        return HttpSource(base, timeout=self.params["timeout"], ca_file=self.params["ca_file"])

    def offered(self):
        """(files, commit, where from) as the source describes them."""
        source = self.params["source"]
        if source == "hub":
            files, commit = self.hub_list()
            return files, commit, "the hub's listing of %s at %s" % (self.params["repo_id"], commit)
        name = self.params["manifest_name"]
        repo_id, revision = self.params["repo_id"], self.params["revision"]
        if source == "mirror":
            mirror = self.mirror_source()
            origin = mirror.describe(name)
            return parse_manifest_document(mirror.read_text(name), origin, repo_id, revision), None, origin
        root = self.params["source_path"]
        manifest_path = os.path.join(root, name)
        if os.path.lexists(manifest_path):
            manifest_path = self.source_file(name)
            with os.fdopen(open_regular(manifest_path)) as stream:
                files = parse_manifest_document(stream.read(), manifest_path, repo_id, revision)
            for path in files:
                self.source_file(path)
            return files, None, manifest_path
        return self.hash_source_tree(root, name), None, root

    def source_file(self, rel):
        """The path to read the source file rel from; refuses links out of the source."""
        if rel not in self.source_files:
            self.source_files[rel] = resolve_source(self.params["source_path"], rel, self.params["source_symlinks"])
        return self.source_files[rel][0]

    def wanted(self):
        """(files, commit) to stage: the lock's digests where the site pinned them, else the source's."""
        files, commit, origin = self.offered()
        if self.lock is None:
            return files, commit
        lock_commit, locked = self.lock
        if commit is not None and commit != lock_commit:
            raise WeightsError("%s resolves to commit %s, the lock file pins %s"
                               % (self.params["revision"], commit, lock_commit))
        check_against_lock(files, locked, origin)
        return locked, commit

    def hash_source_tree(self, root, manifest_name):
        """Without a manifest, the digests are taken from the source itself before copying."""
        if not os.path.isdir(root):
            raise WeightsError("source_path %s is not a directory" % root)
        paths = []
        for base, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            # Links to directories are not walked into, but one that leads out is refused too.
            for name in dirs + names:
                rel = os.path.relpath(os.path.join(base, name), root)
                if not utf8(rel):
                    raise WeightsError("source_path %s holds a name that is not UTF-8 (%r): refused before anything is "
                                       "staged, since it cannot be reported or recorded; rename it" % (root, rel))
                if rel == manifest_name or name.startswith("."):
                    continue
                real = self.source_file(rel)
                if name in names and not os.path.isdir(real):
                    paths.append(rel)
        digests = parallel_map(lambda rel: file_digest(self.source_file(rel), "sha256"), paths, self.workers)
        for rel, digest in digests.items():
            if isinstance(digest, Exception):
                raise WeightsError("cannot read %s: %s" % (os.path.join(root, rel), digest))
        return normalize_manifest([
            {"path": rel, "size": os.path.getsize(self.source_file(rel)), "sha256": digests[rel]} for rel in paths])

    # ----------------------------------------------------------------- current copy

    def current_copy(self):
        if os.path.lexists(self.dest) and not os.path.islink(self.dest):
            raise WeightsError("dest %s exists and is not a link: move it away (or into %s) so that it can be managed"
                               % (self.dest, self.revs))
        if not os.path.islink(self.dest):
            return None, None
        current = link_target(self.dest)
        if os.path.dirname(current) != self.revs or os.path.islink(current):
            raise WeightsError("dest %s is a link to %s, not to a copy in %s: it is not managed by this module; "
                               "remove it first" % (self.dest, current, self.revs))
        return current, copy_marker(current)

    def same_identity(self, marker):
        return all(marker.get(key) == value for key, value in self.identity.items())

    def matches_lock(self, marker):
        """A copy staged without the lock (or for another one) is checked against the source again."""
        if self.lock is None:
            return True
        lock_commit, locked = self.lock
        if marker.get("commit") not in (None, lock_commit):
            return False
        recorded = marker["files"]
        return set(recorded) == set(locked) and all(
            digest_key(recorded[path]) == digest_key(entry) for path, entry in locked.items())

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
        if marker is not None and self.same_identity(marker) and self.matches_lock(marker):
            files = dict((path, dict(entry)) for path, entry in marker["files"].items())
            commit = marker.get("commit")
            self.result["digest_source"] = marker.get("digest_source", "source")
            moved = (self.params["source"] == "hub" and not self.is_pinned_commit()
                     and self.hub_request("resolve", revision=self.params["revision"])["commit"] != commit)
            if moved:
                files, commit = self.wanted()
            else:
                verify_all = self.params["verify"] == "full"
                bad, refreshed = quick_check(current, marker, verify_all, self.workers)
                if verify_all:
                    self.note_inodes(current, [path for path in files if path not in bad], True)
                self.note_inodes(current, bad, False)
                if not bad:
                    return self.keep(current, marker, refreshed)
                self.result["repaired"] = bad
        elif self.module.check_mode:
            # Fetching the manifest could need a client that is only going to be installed.
            self.result.update(changed=True, revision_dir=None)
            return self.result
        else:
            files, commit = self.wanted()
        return self.stage(files, commit, current)

    def note_inodes(self, root, paths, good):
        for path in paths:
            try:
                stat = os.lstat(os.path.join(root, path))
            except OSError:
                continue
            (self.good_inodes if good else self.bad_inodes).add((stat.st_dev, stat.st_ino))

    def keep(self, current, marker, refreshed):
        """The current copy is the wanted one and intact: fix ownership if needed, record the new
        times of files that were touched but still match (so they are not hashed again), report."""
        self.result.update(self.validate(current))
        changed = self.own_revs(dry_run=self.module.check_mode)
        shared = outside_links(self.revs)
        self.warn_shared(current, marker["files"], shared)
        if refreshed and not self.module.check_mode:
            for path, state in refreshed.items():
                marker["files"][path].update(state)
            self.write_marker(current, marker)
        self.result.update(self.summary(current, marker), changed=changed)
        return self.result

    def warn_shared(self, root, files, shared):
        """Name the files left with another owner or mode because they are the source's inodes."""
        left = []
        for path in sorted(files):
            stat = os.lstat(os.path.join(root, path))
            if (stat.st_dev, stat.st_ino) in shared and (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) != (
                    self.uid, self.gid, self.file_mode):
                left.append(path)
        if left:
            self.module.warn("%d file(s) of %s are hard links of files outside %s (link_mode hardlink): their owner "
                             "and mode are the source's and were left as they are (for example %s); stage with "
                             "link_mode copy to own them" % (len(left), root, self.revs, left[0]))

    def write_marker(self, root, marker):
        """The marker is the module's record: root's (in root's directory), readable as the files are."""
        path = os.path.join(root, MARKER_NAME)
        write_json_atomic(path, marker, self.file_mode, self.move)
        apply_ownership(path, os.geteuid(), self.gid, self.file_mode)

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
        if not os.path.lexists(self.revs):
            os.makedirs(self.revs, mode=0o700)
        self.own_revs()
        self.lock_fd = open_lock(self.revs)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            if not os.path.lexists(staging):
                os.mkdir(staging, 0o700)
            apply_ownership(staging, os.geteuid(), self.gid, self.dir_mode)
            self.fill(staging, files, commit, current)
            self.result.update(self.validate(staging))
            final = self.publish(staging, files, commit)
        finally:
            os.close(self.lock_fd)
            self.lock_fd = None
        self.result["revision_dir"] = final
        return self.result

    def own_revs(self, dry_run=False):
        """Give <dest>.revs and what it holds to root (the files to owner), group group.

        An earlier layout gave them to the service user, who could then plant a link where root
        later opens, writes or re-modes a file. <dest>.revs goes first, so that nobody else can add
        or swap a name in it meanwhile, then each copy and staging directory from the top down
        (apply_tree_ownership). Returns whether anything differs (or would, with dry_run)."""
        if not os.path.lexists(self.revs):
            return False
        changed = apply_ownership(self.revs, os.geteuid(), self.gid, self.dir_mode, dry_run)  # refuses a link
        shared = outside_links(self.revs)
        for name in sorted(os.listdir(self.revs)):
            full = os.path.join(self.revs, name)
            stat = os.lstat(full)
            if name == LOCK_NAME:
                changed = apply_ownership(full, os.geteuid(), os.getegid(), 0o600, dry_run) or changed
            elif name == HF_HOME:
                # The hub client's scratch home, only ever root's: anything else there was planted.
                if not statmod.S_ISDIR(stat.st_mode) or stat.st_uid != os.geteuid():
                    changed = True
                    if not dry_run:
                        (shutil.rmtree if statmod.S_ISDIR(stat.st_mode) else os.unlink)(full)
            elif statmod.S_ISDIR(stat.st_mode):
                links = "remove" if name.startswith(STAGING_PREFIX) else "refuse"
                changed = apply_tree_ownership(full, self.uid, self.gid, self.dir_mode, self.file_mode, dry_run,
                                               shared, links) or changed
        return changed

    def verified_copies(self):
        """(directory, marker) of every verified copy in <dest>.revs."""
        for name in sorted(os.listdir(self.revs)):
            full = os.path.join(self.revs, name)
            marker = copy_marker(full) if not name.startswith(".") and not os.path.islink(full) else None
            if marker is not None:
                yield full, marker

    def donors(self):
        """(algo, digest, size) -> [(path, inode)] of files in verified copies that still match
        their markers by size and time; the damaged files' inodes are left out."""
        donors = {}
        for root, marker in self.verified_copies():
            for path, recorded in marker["files"].items():
                full = os.path.join(root, path)
                if not is_regular(full):
                    continue
                stat = os.lstat(full)
                inode = (stat.st_dev, stat.st_ino)
                if inode not in self.bad_inodes and (stat.st_size, stat.st_mtime_ns) == (
                        recorded["size"], recorded.get("mtime_ns")):
                    donors.setdefault(digest_key(recorded), []).append((full, inode))
        return donors

    def sound_donor(self, candidates, entry):
        """A donor to link: with verify full, one whose content was hashed (here or earlier in
        this run) and matched; a hard link of damaged data must not "repair" anything."""
        for full, inode in candidates:
            if inode in self.bad_inodes:
                continue
            if self.params["verify"] == "full" and inode not in self.good_inodes:
                good = file_digest(full, entry["algo"]) == entry["digest"]
                (self.good_inodes if good else self.bad_inodes).add(inode)
                if not good:
                    continue
            return full
        return None

    def fill(self, staging, files, commit, current):
        journal = Journal(staging, self.move)
        pending = [path for path in sorted(files) if not journal.trusted(staging, path, files[path])]
        present = [path for path in pending if is_regular(os.path.join(staging, path))]
        mismatched = set(verify_files(staging, files, present, self.workers))
        for path in present:
            if path in mismatched:
                os.unlink(os.path.join(staging, path))
            else:
                self.finish_file(staging, path, files[path], journal)
        pending = [path for path in pending if path not in present or path in mismatched]

        donors = self.donors()
        to_fetch = []
        for path in pending:
            donor = self.sound_donor(donors.get(digest_key(files[path]), []), files[path])
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
        if self.copied_not_linked:
            self.module.warn("%d file(s) of %s copied instead of hard-linked: their owner, group or mode differ from "
                             "the wanted ones, and a hard link would change the source's (for example %s)"
                             % (len(self.copied_not_linked), self.params["source_path"],
                                sorted(self.copied_not_linked)[0]))
        self.remove_strays(staging, files)

    def link(self, donor, target):
        make_parents(self.revs, os.path.relpath(target, self.revs))
        if os.path.lexists(target):
            os.unlink(target)
        try:
            os.link(donor, target, follow_symlinks=False)
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
        mirror = self.mirror_source() if self.params["source"] == "mirror" else None

        def fetch(path):
            full = os.path.join(staging, path)
            make_parents(staging, path)
            used = "copy"
            if mirror is not None:
                transfer(mirror, path, full + ".part", files[path], self.params["retries"], self.count_bytes)
            else:
                real = self.source_file(path)
                # A file reached through a link is always copied: linking it would share what it leads to.
                mode = "copy" if self.source_files[path][1] else self.params["link_mode"]
                used = copy_local(real, full + ".part", files[path], mode, self.count_bytes,
                                  owner=(self.uid, self.gid, self.file_mode))
                if mode == "hardlink" and used != "hardlink":
                    self.copied_not_linked.append(path)
            os.replace(full + ".part", full)
            # A hard link is the source's inode, made only where its owner and mode are already right.
            self.finish_file(staging, path, files[path], journal, owned=used != "hardlink")

        return self.collect(parallel_map(fetch, to_fetch, self.workers))

    def fetch_from_hub(self, staging, files, commit, to_fetch, journal):
        """The helper downloads into <staging>/<path>.part (kept for the next run when cut), hashing
        while it writes; only its digests are compared here, nothing is read twice."""
        if not to_fetch:
            return {}
        for path in to_fetch:
            make_parents(staging, path)
        answer = self.hub_request("fetch", commit=commit, local_dir=staging, workers=self.workers, files=[
            dict(files[path], path=path) for path in to_fetch])
        errors = {}
        for path in to_fetch:
            done = answer["files"].get(path) or {"error": "the hub client gave no answer", "read": 0}
            self.count_bytes(done.get("read", 0))
            full = os.path.join(staging, path)
            if done.get("error"):
                errors[path] = done["error"]
            elif done["size"] != files[path]["size"] or done["digest"] != files[path]["digest"]:
                os.unlink(full + ".part")
                errors[path] = "%s %s does not match the expected %s" % (files[path]["algo"], done["digest"],
                                                                         files[path]["digest"])
            else:
                os.replace(full + ".part", full)
                self.finish_file(staging, path, files[path], journal)
                self.result["fetched_files"].append(path)
        return errors

    def collect(self, results):
        errors = {}
        for path, outcome in sorted(results.items()):
            if isinstance(outcome, Exception):
                errors[path] = str(outcome)
            else:
                self.result["fetched_files"].append(path)
        return errors

    def finish_file(self, staging, path, entry, journal, owned=True):
        if owned:
            apply_ownership(os.path.join(staging, path), self.uid, self.gid, self.file_mode)
        journal.record(staging, path, entry)

    def remove_strays(self, staging, files):
        """Leave exactly the manifest's files: leftovers of earlier attempts go."""
        for base, dirs, names in os.walk(staging, topdown=False):
            for name in names:
                full = os.path.join(base, name)
                rel = os.path.relpath(full, staging)
                if rel not in files and rel != JOURNAL_NAME:
                    os.unlink(full)
            for name in dirs:
                full = os.path.join(base, name)
                if os.path.islink(full):
                    os.unlink(full)
                elif not os.listdir(full):
                    os.rmdir(full)

    def publish(self, staging, files, commit):
        """Write the marker, move the copy into place, switch the link, prune old copies."""
        journal = Journal(staging)
        marker = dict(self.identity, commit=commit, digest_source=self.result["digest_source"],
                      verified_at=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      files={})
        for path, entry in files.items():
            marker["files"][path] = dict(entry, mtime_ns=journal.entries[path]["mtime_ns"])
        apply_tree_ownership(staging, self.uid, self.gid, self.dir_mode, self.file_mode,
                             shared=outside_links(self.revs))
        self.write_marker(staging, marker)
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
        if self.lock is None:
            self.module.warn("%s: the expected digests came from the source itself (%s); pin them with a lock file "
                             "(option lock)" % (self.dest, self.params["source"]))
        return final

    def prune(self, final, marker):
        """Keep keep_previous earlier copies of other revisions; drop replaced copies and stale staging."""
        earlier = []
        for name in os.listdir(self.revs):
            full = os.path.join(self.revs, name)
            if full == final or os.path.islink(full) or not os.path.isdir(full):
                continue
            if name.startswith(STAGING_PREFIX) or name == HF_HOME:
                shutil.rmtree(full)
                continue
            other = read_json(os.path.join(full, MARKER_NAME)) or {}
            if other.get("revision") == marker["revision"] and other.get("commit") == marker["commit"]:
                shutil.rmtree(full)  # a damaged copy of this very revision, now replaced
            else:
                earlier.append((other.get("verified_at") or "", full))
        for _verified_at, full in sorted(earlier, reverse=True)[self.params["keep_previous"]:]:
            shutil.rmtree(full)


def check_params(params):
    """Refuse bad input before anything is read or written, naming the option."""
    dest = params["dest"]
    if not dest.startswith("/") or os.path.normpath(dest) != dest or dest == "/" or not dest.isprintable() \
            or not utf8(dest):
        raise WeightsError("dest %r must be an absolute, normalised path (no '~', '..', '.', trailing '/' or control "
                           "characters)" % dest)
    check_manifest_name(params["manifest_name"])
    if params["repo_id"] is not None:
        check_repo_id(params["repo_id"])
    check_revision(params["revision"])
    if params["source"] == "mirror":
        check_url(params["mirror_url"], "mirror_url")
    if params["source"] == "path" and not os.path.isabs(params["source_path"]):
        raise WeightsError("source_path %r must be an absolute path" % params["source_path"])
    for name in ("dir_mode", "file_mode"):
        if not re.match(r"^0?[0-7]{3,4}$", params[name]):
            raise WeightsError("%s must be an octal mode such as 0755, not %r" % (name, params[name]))
        if int(params[name], 8) & 0o7022:
            # Root creates, renames and re-modes files there: nobody else may change a name in it.
            raise WeightsError("%s %s lets the group or others write (or sets a special bit): the weights are root's, "
                               "read by the group" % (name, params[name]))
    for name, least in (("workers", 1), ("timeout", 1), ("retries", 0), ("keep_previous", 0), ("reserve_bytes", 0)):
        if params[name] < least:
            raise WeightsError("%s must be at least %d, not %d" % (name, least, params[name]))


def fact_key(params):
    """Target and drafter are found by their kind; any other model by its name (dest's last part)."""
    if params["kind"] in ("target", "drafter"):
        return params["kind"]
    return os.path.basename(os.path.normpath(params["dest"]))


def fact_entry(params, result):
    """What role model_weights records of a staged model for role sglang_service."""
    entry = {"path": result["path"], "source": params["source"], "repo_id": params["repo_id"],
             "revision": result["revision"], "commit": result.get("commit"), "bytes": result.get("bytes", 0),
             "files": result.get("files", 0), "digest_source": result.get("digest_source"),
             "verified_at": result.get("verified_at")}
    entry.update(result.get("config") or {})
    if "dflash" in result:
        entry["dflash"] = result["dflash"]
    return entry


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="str", required=True),
            source=dict(type="str", required=True, choices=["hub", "mirror", "path"]),
            repo_id=dict(type="str"),
            revision=dict(type="str", required=True),
            lock=dict(type="dict"),
            mirror_url=dict(type="str"),
            source_path=dict(type="path"),
            link_mode=dict(type="str", default="copy", choices=list(LINK_MODES)),
            source_symlinks=dict(type="str", default="refuse", choices=list(SOURCE_SYMLINKS)),
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
    try:
        check_params(module.params)
    except WeightsError as exc:
        module.fail_json(msg=mask_secrets(str(exc)))
    for name, lookup in (("owner", pwd.getpwnam), ("group", grp.getgrnam)):
        try:
            lookup(module.params[name])
        except KeyError:
            if module.check_mode:
                # A check run on a host where the account is only going to be created.
                module.exit_json(changed=True, msg="%s %s does not exist yet" % (name, module.params[name]))
            module.fail_json(msg="%s %r does not exist on this host" % (name, module.params[name]))
    try:
        stager = Stager(module)
    except WeightsError as exc:
        module.fail_json(msg=mask_secrets(str(exc)))
    try:
        result = stager.run()
    except WeightsError as exc:
        module.fail_json(msg=mask_secrets(str(exc)), **stager.result)
    result.update(fact_key=fact_key(module.params), fact=fact_entry(module.params, result))
    module.exit_json(**result)


if __name__ == "__main__":
    main()

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stager: the run of model_stage, from the copy in place (kept when intact, repaired when not) to
a new copy staged beside it from the hub, a mirror or a path, checked, published by switching
the link, and the earlier copies pruned.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import datetime
import fcntl
import grp
import os
import pwd
import re
import shutil
import stat as statmod
import threading

from ansible_collections.pro6000.inference.plugins.module_utils._progress import ProgressWriter
from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import (
    COMMIT_RE, drafter_facts, load_config, target_facts, utf8,
)
from ansible_collections.pro6000.inference.plugins.module_utils._weights.copy import copy_local, resolve_source
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError
from ansible_collections.pro6000.inference.plugins.module_utils._weights.files import (
    apply_ownership, file_digest, free_bytes, fsync_dir, human_bytes, is_regular, make_parents, open_regular,
    parallel_map, switch_link,
)
from ansible_collections.pro6000.inference.plugins.module_utils._weights.hub import helper_environment, run_helper
from ansible_collections.pro6000.inference.plugins.module_utils._weights.lock import (
    check_against_lock, lock_files, manifest_bytes, normalize_manifest, parse_manifest_document,
)
from ansible_collections.pro6000.inference.plugins.module_utils._weights.transfer import HttpSource, transfer
from ansible_collections.pro6000.inference.plugins.module_utils._weights.tree import (
    LOCK_NAME, MARKER_NAME, STAGING_PREFIX, Donors, Journal, apply_tree_ownership, copy_marker, digest_key, link_target,
    marker_identity, open_lock, outside_links, quick_check, read_json, remove_strays, verify_files, write_json_atomic,
)


# The hub client's home (HF_HOME) while it runs, in <dest>.revs.
HF_HOME = ".hf-home"


def safe_name(text):
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


class Stager:
    """One run of model_stage for one model, on the module's params; check mode, warnings and
    atomic moves are the module's (AnsibleModule)."""

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
        self.donors = Donors(self.revs, params["verify"] == "full")
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
                    self.donors.note(current, [path for path in files if path not in bad], True)
                self.donors.note(current, bad, False)
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

        donors = self.donors.index()
        to_fetch = []
        for path in pending:
            donor = self.donors.sound(donors.get(digest_key(files[path]), []), files[path])
            if donor is None or not self.link(donor, os.path.join(staging, path)):
                to_fetch.append(path)
                continue
            self.result["linked_files"] += 1
            journal.record(staging, path, files[path])

        self.check_space(staging, files, to_fetch)
        with self.progress(staging, files, to_fetch):
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
        remove_strays(staging, files)

    def progress(self, staging, files, to_fetch):
        """Keeps progress_file up to date while the files to fetch land: each counts with its
        partial file (a transfer's or the hub client's <path>.part) until it is renamed into place."""
        if not self.params["progress_file"] or not to_fetch:
            return contextlib.nullcontext()

        def measure():
            done, files_done = 0, 0
            for path in to_fetch:
                full = os.path.join(staging, path)
                for candidate, finished in ((full, True), (full + ".part", False)):
                    try:
                        done += os.stat(candidate).st_size
                    except FileNotFoundError:
                        continue
                    files_done += finished
                    break
            return done, files_done

        return ProgressWriter(self.params["progress_file"], "copy" if self.params["source"] == "path" else "download",
                              measure,
                              sum(files[path]["size"] for path in to_fetch), len(to_fetch))

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

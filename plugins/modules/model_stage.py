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
        with M(pro6000.inference.model_lock) (playbook C(pro6000.inference.lock)).
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
  progress_file:
    description:
      - While files are fetched, a JSON document at this path says the bytes done and to do, the
        files done and when the fetch began, rewritten every second and removed at the end.
      - Module M(pro6000.inference.work_progress) reads it while this module runs as an
        asynchronous job (C(async), C(poll=0)) and reports bytes done, rate and time left.
      - Nothing is written when nothing is fetched (the copy in place is kept, or all files are
        linked from earlier copies).
    type: path
extends_documentation_fragment:
  - pro6000.inference.hub
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

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pro6000.inference.plugins.module_utils._weights.checks import check_params
from ansible_collections.pro6000.inference.plugins.module_utils._weights.copy import LINK_MODES, SOURCE_SYMLINKS
from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError, mask_secrets
from ansible_collections.pro6000.inference.plugins.module_utils._weights.stager import Stager


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
            progress_file=dict(type="path"),
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

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: host_state
short_description: Compare, in one module run, what a role manages on a host with what it wants
version_added: 0.1.0
description:
  - Reads the files, Debian packages, systemd units and local fact record that a role manages,
    compares each with the wanted state given, and returns every difference as a sentence in
    RV(drift).
  - One module run, one C(dpkg-query) and one C(systemctl show) at most. The roles of this
    collection call it first and run their install and configure phases only when RV(drift) is
    not empty, so that a host that is as wanted costs one remote execution per role.
  - First fails on any broken variable rule of O(rules), naming them all, so that one task checks
    a role's input and its host.
  - A file's wanted content is given by a role template or a content, which the module's action
    plugin renders on the controller with the task's variables (the role's own search path, as
    M(ansible.builtin.template)); the host receives its SHA-1 only. So one list per role, with
    what the role's change step also reads (O(files[].validate), O(files[].notify)), drives both.
  - Never changes anything. What it does not read (a package's files, a unit's drop-ins the role
    did not name) it cannot see, so a role names everything it writes. Files are hashed whole, so
    name configuration files, not model weights.
options:
  rules:
    description:
      - The role's variable rules that its argument spec cannot express, each with the variable's
        name, its value, whether the rule holds (evaluated on the controller) and why.
      - When any rule is broken the module fails with one message naming every broken rule,
        as C(name = value) and why, before it reads anything.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The variable, or variables, the rule is about.
        type: str
        required: true
      value:
        description: Its value as shown in the message, never a secret (show V((hidden)) instead).
        type: raw
      rule:
        description: Whether the rule holds.
        type: bool
        required: true
      why:
        description: What the rule asks for.
        type: str
        required: true
  warnings:
    description: Messages about the wanted state to show as warnings (a pinned release past its support, say).
    type: list
    elements: str
    default: []
  expect:
    description:
      - Values the controller already knows (facts another module gathered, say) and the value
        each must have, so that one list names every difference. Compared as O(record.match) is.
    type: list
    elements: dict
    default: []
    suboptions:
      what:
        description: What the value is, as the drift sentence names it.
        type: str
        required: true
      found:
        description: The value found.
        type: raw
      wanted:
        description: The value it must have.
        type: raw
  files:
    description: Paths and what each must be. Only the keys given are compared.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path on the host.
        type: path
        required: true
      state:
        description:
          - V(file) a regular file, V(directory), V(link) a symbolic link, V(absent) nothing
            at all (not even a dangling link).
        type: str
        choices: [file, directory, link, absent]
        default: file
      checksum:
        description:
          - SHA-1 of the file's content, as M(ansible.builtin.stat) and M(ansible.builtin.template)
            compute it. Usually left to the action plugin, which computes it from O(files[].template)
            or O(files[].content).
        type: str
      secret_checksum:
        description:
          - SHA-1 of a secret file's wanted content, which the action plugin computes from
            O(files[].content) or from a O(files[].template) with O(files[].secret). Never logged, and
            the returned RV(files) carry no checksum of that file.
        type: str
      template:
        description:
          - A template of the role the task runs in (its C(templates/) first, as
            M(ansible.builtin.template) searches), rendered on the controller with the task's
            variables as that module renders it; only its SHA-1 reaches the host.
        type: str
      template_vars:
        description:
          - Variables the template sees besides the task's, as P(ansible.builtin.template#lookup) takes them,
            so that one template is rendered for each of several items (a replica per entry) as a task
            looping with C(loop_var) renders it.
        type: dict
      variable_start_string:
        description: The template's variable start delimiter, as M(ansible.builtin.template) takes it.
        type: str
      variable_end_string:
        description: The template's variable end delimiter, as M(ansible.builtin.template) takes it.
        type: str
      content:
        description:
          - The wanted content itself, for a file that holds a secret (an API key, a token). It stays
            on the controller (the host gets its SHA-1 only), it is never logged, and the returned
            RV(files) carry no checksum of it.
        type: str
      secret:
        description:
          - Whether the rendered file holds a secret, so that its checksum goes to the host as
            O(files[].secret_checksum). Without it, a O(files[].content) is a secret and a
            O(files[].template) is not.
        type: bool
      validate:
        description:
          - Not compared. The command the role's change step checks the file with before it replaces
            the old one (M(ansible.builtin.template)'s O(ansible.builtin.template#module:validate)),
            allowed here so that one list serves the comparison and the change.
        type: str
      notify:
        description: Not compared. The handlers the role's change step notifies when the file changes, as O(files[].validate) is allowed.
        type: list
        elements: str
      src:
        description: For O(files[].state=link), the link's target exactly as written.
        type: str
      owner:
        description: Owner's user name.
        type: str
      group:
        description: Group name.
        type: str
      mode:
        description: Permission bits as an octal string, for example V('0644').
        type: str
  packages:
    description:
      - Debian package name to the wanted version, compared with what C(dpkg-query) lists as
        installed (status C(ii), C(hi) or C(iU) counts as installed).
      - An exact version (V(590.48.01-1ubuntu1)), V(present) for any version, or V(absent).
    type: dict
    default: {}
  units:
    description: systemd units and the state each must be in. Only the keys given are compared.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Unit name; C(.service) is added when it has no suffix.
        type: str
        required: true
      active:
        description: Whether the unit must be active (V(true)) or must not be (V(false)).
        type: bool
      enabled:
        description:
          - Whether the unit must start at boot. Enabled means what C(systemctl is-enabled)
            answers with success (C(enabled), C(enabled-runtime), C(static), C(alias),
            C(indirect), C(generated), C(transient)), as M(ansible.builtin.systemd_service) reads it.
        type: bool
  weights:
    description:
      - Model copies that M(pro6000.inference.model_stage) staged, each checked the way that
        module checks a copy it keeps - the link points into C(<path>.revs/), the copy's marker
        (C(.model_weights.json)) holds the wanted identity, and every file has the size and
        modification time the marker recorded (content hashed only where the time moved; a file
        touched but intact is still reported, so that model_stage records its new time).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The link model_stage manages (its O(pro6000.inference.model_stage#module:dest)).
        type: path
        required: true
      identity:
        description: Marker keys and the values they must hold (C(source), C(repo_id), C(revision), the patterns).
        type: dict
        default: {}
      owner:
        description:
          - Owner of the copy's files, as model_stage's O(pro6000.inference.model_stage#module:owner).
            The directories (C(<path>.revs/) and the copy's) and the marker must belong to the user
            this module runs as, as model_stage leaves them.
        type: str
        default: root
      group:
        description:
          - Group of C(<path>.revs/) and of everything in the copy. Without it, owner, group and
            modes are not compared.
        type: str
      dir_mode:
        description: Octal mode of C(<path>.revs/) and the copy's directories.
        type: str
        default: "0755"
      file_mode:
        description: Octal mode of the copy's files and marker.
        type: str
        default: "0644"
  record:
    description:
      - The local fact file a role wrote (C(<fact_path>/<name>.fact), JSON) and the values some
        of its keys must have; a missing or unreadable record is drift. Values compare as JSON, numbers and booleans also against their
        string form (templating turns C(16) into V('16')).
    type: dict
    suboptions:
      name:
        description: Fact name, the file name without C(.fact).
        type: str
        required: true
      match:
        description: Key to the value the record must hold.
        type: dict
        default: {}
      fact_path:
        description: Directory of the local fact files.
        type: path
        default: /etc/ansible/facts.d
extends_documentation_fragment:
  - pro6000.inference.attributes
  - pro6000.inference.attributes.read_only
notes:
  - Units are read with C(systemctl show); where systemd is not the init system (a chroot, a
    container without it) every unit is reported as unreadable, which is drift.
  - Packages are read with C(dpkg-query); a host without it reports every package as unreadable.
author:
  - pro6000.inference developers (@pro6000)
"""

EXAMPLES = r"""
- name: Check the variables, then compare the host with what the role recorded and wants
  pro6000.inference.host_state:
    rules:
      - name: cuda_toolkit_default_version
        value: "{{ cuda_toolkit_default_version }}"
        rule: "{{ cuda_toolkit_default_version in cuda_toolkit_versions }}"
        why: must be one of cuda_toolkit_versions
    files:
      - path: /etc/profile.d/cuda.sh
        template: cuda.sh.j2
        owner: root
        mode: "0644"
      - path: /usr/local/cuda
        state: link
        src: /etc/alternatives/cuda
    packages:
      cuda-toolkit-13-1: 13.1.1-1
    units:
      - name: nvidia-persistenced
        active: true
        enabled: true
    record:
      name: cuda_toolkit
      match:
        default_version: "13.1"
  register: cuda_state

- name: Install and configure only when something differs
  ansible.builtin.include_tasks: converge.yml
  when: cuda_state.drift | length > 0
"""

RETURN = r"""
drift:
  description: One sentence per difference, in the order expect, files, weights, packages, units, record; empty when the host is as wanted.
  returned: always
  type: list
  elements: str
  sample: ["/etc/profile.d/cuda.sh: content differs from the wanted one", "package cuda-toolkit-13-1: not installed, wanted 13.1.1-1"]
files:
  description:
    - What was found at each path of O(files), in the same order and shape, so that a role can
      record what it wrote and give it back as O(files) on a later run; a regular file's
      C(checksum) always (SHA-1).
  returned: always
  type: list
  elements: dict
  sample:
    - {"path": "/usr/local/cuda", "state": "link", "src": "/etc/alternatives/cuda", "owner": "root", "group": "root", "mode": "0777"}
    - {"path": "/etc/profile.d/cuda.sh", "state": "file", "checksum": "69326d7bb6ecce0fe23f1634f2ebc7c092b83d03", "owner": "root",
       "group": "root", "mode": "0644"}
packages:
  description: Installed version of each package of O(packages), V(null) when it is not installed.
  returned: always
  type: dict
  sample: {"cuda-toolkit-13-1": "13.1.1-1"}
units:
  description: Each unit of O(units) as C(systemctl show) reports it.
  returned: always
  type: dict
  sample: {"nvidia-persistenced.service": {"load": "loaded", "active": "active", "enabled": "enabled", "invocation": "0f8e..."}}
record:
  description: The content of the fact file of O(record), V(null) when it is missing or not JSON.
  returned: always
  type: dict
"""

import grp
import json
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pro6000.inference.plugins.module_utils._weights.errors import WeightsError
from ansible_collections.pro6000.inference.plugins.module_utils._weights.files import apply_ownership
from ansible_collections.pro6000.inference.plugins.module_utils._weights.tree import (
    apply_tree_ownership, copy_marker, link_target, outside_links, quick_check,
)

FILE_TYPES = {"file": stat.S_ISREG, "directory": stat.S_ISDIR, "link": stat.S_ISLNK}
# systemctl is-enabled answers with success for these (systemctl(1), is-enabled).
ENABLED_STATES = {"enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "transient"}
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState", "InvocationID")


def _kind(mode):
    return next((name for name, test in FILE_TYPES.items() if test(mode)), "other")


def _name(lookup, number):
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)


def read_file(module, path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"path": path, "state": "absent"}
    found = {"path": path, "state": _kind(info.st_mode), "owner": _name(pwd.getpwuid, info.st_uid),
             "group": _name(grp.getgrgid, info.st_gid), "mode": "%04o" % stat.S_IMODE(info.st_mode)}
    if found["state"] == "link":
        found["src"] = os.readlink(path)
    elif found["state"] == "file":
        found["checksum"] = module.sha1(path)
    return found


def file_drift(spec, found):
    path, wanted = spec["path"], spec["state"]
    if found["state"] != wanted:
        return ["%s: %s, wanted %s" % (path, "missing" if found["state"] == "absent" else "a " + found["state"], wanted)]
    if wanted == "absent":
        return []
    drift = []
    wanted_checksum = spec.get("checksum") or spec.get("secret_checksum")
    if wanted_checksum and found.get("checksum") != wanted_checksum:
        drift.append("%s: content differs from the wanted one" % path)
    if spec.get("src") is not None and found.get("src") != spec["src"]:
        drift.append("%s: points at %s, wanted %s" % (path, found.get("src"), spec["src"]))
    for key in ("owner", "group"):
        if spec.get(key) and found[key] != spec[key]:
            drift.append("%s: %s %s, wanted %s" % (path, key, found[key], spec[key]))
    if spec.get("mode") and int(found["mode"], 8) != int(spec["mode"], 8):
        drift.append("%s: mode %s, wanted %s" % (path, found["mode"], spec["mode"]))
    return drift


def weights_drift(spec):
    """model_stage's own check of the copy it keeps (Stager.current_copy, quick_check)."""
    path = spec["path"]
    if not os.path.islink(path):
        return ["weights %s: no staged copy (not a link)" % path]
    target = link_target(path)
    marker = copy_marker(target) if os.path.dirname(target) == path + ".revs" else None
    if marker is None:
        return ["weights %s: %s holds no verified copy" % (path, target)]
    drift = ["weights %s: %s is %s, wanted %s" % (path, key, json.dumps(marker.get(key)), json.dumps(wanted))
             for key, wanted in sorted(spec["identity"].items()) if canonical(marker.get(key)) != canonical(wanted)]
    if drift:
        return drift
    bad, touched = quick_check(target, marker, False, 1)
    if bad:
        drift.append("weights %s: missing or changed since verified: %s" % (path, ", ".join(bad)))
    if touched:
        drift.append("weights %s: touched since verified (content intact): %s" % (path, ", ".join(sorted(touched))))
    return drift + ownership_drift(path, target, spec)


def ownership_drift(path, copy, spec):
    """Owner, group and modes of <path>.revs and the copy as model_stage gives them (its own
    apply_tree_ownership, told only): directories and records the user this runs as (root)."""
    if spec["group"] is None:
        return []
    try:
        uid = pwd.getpwnam(spec["owner"]).pw_uid
        gid = grp.getgrnam(spec["group"]).gr_gid
    except KeyError:
        return ["weights %s: owner %s or group %s does not exist" % (path, spec["owner"], spec["group"])]
    revs = path + ".revs"
    dir_mode, file_mode = int(spec["dir_mode"], 8), int(spec["file_mode"], 8)
    try:
        differs = apply_ownership(revs, os.geteuid(), gid, dir_mode, dry_run=True) or apply_tree_ownership(
            copy, uid, gid, dir_mode, file_mode, dry_run=True, shared=outside_links(revs))
    except WeightsError as exc:
        return ["weights %s: %s" % (path, exc)]
    if not differs:
        return []
    return ["weights %s: owner, group or mode in %s differ from the wanted ones (directories and the marker root's, "
            "files %s's, group %s, modes %s and %s)" % (path, revs, spec["owner"], spec["group"], spec["dir_mode"],
                                                        spec["file_mode"])]


def read_packages(module, names):
    """Installed version per name (None when not installed); an Exception's text when dpkg-query cannot run."""
    if not names:
        return {}
    dpkg_query = module.get_bin_path("dpkg-query")
    if not dpkg_query:
        return "dpkg-query is not installed"
    # Unknown names go to stderr (exit status 1); the known ones are still listed.
    _rc, out, _err = module.run_command([dpkg_query, "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n", "--"] + names)
    installed = dict.fromkeys(names)
    for line in out.splitlines():
        package, abbrev, version = (line.split("\t") + ["", ""])[:3]
        # Desired action, then status: "ii" installed, "hi" held, "iU" unpacked but not configured.
        if package in installed and len(abbrev) > 1 and abbrev[1] in "iU" and version:
            installed[package] = version
    return installed


def package_drift(name, wanted, version):
    if wanted == "absent":
        return [] if version is None else ["package %s: installed at %s, wanted absent" % (name, version)]
    if version is None:
        return ["package %s: not installed, wanted %s" % (name, wanted)]
    if wanted not in ("present", version):
        return ["package %s: at %s, wanted %s" % (name, version, wanted)]
    return []


def unit_name(name):
    return name if "." in name else name + ".service"


def parse_systemctl_show(out, names):
    """`systemctl show -p ...` prints one block of KEY=VALUE lines per unit, in the order asked,
    blocks separated by an empty line."""
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
              for block in out.strip().split("\n\n")]
    units = {}
    for name, block in zip(names, blocks):
        units[name] = {"load": block.get("LoadState", ""), "active": block.get("ActiveState", ""),
                       "enabled": block.get("UnitFileState", ""), "invocation": block.get("InvocationID", "")}
    return units


def read_units(module, names):
    if not names:
        return {}
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return "systemctl is not installed"
    rc, out, err = module.run_command([systemctl, "show", "--property=" + ",".join(UNIT_PROPERTIES), "--"] + names)
    if rc != 0:
        return "systemctl show failed: %s" % (err.strip() or out.strip() or "exit status %d" % rc)
    return parse_systemctl_show(out, names)


def unit_drift(spec, found):
    name = unit_name(spec["name"])
    if found["load"] != "loaded":
        return ["unit %s: %s, wanted installed" % (name, found["load"] or "unknown")]
    drift = []
    if spec.get("active") is not None and (found["active"] == "active") != spec["active"]:
        drift.append("unit %s: %s, wanted %s" % (name, found["active"], "active" if spec["active"] else "inactive"))
    if spec.get("enabled") is not None and (found["enabled"] in ENABLED_STATES) != spec["enabled"]:
        wanted = "enabled" if spec["enabled"] else "disabled"
        drift.append("unit %s: %s at boot, wanted %s" % (name, found["enabled"] or "unknown", wanted))
    return drift


def canonical(value):
    """JSON values as templating may hand them over: 16 and '16', true and 'True' compare equal."""
    if isinstance(value, dict):
        return {str(key): canonical(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value)
    return text.lower() if text in ("True", "False") else text


def read_record(path):
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def record_drift(spec, record):
    label = spec["name"] + ".fact"
    if record is None:
        return ["%s: no record, wanted one" % label]
    drift = []
    for key, wanted in spec["match"].items():
        if key not in record:
            drift.append("%s: no %s, wanted %s" % (label, key, json.dumps(wanted, sort_keys=True)))
        elif canonical(record[key]) != canonical(wanted):
            drift.append("%s: %s is %s, wanted %s" % (label, key, json.dumps(record[key], sort_keys=True),
                                                      json.dumps(wanted, sort_keys=True)))
    return drift


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rules=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                value=dict(type="raw"),
                rule=dict(type="bool", required=True),
                why=dict(type="str", required=True),
            )),
            warnings=dict(type="list", elements="str", default=[]),
            expect=dict(type="list", elements="dict", default=[], options=dict(
                what=dict(type="str", required=True),
                found=dict(type="raw"),
                wanted=dict(type="raw"),
            )),
            files=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                state=dict(type="str", choices=["file", "directory", "link", "absent"], default="file"),
                checksum=dict(type="str"),
                secret_checksum=dict(type="str", no_log=True),
                template=dict(type="str"),
                template_vars=dict(type="dict"),
                variable_start_string=dict(type="str"),
                variable_end_string=dict(type="str"),
                content=dict(type="str", no_log=True),
                secret=dict(type="bool"),
                validate=dict(type="str"),
                notify=dict(type="list", elements="str"),
                src=dict(type="str"),
                owner=dict(type="str"),
                group=dict(type="str"),
                mode=dict(type="str"),
            )),
            packages=dict(type="dict", default={}),
            units=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                active=dict(type="bool"),
                enabled=dict(type="bool"),
            )),
            weights=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                identity=dict(type="dict", default={}),
                owner=dict(type="str", default="root"),
                group=dict(type="str"),
                dir_mode=dict(type="str", default="0755"),
                file_mode=dict(type="str", default="0644"),
            )),
            record=dict(type="dict", options=dict(
                name=dict(type="str", required=True),
                match=dict(type="dict", default={}),
                fact_path=dict(type="path", default="/etc/ansible/facts.d"),
            )),
        ),
        supports_check_mode=True,
    )
    params = module.params
    broken = [rule for rule in params["rules"] if not rule["rule"]]
    if broken:
        module.fail_json(msg="; ".join("%s = %s: %s" % (rule["name"], json.dumps(rule["value"], sort_keys=True), rule["why"])
                                       for rule in broken) + ".")
    for warning in params["warnings"]:
        module.warn(warning)
    for spec in params["files"]:
        if spec["mode"] is not None and not (spec["mode"].isdigit() and set(spec["mode"]) <= set("01234567")):
            module.fail_json(msg="files[%s].mode = %r: must be an octal string such as '0644'" % (spec["path"], spec["mode"]))
        if spec["template"] is not None or spec["template_vars"] is not None or spec["content"] is not None:
            module.fail_json(msg="files[%s]: a template or content is rendered by this module's action plugin on the "
                                 "controller; run the module as pro6000.inference.host_state" % spec["path"])
        if spec["checksum"] and spec["secret_checksum"]:
            module.fail_json(msg="files[%s]: checksum and secret_checksum are alternatives, give one" % spec["path"])
        if spec["src"] is not None and spec["state"] != "link":
            module.fail_json(msg="files[%s].src is given but state is %s: src is a link's target" % (spec["path"], spec["state"]))
    bad_versions = sorted(name for name, version in params["packages"].items() if not isinstance(version, str) or not version)
    if bad_versions:
        module.fail_json(msg="packages %s: each needs a version string, 'present' or 'absent'" % ", ".join(bad_versions))

    drift = ["%s: %s, wanted %s" % (item["what"], json.dumps(item["found"], sort_keys=True), json.dumps(item["wanted"], sort_keys=True))
             for item in params["expect"] if canonical(item["found"]) != canonical(item["wanted"])]
    files = [read_file(module, spec["path"]) for spec in params["files"]]
    drift += [line for spec, found in zip(params["files"], files) for line in file_drift(spec, found)]
    for spec, found in zip(params["files"], files):
        if spec["secret_checksum"]:
            found.pop("checksum", None)

    for spec in params["weights"]:
        drift += weights_drift(spec)

    packages = read_packages(module, sorted(params["packages"]))
    if isinstance(packages, str):
        drift.append("packages unreadable: %s" % packages)
        packages = {}
    else:
        for name in sorted(packages):
            drift += package_drift(name, params["packages"][name], packages[name])

    names = [unit_name(spec["name"]) for spec in params["units"]]
    units = read_units(module, names)
    if isinstance(units, str):
        drift.append("units unreadable: %s" % units)
        units = {}
    else:
        for spec in params["units"]:
            drift += unit_drift(spec, units[unit_name(spec["name"])])

    record = None
    if params["record"]:
        spec = params["record"]
        record = read_record(os.path.join(spec["fact_path"], spec["name"] + ".fact"))
        drift += record_drift(spec, record)

    module.exit_json(changed=False, drift=drift, files=files, packages=packages, units=units, record=record)


if __name__ == "__main__":
    main()

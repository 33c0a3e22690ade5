# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decides how role nvidia_driver pins the wanted driver with what the repository offers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nvidia_driver_pin_plan
short_description: Choose the pinning package and the package version of the wanted NVIDIA driver
version_added: "0.1.0"
description:
  - From driver branch 590 on, NVIDIA's apt repositories choose the driver through pinning
    packages, C(nvidia-driver-pinning-<version>) for an exact version and
    C(nvidia-driver-pinning-<branch>) for the newest of a branch.
  - Not every repository layout ships the exact one for every release. When the version is set,
    its pinning package is missing, but the branch one and the version itself are there, the plan
    falls back to the branch pinning package plus an exact version pin written by the role
    (C(exact_pin) true).
  - A plan that cannot be satisfied comes back with C(error), which names the packages looked for.
options:
  _input:
    description:
      - Lines of C(apt-cache madison) for the pinning packages looked for, each
        C(<package> | <version> | <source>).
    type: list
    elements: str
    required: true
  driver_lines:
    description: Lines of C(apt-cache madison) for the driver's kernel module package, newest first.
    type: list
    elements: str
    required: true
  branch:
    description: The wanted branch, such as C(595).
    type: str
    required: true
  version:
    description: The wanted exact version, such as C(595.71.05); empty for the newest of the branch.
    type: str
    required: true
  kernel_package:
    description: Name of the kernel module package whose versions O(driver_lines) lists (for messages).
    type: str
    required: true
  repository:
    description: Where the repository is (for messages).
    type: str
    required: true
author:
  - pro6000.inference developers
"""

EXAMPLES = r"""
- name: Decide the pinning package and the package version
  ansible.builtin.set_fact:
    plan: >-
      {{ pins.stdout_lines | pro6000.inference.nvidia_driver_pin_plan(driver.stdout_lines, '595', '595.71.05',
         'nvidia-dkms-open', 'http://mirror/ubuntu2404/x86_64/') }}
"""

RETURN = r"""
_value:
  description:
    - C(pinning_package) (the package to install first), C(exact_pin) (whether the role writes its
      own exact version pin beside it), C(package_version) (Debian version of the driver packages),
      C(version) (upstream version), C(available) (the driver package versions offered),
      C(note) (what the plan does, for the log) and C(error) (empty, or why it cannot be done).
  type: dict
"""

PREFIX = "nvidia-driver-pinning-"


def _madison(lines):
    """(package, version) pairs of apt-cache madison output, in its order (newest first)."""
    rows = []
    for line in lines:
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) >= 2 and cells[0] and cells[1]:
            rows.append((cells[0], cells[1]))
    return rows


def _upstream(package_version):
    return package_version.rsplit("-", 1)[0]


def pin_plan(pin_lines, driver_lines, branch, version, kernel_package, repository):
    offered_pins = {row[0] for row in _madison(pin_lines)}
    available = []
    for package_version in (row[1] for row in _madison(driver_lines)):
        if package_version not in available:
            available.append(package_version)
    branch_pin, exact_pin = PREFIX + branch, PREFIX + version
    if version:
        matching = [v for v in available if _upstream(v) == version]
    else:
        matching = [v for v in available if _upstream(v).startswith(branch + ".")]
    plan = {"pinning_package": "", "exact_pin": False, "package_version": matching[0] if matching else "",
            "version": _upstream(matching[0]) if matching else "", "available": available, "note": "", "error": ""}
    offered = ", ".join(available) or "no versions"
    if branch_pin not in offered_pins and not (version and exact_pin in offered_pins):
        looked_for = " or ".join([exact_pin, branch_pin] if version else [branch_pin])
        plan["error"] = 'nvidia_driver_branch "%s" is not a branch of %s: it has no package %s.' % (
            branch, repository, looked_for)
    elif not matching:
        missing = ["package " + exact_pin] if version and exact_pin not in offered_pins else []
        missing.append("%s version %s" % (kernel_package, version or branch + ".*"))
        plan["error"] = 'nvidia_driver_version "%s" is not in %s: it has no %s (%s has %s).' % (
            version or branch + ".*", repository, " and no ".join(missing), kernel_package, offered)
    elif version and exact_pin in offered_pins:
        plan.update(pinning_package=exact_pin, note="%s pins the driver to %s." % (exact_pin, version))
    elif version:
        plan.update(pinning_package=branch_pin, exact_pin=True, note=(
            "%s has no package %s: falling back to %s, which tracks the newest %s release, plus an exact "
            "version pin for %s written by the role." % (repository, exact_pin, branch_pin, branch, version)))
    else:
        plan.update(pinning_package=branch_pin, note="%s tracks the newest %s release, now %s." % (
            branch_pin, branch, plan["version"]))
    return plan


class FilterModule:
    def filters(self):
        return {"nvidia_driver_pin_plan": pin_plan}

# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The servers role smoke probes, in order: each replica behind the gateway, then the host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: smoke_servers
short_description: The servers the smoke gate probes, each replica and then the host
version_added: 0.1.0
description:
  - Turns the replicas that role C(sglang_service) recorded (C(ansible_local.sglang_service.replicas))
    into the O(pro6000.inference.sglang_probe#module:servers) entries of M(pro6000.inference.sglang_probe),
    each with its C(name), C(url) and C(unit), in the recorded order, followed by the host itself
    (named C(host)), the gateway or, when there is none, the only server.
  - A host without a gateway, or a server named by URL alone, gives an empty list of replicas,
    and then only the host is probed.
options:
  _input:
    description: The recorded replicas, each with C(name), C(url) and C(unit); other keys are left out.
    type: list
    elements: dict
    required: true
  host:
    description: The host's own server, C(url) and C(unit) (empty or missing when no unit is known).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Probe every replica, then the gateway
  pro6000.inference.sglang_probe:
    servers: "{{ record.replicas | pro6000.inference.smoke_servers({'url': record.url, 'unit': record.unit}) }}"
"""

RETURN = r"""
_value:
  description: One entry per replica and one for the host, each with C(name), C(url) and C(unit) (V(null) when unknown).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError


def smoke_servers(replicas, host):
    servers = []
    for replica in replicas or []:
        missing = [key for key in ("name", "url", "unit") if key not in replica]
        if missing:
            raise AnsibleFilterError("smoke_servers: a recorded replica lacks %s: %r" % (", ".join(missing), replica))
        servers.append({"name": replica["name"], "url": replica["url"], "unit": replica["unit"]})
    servers.append({"name": "host", "url": host["url"], "unit": host.get("unit") or None})
    return servers


class FilterModule:
    def filters(self):
        return {"smoke_servers": smoke_servers}

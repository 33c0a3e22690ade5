# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Renders templates once per item, the item under a name the templates read: what a role needs
to compare the files it writes per replica (tasks render them one replica at a time) without a
Jinja loop around the template lookup."""

from __future__ import annotations

DOCUMENTATION = r"""
name: template_each
author:
  - pro6000.inference developers (@pro6000)
short_description: Render the same templates once for each item of a list
version_added: 0.1.0
description:
  - For each item of O(items), renders every template of O(_terms) with
    P(ansible.builtin.template#lookup) (same search path, same variables), the item given to the templates as the variable
    O(item_name), as a task that loops over the items with C(loop_var) would render them.
  - Use C(query) (or C(wantlist=true)), since the result is a list per item.
options:
  _terms:
    description: The templates, found as P(ansible.builtin.template#lookup) finds them (a role's C(templates/) first).
    type: list
    elements: str
    required: true
  items:
    description: The items, one rendering of every template each.
    type: list
    elements: raw
    required: true
  item_name:
    description: The variable under which each template sees the item.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Render each replica's environment and unit as the replica tasks write them
  ansible.builtin.debug:
    msg: "{{ query('pro6000.inference.template_each', 'app.env.j2', 'app.service.j2', items=replicas, item_name='replica') }}"
"""

RETURN = r"""
_raw:
  description: For each item, in order, the rendered text of each template, in the order of O(_terms).
  type: list
  elements: list
"""

from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        name = self.get_option("item_name")
        template = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
        return [template.run(terms, variables, template_vars={name: item}) for item in self.get_option("items")]

# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's half of module host_state: a files entry that names a role template or a
content is rendered here, with the task's own loader and variables, and only its SHA-1 goes to
the module, which reads the host. So a role declares each file once (path, template or content,
owner, group, mode) and the same list drives the comparison and the change."""

from __future__ import annotations

import hashlib
import os

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template
from ansible._internal._templating import _template_vars

# What the controller consumes: the module is never given a template, nor a content, which may
# be a secret.
RENDERED = ("template", "template_vars", "content", "variable_start_string", "variable_end_string", "secret")
# What only the change step reads (ansible.builtin.template's validate, the handlers to notify).
CHANGE_ONLY = ("validate", "notify")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        module_args = dict(self._task.args)
        files = module_args.get("files") or []
        if not isinstance(files, list) or not all(isinstance(spec, dict) for spec in files):
            return dict(result, failed=True, msg="files must be a list of mappings, one per path")
        try:
            module_args["files"] = [self._wanted(spec, task_vars) for spec in files]
        except AnsibleError as exc:
            return dict(result, failed=True, msg=to_text(exc.message))
        result.update(self._execute_module(module_name="pro6000.inference.host_state", module_args=module_args,
                                           task_vars=task_vars))
        return result

    def _wanted(self, spec, task_vars):
        """The entry as the module takes it: the rendered file's checksum instead of its source."""
        path = spec.get("path")
        template, content = spec.get("template"), spec.get("content")
        if template is not None and content is not None:
            raise AnsibleError("files[%s]: template and content are alternatives, give one" % path)
        if (template is not None or content is not None) and spec.get("checksum"):
            raise AnsibleError("files[%s]: checksum and %s are alternatives, give one"
                               % (path, "template" if template is not None else "content"))
        if template is None and (spec.get("variable_start_string") or spec.get("variable_end_string")):
            raise AnsibleError("files[%s]: variable_start_string and variable_end_string are a template's delimiters, "
                               "but no template is given" % path)
        if template is None and spec.get("template_vars"):
            raise AnsibleError("files[%s]: template_vars are a template's variables, but no template is given" % path)
        wanted = {key: value for key, value in spec.items() if key not in RENDERED + CHANGE_ONLY}
        if template is not None:
            rendered = self._render(template, spec, task_vars)
        elif content is not None:
            rendered = to_text(content)
        else:
            return wanted
        checksum = hashlib.sha1(to_bytes(rendered, errors="surrogate_or_strict")).hexdigest()
        # A content is a secret unless it says otherwise (as module host_state always took it); a template says so.
        secret = content is not None if spec.get("secret") is None else boolean(spec["secret"], strict=True)
        wanted["secret_checksum" if secret else "checksum"] = checksum
        return wanted

    def _render(self, template, spec, task_vars):
        """As ansible.builtin.template renders it for ansible.builtin.copy to write: found in the
        templates of the task's role first, then the play's, with that module's defaults and the
        template variables it adds, and the entry's own variables (a file rendered once per item,
        as a task looping with loop_var renders it). The task's variables are copied shallowly, as
        that module copies them: the template lookup, used here before, deep-copies all of them
        for every file (tests/benchmarks/no-op-rerun-cost.md)."""
        try:
            source = self._find_needle("templates", template)
        except AnsibleError as exc:
            raise AnsibleError("files[%s].template: %s" % (spec.get("path"), to_text(exc.message))) from exc
        variables = dict(task_vars)
        variables.update(_template_vars.generate_ansible_template_vars(
            path=template, fullpath=source, include_ansible_managed="ansible_managed" not in variables))
        variables.update(spec.get("template_vars") or {})
        searchpath = [os.path.dirname(source)]
        for path in task_vars.get("ansible_search_path", []):
            searchpath += [os.path.join(path, "templates"), path]
        templar = self._templar.copy_with_new_env(available_variables=variables, searchpath=searchpath)
        overrides = {key: spec[key] for key in ("variable_start_string", "variable_end_string") if spec.get(key)}
        return templar.template(trust_as_template(self._loader.get_text_file_contents(source)),
                                escape_backslashes=False, overrides=overrides)

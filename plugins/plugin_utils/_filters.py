# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the filters that only hand their arguments to an engine in module_utils share: the
engine's own error becomes Ansible's filter error, named by the filter, so that a task's
message says which filter refused what (module_utils cannot raise Ansible's controller errors:
it is also shipped to hosts)."""

from ansible.errors import AnsibleFilterError


def engine_filters(errors, **functions):
    """The filters() mapping of a FilterModule: each name to its engine function, whose
    ``errors`` are raised again as AnsibleFilterError("name: message")."""
    def named(name, function):
        def run(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except errors as exc:
                raise AnsibleFilterError("%s: %s" % (name, exc)) from exc
        return run
    return {name: named(name, function) for name, function in functions.items()}

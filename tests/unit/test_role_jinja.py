"""No long Jinja expression in roles/ (issue #27, DESIGN.md: decisions go into Python filters and
modules, YAML wires them). Every {{ }} / {% %} block of tasks, handlers, defaults, vars and
templates, and every bare conditional (when, that, until, changed_when, failed_when), is read
by tests/scripts/measure_roles.py, the same code that measured the issue's figures."""
import collections
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import measure_roles  # noqa: E402

LIMIT = 200
# Expressions still over the limit, by file and opening, until they move into Python: the list
# may only shrink (an entry that is gone or shorter fails the test, so that it is taken off).
NOT_YET_MOVED = collections.Counter([
    ("roles/sglang_service/tasks/gateway.yml", '__sglang_service_gateway_unit is changed or __sg'),
    ("roles/sglang_service/tasks/gateway.yml", '__sglang_service_workers.status | default(0) == '),
    ("roles/sglang_service/tasks/manifest.yml", '__sglang_service_workers.status | default(0) == '),
    ("roles/sglang_service/tasks/preflight.yml", "{{ sglang_service_environment.keys() | reject('m"),
    ("roles/sglang_service/tasks/preflight.yml", "{{ 'git ref %s, commit %s' % (ansible_facts.ansi"),
    ("roles/sglang_service/tasks/retire.yml", "{{ __sglang_service_layout.retire | product(['/e"),
    ("roles/sglang_service/tasks/rollback.yml", '{{ __sglang_service_last_good_record.content | b'),
    ("roles/sglang_service/vars/main.yml", '{{ __sglang_service_recorded.replicas | default('),
])


def _long(expressions):
    return [(str(path), line, expression) for path, line, expression in expressions if len(expression) > LIMIT]


def _key(path, expression):
    return (path, expression[:48])


def test_no_jinja_expression_in_roles_is_over_the_limit():
    found = _long(measure_roles.jinja_expressions())
    left = collections.Counter(_key(path, expression) for path, _line, expression in found)
    new = ["%s:%d: %d characters: %s" % (path, line, len(expression), expression[:120])
           for path, line, expression in found if left[_key(path, expression)] > NOT_YET_MOVED[_key(path, expression)]]
    assert not new, "Jinja expressions over %d characters (move the decision into a filter or module):\n%s" % (
        LIMIT, "\n".join(new))
    stale = sorted((NOT_YET_MOVED - left).elements())
    assert not stale, "no longer over the limit, take them off NOT_YET_MOVED: %s" % stale


def test_the_reader_finds_each_kind_of_expression(tmp_path):
    """The check cannot pass by reading nothing: a long block in a task, a template and a
    bare conditional are each found, at their lines."""
    role = tmp_path / "roles" / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "templates").mkdir()
    (role / "meta").mkdir()
    long_block = "{{ " + " | ".join(["x"] * 80) + " }}"
    long_condition = " and ".join(["a"] * 50)
    (role / "tasks" / "main.yml").write_text(
        "---\n- name: A task\n  ansible.builtin.debug:\n    msg: \"%s\"\n  when: %s\n" % (long_block, long_condition))
    (role / "templates" / "t.j2").write_text("line\n{%% if %s %%}\n{%% endif %%}\n" % long_condition)
    (role / "meta" / "argument_specs.yml").write_text("---\ndescription: \"%s\"\n" % long_block)
    found = sorted((str(path), line) for path, line, _e in _long(measure_roles.jinja_expressions(tmp_path)))
    assert found == [("roles/r/tasks/main.yml", 4), ("roles/r/tasks/main.yml", 5), ("roles/r/templates/t.j2", 2)]

"""No long Jinja expression in roles/ (issue #27, DESIGN.md: decisions go into Python filters and
modules, YAML wires them). Every {{ }} / {% %} block of tasks, handlers, defaults, vars and
templates, and every bare conditional (when, that, until, changed_when, failed_when), is read
by tests/scripts/measure_roles.py, the same code that measured the issue's figures."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import measure_roles  # noqa: E402

LIMIT = 200


def _long(expressions):
    return [(str(path), line, expression) for path, line, expression in expressions if len(expression) > LIMIT]


def test_no_jinja_expression_in_roles_is_over_the_limit():
    found = ["%s:%d: %d characters: %s" % (path, line, len(expression), expression[:120])
             for path, line, expression in _long(measure_roles.jinja_expressions())]
    assert not found, "Jinja expressions over %d characters (move the decision into a filter or module):\n%s" % (
        LIMIT, "\n".join(found))


def test_the_reader_finds_each_kind_of_expression(tmp_path):
    """The check cannot pass by reading nothing: a long block in a task, a template and a
    bare conditional are each found, at their lines; argument specs are not read."""
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

"""No long Jinja in roles/ or playbooks/ (issue #27, #39; DESIGN.md: decisions go into Python
filters and modules, YAML wires them). Each YAML string value of tasks, handlers, defaults and
vars counts the Jinja it holds in total (all its {{ }} / {% %} blocks; the prose between them
is not Jinja), so that a program split into many short blocks is measured whole; a bare
conditional (when, that, until, changed_when, failed_when) counts whole. Templates are prose
with blocks in it and count per block. Read by tests/scripts/measure_roles.py, the same code
that measured the issues' figures."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import measure_roles  # noqa: E402

LIMIT = 200


def _long(expressions):
    return [(str(path), line, expression) for path, line, expression in expressions if len(expression) > LIMIT]


def test_no_yaml_value_or_template_block_is_over_the_limit():
    found = ["%s:%d: %d characters: %s" % (path, line, len(expression), expression[:120])
             for path, line, expression in _long(measure_roles.jinja_expressions())]
    assert not found, "Jinja over %d characters (move the decision into a filter or module):\n%s" % (
        LIMIT, "\n".join(found))


def test_the_reader_finds_each_kind_of_expression(tmp_path):
    """The check cannot pass by reading nothing: a long block in a task, a value of short blocks
    that are long together, a template block, a bare conditional and a playbook's value are each
    found, at their lines; long prose between short blocks, and argument specs, are not."""
    role = tmp_path / "roles" / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "vars").mkdir()
    (role / "templates").mkdir()
    (role / "meta").mkdir()
    (tmp_path / "playbooks" / "tasks").mkdir(parents=True)
    long_block = "{{ " + " | ".join(["x"] * 80) + " }}"
    long_condition = " and ".join(["a"] * 50)
    short_blocks = " ".join(["{%% set v%d = %d %%}" % (n, n) for n in range(15)])  # 15 blocks of 16-18 characters
    prose = "{{ a }} " + "words between the blocks " * 20 + "{{ b }}"
    (role / "tasks" / "main.yml").write_text(
        "---\n- name: A task\n  ansible.builtin.debug:\n    msg: \"%s\"\n  when: %s\n" % (long_block, long_condition))
    (role / "vars" / "main.yml").write_text("---\nprogram: >-\n  %s\nmessage: \"%s\"\n" % (short_blocks, prose))
    (role / "templates" / "t.j2").write_text("line\n{%% if %s %%}\n{%% endif %%}\n%s\n" % (long_condition, short_blocks))
    (role / "meta" / "argument_specs.yml").write_text("---\ndescription: \"%s\"\n" % long_block)
    (tmp_path / "playbooks" / "p.yml").write_text(
        "---\n- name: A play\n  hosts: all\n  tasks:\n    - name: A task\n      ansible.builtin.debug:\n"
        "        msg: \"%s\"\n" % long_block)
    (tmp_path / "playbooks" / "tasks" / "t.yml").write_text("---\n- name: A task\n  when: %s\n" % long_condition)
    found = sorted((str(path), line) for path, line, _e in _long(measure_roles.jinja_expressions(tmp_path)))
    assert found == [("playbooks/p.yml", 7), ("playbooks/tasks/t.yml", 3),
                     ("roles/r/tasks/main.yml", 4), ("roles/r/tasks/main.yml", 5),
                     ("roles/r/templates/t.j2", 2), ("roles/r/vars/main.yml", 2)]

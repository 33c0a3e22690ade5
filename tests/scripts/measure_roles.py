"""Figures for issue #27 (decisions in Python, one idiom per job, one double), taken from the
checkout so that before and after come from the same code: lines and tasks per role, the
longest Jinja expressions in roles/, filter pipes per line of task YAML, lines of the SGLang
doubles. tests/unit/test_role_jinja.py uses ``jinja_expressions`` to hold the 200-character
bound. Run: python tests/scripts/measure_roles.py [--top N] [--root CHECKOUT]
"""
import argparse
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Keys whose string value Ansible evaluates as a bare Jinja expression (no braces).
CONDITIONAL_KEYS = {"when", "that", "until", "changed_when", "failed_when"}
BLOCK = re.compile(r"{{.*?}}|{%.*?%}", re.S)
# A filter pipe: `|` not part of `||` (Jinja has none, but a shell line in a task may).
PIPE = re.compile(r"(?<!\|)\|(?!\|)[ \t]*[A-Za-z_]")


def _squash(text):
    return " ".join(text.split())


class _Loader(yaml.SafeLoader):
    """Keeps each scalar's line so that a failure names where the expression starts."""


def _construct_scalar(loader, node):
    value = loader.construct_scalar(node)
    return _Located(value, node.start_mark.line + 1)


class _Located(str):
    def __new__(cls, value, line):
        obj = super().__new__(cls, value)
        obj.line = line
        return obj


_Loader.add_constructor("tag:yaml.org,2002:str", _construct_scalar)
# Ansible's own tags (!unsafe, !vault) are strings too.
_Loader.add_constructor("!unsafe", _construct_scalar)
_Loader.add_constructor("!vault", _construct_scalar)


def _walk(node, key=None):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v, key)
    elif isinstance(node, _Located):
        yield key, node


def yaml_expressions(path):
    """(line, Jinja) for each YAML string value that holds Jinja: all its {{ }} / {% %} blocks,
    each squashed, end to end (the prose between them is not Jinja and does not count), so that
    a program split into many short blocks is measured whole; a bare conditional (when, that,
    until, changed_when, failed_when) counts whole."""
    data = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    for key, value in _walk(data):
        blocks = BLOCK.findall(value)
        if blocks:
            yield value.line, "".join(_squash(block) for block in blocks)
        elif key in CONDITIONAL_KEYS:
            yield value.line, _squash(value)


def template_expressions(path):
    text = path.read_text()
    for match in BLOCK.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, _squash(match.group(0))


def jinja_files(root=ROOT):
    """Each file that holds Jinja and the reader that measures it: YAML per value, templates
    per block (a template is a file of prose and blocks, not one value)."""
    playbooks = root / "playbooks"
    for path in sorted([*playbooks.glob("*.yml"), *playbooks.glob("tasks/**/*.yml")]):
        yield path, yaml_expressions
    roles = root / "roles"
    for path in sorted(roles.glob("*/*/**/*")):
        if not path.is_file():
            continue
        part = path.relative_to(roles).parts[1]
        if part in ("tasks", "handlers", "defaults", "vars", "meta") and path.suffix in (".yml", ".yaml"):
            if part == "meta":
                continue  # argument specs and galaxy info hold descriptions, not Jinja
            yield path, yaml_expressions
        elif part == "templates" and path.suffix == ".j2":
            yield path, template_expressions


def jinja_expressions(root=ROOT):
    """(path relative to root, line, Jinja) for every YAML value and template block in roles/ and
    playbooks/."""
    for path, reader in jinja_files(root):
        for line, expression in reader(path):
            yield path.relative_to(root), line, expression


def _lines(path):
    return len(path.read_text().splitlines())


def _tasks(node):
    count = 0
    for task in node or []:
        if not isinstance(task, dict):
            continue
        inner = [task[k] for k in ("block", "rescue", "always") if k in task]
        if inner:
            count += sum(_tasks(block) for block in inner)
        else:
            count += 1
    return count


def role_figures(root=ROOT):
    rows = []
    for role in sorted(p for p in (root / "roles").iterdir() if p.is_dir()):
        files = [p for p in role.rglob("*") if p.is_file() and p.suffix != ".json"]
        task_files = sorted((role / "tasks").glob("*.yml"))
        task_lines = sum(_lines(p) for p in task_files)
        pipes = sum(len(PIPE.findall(p.read_text())) for p in task_files)
        tasks = sum(_tasks(yaml.safe_load(p.read_text())) for p in task_files)
        rows.append({"role": role.name, "lines": sum(_lines(p) for p in files),
                     "task_files": len(task_files), "task_lines": task_lines,
                     "tasks": tasks, "pipes": pipes})
    return rows


DOUBLES = ("tests/fixtures/sglang_double/python", "tests/fixtures/sglang_double/benchmark_capacity.py",
           "tests/fixtures/sglang_double/make_repo.py")


def double_lines(root=ROOT):
    out = {}
    for rel in DOUBLES:
        path = root / rel
        files = [path] if path.is_file() else sorted(path.rglob("*.py")) if path.is_dir() else []
        if files:
            out[rel] = sum(_lines(p) for p in files)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=8, help="how many of the longest expressions to list")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="a checkout to measure (default: this one)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    rows = role_figures(root)
    print("%-18s %6s %6s %6s %6s %6s %6s" % ("role", "lines", "files", "tlines", "tasks", "pipes", "p/line"))
    for r in rows:
        print("%-18s %6d %6d %6d %6d %6d %6.3f" % (r["role"], r["lines"], r["task_files"], r["task_lines"],
                                                   r["tasks"], r["pipes"], r["pipes"] / max(r["task_lines"], 1)))
    tl = sum(r["task_lines"] for r in rows)
    tp = sum(r["pipes"] for r in rows)
    print("%-18s %6d %6d %6d %6d %6d %6.3f" % ("total", sum(r["lines"] for r in rows),
                                               sum(r["task_files"] for r in rows), tl,
                                               sum(r["tasks"] for r in rows), tp, tp / max(tl, 1)))
    expressions = sorted(jinja_expressions(root), key=lambda e: -len(e[2]))
    print("\nlongest Jinja per YAML value / template block (characters, whitespace runs as one):")
    for path, line, expression in expressions[:args.top]:
        print("%5d  %s:%d" % (len(expression), path, line))
    print("over 200: %d" % sum(1 for e in expressions if len(e[2]) > 200))
    print("\nSGLang doubles (lines of Python):")
    doubles = double_lines(root)
    for rel, n in doubles.items():
        print("%6d  %s" % (n, rel))
    print("%6d  total" % sum(doubles.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

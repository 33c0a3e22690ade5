"""Where a run's time went, for tests/scripts/run-all.sh: the slowest pytest phases (the section
that `pytest --durations=N` writes into its log) and the slowest Ansible tasks of the Molecule
scenarios (the lines that callback lane_record writes into build/logs/tasks-<scenario>.jsonl).

    python tests/scripts/timings.py [--count N] [--pytest-log LOG] [--task-records DIR]
"""
import argparse
import json
import pathlib
import re
import sys

DURATIONS_HEADER = re.compile(r"^=+ slowest (\d+ )?durations =+$")
DURATION_LINE = re.compile(r"^\d+\.\d+s (setup|call|teardown) ")


def slowest_tests(log_text, count):
    """The duration lines of pytest's "slowest durations" section, slowest first, at most ``count``."""
    lines = log_text.splitlines()
    start = next((index for index, line in enumerate(lines) if DURATIONS_HEADER.match(line)), None)
    if start is None:
        return []
    found = []
    for line in lines[start + 1:]:
        if line.startswith("="):  # the next section
            break
        if DURATION_LINE.match(line):
            found.append(line)
    return sorted(found, key=lambda line: -float(line.split("s ", 1)[0]))[:count]


def scenario_of(path):
    """build/logs/tasks-<scenario>.jsonl -> <scenario>."""
    return pathlib.Path(path).stem.removeprefix("tasks-")


def slowest_tasks(paths, count):
    """The ``count`` longest task results over every record file, slowest first, each a dict
    with the record's fields and its scenario; and how many lines could not be read (the last
    line of a run killed while writing it)."""
    found, unreadable = [], 0
    for path in paths:
        for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                unreadable += 1
                continue
            if entry.get("duration") is not None:
                found.append(dict(entry, scenario=scenario_of(path)))
    return sorted(found, key=lambda entry: -entry["duration"])[:count], unreadable


def task_line(entry):
    return "%8.1f s  %-24s %-16s %-22s %s" % (entry["duration"], entry["scenario"], entry["playbook"] or "-",
                                              entry["host"], entry["task"])


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--pytest-log", type=pathlib.Path)
    parser.add_argument("--task-records", type=pathlib.Path, help="the directory of the tasks-<scenario>.jsonl files")
    args = parser.parse_args(argv)
    records = sorted(args.task_records.glob("tasks-*.jsonl")) if args.task_records else []
    if args.pytest_log:
        tests = slowest_tests(args.pytest_log.read_text(encoding="utf-8", errors="replace")
                              if args.pytest_log.exists() else "", args.count)
        print("slowest %d pytest phases:" % args.count)
        print("\n".join("  " + line for line in tests) if tests else "  (none recorded in %s)" % args.pytest_log)
    tasks, unreadable = slowest_tasks(records, args.count)
    print("slowest %d Ansible tasks (of %d scenario records):" % (args.count, len(records)))
    print("%10s  %-24s %-16s %-22s %s" % ("duration", "scenario", "playbook", "host", "task"))
    print("\n".join(task_line(entry) for entry in tasks) if tasks else "  (none recorded)")
    if unreadable:
        print("  (%d unreadable record lines left out)" % unreadable)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

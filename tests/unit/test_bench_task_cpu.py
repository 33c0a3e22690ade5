"""Where bench_fleet.py says the controller's CPU goes: callback task_cpu
(tests/benchmarks/callback_plugins) in a real ansible-playbook run, against a task whose fork
runs a process that spends a known CPU time (time.process_time, which the callback does not read)."""
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))
import bench_fleet  # noqa: E402

BURN = "import time\nwhile time.process_time() < 0.6:\n    pass\n"
PLAYBOOK = """
- name: Spend known CPU
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Return at once
      ansible.builtin.debug:
        msg: done

    - name: Burn 0.6 CPU-s in a process the fork waits for
      ansible.builtin.command:
        argv: ["%s", "-c", %s]
      changed_when: false

    - name: Never run
      ansible.builtin.debug:
        msg: skipped
      when: false
""" % (sys.executable, json.dumps(BURN))


def test_each_task_gets_the_cpu_spent_until_the_next_one_starts(tmp_path, capsys):
    (tmp_path / "burn.yml").write_text(PLAYBOOK)
    out = tmp_path / "task-cpu.json"
    environ = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(REPO / "tests" / "benchmarks" / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="task_cpu", TASK_CPU_FILE=str(out), ANSIBLE_NOCOLOR="1")
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(tmp_path / "burn.yml")],
                          cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300, check=False,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads(out.read_text())
    assert [(e["role"], e["task"], e["results"]) for e in entries] == [
        ("(start)", "(start)", 0), ("(play)", "Return at once", 1),
        ("(play)", "Burn 0.6 CPU-s in a process the fork waits for", 1), ("(play)", "Never run", 1)]
    burn = entries[2]
    assert burn["cpu"] >= 0.6 and burn["wall"] >= 0.6, entries
    # The other tasks spend the controller's bookkeeping only, nothing near the burn; the start
    # (the interpreter's imports and the parse, from the process's start) may spend more.
    assert all(0 <= e["cpu"] < 0.6 for e in entries[1:] if e is not burn) and entries[0]["cpu"] > 0, entries

    bench_fleet.report_roles(entries)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["role", "tasks", "results", "CPU-s"]
    assert printed[1].split()[:3] == ["(play)", "3", "3"] and float(printed[1].split()[3]) >= 0.6
    assert printed[-1].split()[:3] == ["all", "4", "3"]

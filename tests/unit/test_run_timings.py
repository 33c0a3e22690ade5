"""Where a run's time went (tests/scripts/timings.py, printed by run-all.sh): the slowest phases
from a real pytest's --durations section, and the slowest tasks from what callback lane_record
(tests/real_host/callback_plugins) records in a real ansible-playbook run."""
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "scripts"))
import timings  # noqa: E402

SLOW_TESTS = """
import time

def test_short():
    time.sleep(0.05)

def test_long():
    time.sleep(0.3)

def test_middle():
    time.sleep(0.15)
"""

PLAYBOOK = """
- name: Take known times
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait one second
      ansible.builtin.command: sleep 1
      changed_when: false

    - name: Return at once
      ansible.builtin.debug:
        msg: done

    - name: Never run
      ansible.builtin.debug:
        msg: skipped
      when: false
"""


def pytest_log(tmp_path, count):
    (tmp_path / "test_slow.py").write_text(SLOW_TESTS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=%d" % count,
                           "--rootdir", str(tmp_path), str(tmp_path / "test_slow.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_slowest_pytest_phases_are_read_from_the_durations_section_slowest_first(tmp_path):
    lines = timings.slowest_tests(pytest_log(tmp_path, 20), 2)
    assert len(lines) == 2
    assert lines[0].endswith("test_slow.py::test_long") and " call " in lines[0], lines
    assert lines[1].endswith("test_slow.py::test_middle"), lines
    assert float(lines[0].split("s ", 1)[0]) >= 0.3


def test_a_log_without_the_durations_section_has_no_slowest_tests():
    assert timings.slowest_tests("..\n2 passed in 0.10s\n", 20) == []


def playbook_run(tmp_path, **env):
    (tmp_path / "timed.yml").write_text(PLAYBOOK)
    environ = {key: value for key, value in os.environ.items() if not key.startswith("LANE_RECORD")}
    environ.update(ANSIBLE_CALLBACK_PLUGINS=str(REPO / "tests" / "real_host" / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="lane_record", ANSIBLE_NOCOLOR="1", **env)
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(tmp_path / "timed.yml")],
                          cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300, check=False,
                          # ansible-core 2.21's workers fail on a closed stdin ("Could not detach from stdio"),
                          # as the newest-line lane saw it under make test.
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_the_callback_records_each_tasks_duration_and_the_slowest_come_first(tmp_path):
    records = tmp_path / "logs"
    playbook_run(tmp_path, LANE_RECORD_FILE=str(records / "tasks-first.jsonl"), LANE_RECORD_RESULTS="0")
    entries = [json.loads(line) for line in (records / "tasks-first.jsonl").read_text().splitlines()]
    assert [(e["task"], e["status"]) for e in entries] == [
        ("Wait one second", "ok"), ("Return at once", "ok"), ("Never run", "skipped")]
    assert all("result" not in e and e["playbook"] == "timed.yml" and e["host"] == "localhost" for e in entries)
    assert entries[0]["duration"] >= 1.0 > entries[1]["duration"]
    # A second scenario's record (slower than the first's slowest, however long a loaded machine
    # took to wait one second), a line cut short by a killed run and a task without a start.
    (records / "tasks-second.jsonl").write_text(
        json.dumps(dict(entries[1], task="Second scenario's task", duration=entries[0]["duration"] + 1.5)) + "\n"
        + json.dumps(dict(entries[1], task="Started before the record", duration=None)) + "\n"
        + '{"playbook": "converge.yml", "ta')
    slowest, unreadable = timings.slowest_tasks(sorted(records.glob("tasks-*.jsonl")), 2)
    assert [(e["scenario"], e["task"]) for e in slowest] == [
        ("second", "Second scenario's task"), ("first", "Wait one second")]
    assert unreadable == 1


def test_the_callback_keeps_the_results_for_the_real_host_lane_and_is_silent_without_a_file(tmp_path):
    playbook_run(tmp_path, LANE_RECORD_FILE=str(tmp_path / "lane.jsonl"))
    first = json.loads((tmp_path / "lane.jsonl").read_text().splitlines()[0])
    assert first["result"]["cmd"] == ["sleep", "1"] and first["duration"] >= 1.0
    output = playbook_run(tmp_path)
    assert "lane_record" not in output and "callback" not in output.lower(), output


def test_the_report_names_what_it_ranks(tmp_path, capsys):
    (tmp_path / "pytest.log").write_text(pytest_log(tmp_path, 20))
    (tmp_path / "tasks-sglang.jsonl").write_text(json.dumps(
        {"playbook": "converge.yml", "play": "Converge", "task": "sglang : Build the venv", "host": "pro6000-sglang",
         "status": "changed", "duration": 61.0}) + "\n")
    assert timings.main(["--count", "1", "--pytest-log", str(tmp_path / "pytest.log"),
                         "--task-records", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "slowest 1 pytest phases:" and printed[1].endswith("test_slow.py::test_long")
    assert printed[2] == "slowest 1 Ansible tasks (of 1 scenario records):"
    assert printed[4].split() == ["61.0", "s", "sglang", "converge.yml", "pro6000-sglang", "sglang", ":", "Build",
                                  "the", "venv"]

"""Role common's progress entry point (tasks/progress.yml) reports a background job in chunks of
polls: Ansible nests every include in the one that made it, and one include per poll ended in a
RecursionError after a few hundred polls, under an hour of a weights download at 10 s. Real
ansible-playbook on localhost runs two background jobs one after the other, with chunks of two
polls of one second, so that each job needs several chunks: every poll prints its line, every job
ends collected, and the second job's first chunk counts from its own start. Each job runs until the
test has read five of its lines, however slowly the machine runs the polls."""
import os
import pathlib
import re
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

PLAY = """
- name: Two background jobs reported in chunks
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run each job and report it
      ansible.builtin.include_tasks: job.yml
      loop: [first, second]
"""

JOB = """
- name: Start job {{ item }}
  ansible.builtin.shell: until [ -e released-{{ item }} ]; do sleep 0.2; done
  async: 60
  poll: 0
  register: job
  changed_when: false

- name: Report job {{ item }}
  ansible.builtin.include_role:
    name: pro6000.inference.common
    tasks_from: progress
  vars:
    common_progress_job: "{{ job }}"
    common_progress_label: "job {{ item }}"
    common_progress_interval: 1

- name: Say that job {{ item }} was collected
  ansible.builtin.debug:
    msg: "collected {{ item }}: rc {{ common_progress_result.rc }}"
"""


def test_a_long_job_is_reported_in_chunks_of_polls_and_collected(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "job.yml").write_text(JOB)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_ASYNC_DIR=str(tmp_path / "async"), ANSIBLE_NOCOLOR="1",
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    with subprocess.Popen([str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
                           "-e", "__common_progress_chunk_polls=2", str(tmp_path / "play.yml")],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path) as play:
        output = ""
        for line in play.stdout:
            output += line
            for name in ("first", "second"):
                if len(re.findall(r'"msg": "job %s: run, ' % name, output)) >= 5:
                    (tmp_path / ("released-" + name)).touch()
        assert play.wait(timeout=300) == 0, output[-6000:]
    for name in ("first", "second"):
        job = output[output.index("TASK [Start job %s]" % name):]
        job = job[:job.index("collected %s: rc 0" % name)]
        lines = re.findall(r'"msg": "job %s: run, (\d+) s elapsed"' % name, job)
        assert len(lines) >= 5, job
        assert [int(seconds) for seconds in lines] == sorted(int(seconds) for seconds in lines), job
        assert job.count("TASK [pro6000.inference.common : Start a chunk of progress polls]") >= 2, job
        assert '"msg": "job %s: finished"' % name in job, job

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: work_progress
short_description: Wait a few seconds for an asynchronous job and report how far its work has come
version_added: "1.0.0"
description:
  - Waits until the asynchronous job whose O(results_file) is given has finished, or O(wait)
    seconds have passed, then reports how far the work has come, as figures and as one line.
  - With O(progress_file) (the document M(pro6000.inference.model_stage) writes), the figures are
    the bytes done and to do, the rate since the work began and the time left at that rate.
  - With O(log_file), the line ends with the log's last line (a pip log says what it does now).
  - A role calls it in a loop until RV(finished), printing RV(line) each time, then collects the
    job's result with M(ansible.builtin.async_status).
  - Only reads; never changes anything.
author:
  - pro6000.inference developers (@pro6000)
options:
  results_file:
    description:
      - The job's results file, RV(ansible.builtin.async_status#module:results_file) of the task
        started with C(async) and C(poll=0).
      - The job has finished once this file holds its result (as M(ansible.builtin.async_status) decides).
    type: path
    required: true
  progress_file:
    description: The progress document the job's module writes (see M(pro6000.inference.model_stage), O(pro6000.inference.model_stage#module:progress_file)).
    type: path
  log_file:
    description: A log the job appends to; its last line is reported.
    type: path
  label:
    description: What the work is, named at the start of RV(line) (a model, a build step).
    type: str
    required: true
  phase:
    description: The step of the work, when the progress document does not say it.
    type: str
    default: run
  wait:
    description:
      - Seconds between two reports, counted from O(since) (else from the job's start), so that the
        time the tasks between two polls take does not stretch the interval; the module answers at
        that time, or as soon as the job has finished.
    type: int
    default: 10
  since:
    description: When the previous report was made (RV(answered_at) of the previous poll), in seconds since the epoch on the host.
    type: float
extends_documentation_fragment:
  - pro6000.inference.attributes
attributes:
  check_mode:
    support: full
    details: Only reads.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Stage the target in the background
  pro6000.inference.model_stage:
    dest: /srv/models/Qwen3.6-27B
    source: mirror
    mirror_url: http://mirror.example/models
    repo_id: Qwen/Qwen3.6-27B
    revision: 0123456789abcdef0123456789abcdef01234567
    progress_file: /srv/models/.Qwen3.6-27B.progress.json
  async: 86400
  poll: 0
  register: staging

- name: Report the staging's progress
  pro6000.inference.work_progress:
    results_file: "{{ staging.results_file }}"
    progress_file: /srv/models/.Qwen3.6-27B.progress.json
    label: Qwen3.6-27B
  register: progress
"""

RETURN = r"""
finished:
  description: Whether the job has finished (its result is there for M(ansible.builtin.async_status)).
  type: bool
  returned: always
line:
  description: How far the work has come, in one line.
  type: str
  returned: always
  sample: "Qwen3.6-27B: download 12.0 GiB of 54.0 GiB (22.2 %), 3/14 files, 105.0 MiB/s, 6 min 50 s left"
label:
  description: O(label).
  type: str
  returned: always
phase:
  description: The step of the work (from the progress document, else O(phase)).
  type: str
  returned: always
answered_at:
  description: When this report was made, in seconds since the epoch on the host (O(since) of the next poll).
  type: float
  returned: always
elapsed_s:
  description: Seconds since the job started; null once it has finished.
  type: int
  returned: always
progress:
  description: The figures of the progress document; null when there is none (nothing to fetch, or not started yet).
  type: dict
  returned: always
  contains:
    done_bytes:
      description: Bytes in place, including those a previous run left.
      type: int
    total_bytes:
      description: Bytes to fetch in all.
      type: int
    percent:
      description: Share done.
      type: float
    files_done:
      description: Files in place.
      type: int
    files_total:
      description: Files to fetch.
      type: int
    rate_bytes_per_s:
      description: Bytes this run moved per second since it began; null until it moved any.
      type: int
    eta_s:
      description: Seconds left at that rate; null while the rate is not known.
      type: int
    elapsed_s:
      description: Seconds since the fetch began.
      type: int
"""

import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pro6000.inference.plugins.module_utils._progress import (
    describe, figures, human_duration, read_document,
)

# The longest log line shown: a pip log line can hold a whole command line.
LOG_LINE_LIMIT = 160
# pip's --log prefixes each line with its time (2026-12-06T14:27:01,548): the line says elapsed.
LOG_TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]\d+\s+")


def job_finished(results_file):
    """As async_status decides: finished once the file holds a result without 'started'."""
    try:
        with open(results_file) as stream:
            data = json.load(stream)
    except FileNotFoundError:
        return True  # no job file: async_status reports the job as gone, nothing to wait for
    except ValueError:
        return False  # the wrapper is writing it
    return "started" not in data


def last_line(path):
    try:
        with open(path, "rb") as stream:
            stream.seek(max(0, os.fstat(stream.fileno()).st_size - 4096))
            tail = stream.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [LOG_TIME_RE.sub("", line).strip() for line in tail.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return None
    return lines[-1] if len(lines[-1]) <= LOG_LINE_LIMIT else lines[-1][:LOG_LINE_LIMIT] + "..."


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_file=dict(type="path", required=True),
            progress_file=dict(type="path"),
            log_file=dict(type="path"),
            label=dict(type="str", required=True),
            phase=dict(type="str", default="run"),
            wait=dict(type="int", default=10),
            since=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["wait"] < 1:
        module.fail_json(msg="wait must be at least 1 second, not %d" % params["wait"])
    try:
        started = os.stat(params["results_file"]).st_mtime
    except OSError:
        started = time.time()
    deadline = (params["since"] or started) + params["wait"]
    finished = job_finished(params["results_file"])
    while not finished and time.time() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.time())))
        finished = job_finished(params["results_file"])
    # Once finished, the wrapper has rewritten the file: its time is the end, not the start.
    elapsed = None if finished else max(0, round(time.time() - started))
    document = read_document(params["progress_file"]) if params["progress_file"] else None
    numbers = figures(document) if document else None
    phase = numbers["phase"] if numbers else params["phase"]
    if finished:
        line = "%s: finished" % params["label"]
    elif numbers:
        line = describe(params["label"], numbers)
    else:
        line = "%s: %s, %s elapsed" % (params["label"], phase, human_duration(elapsed))
    logged = last_line(params["log_file"]) if params["log_file"] and not finished else None
    if logged:
        line += "; last: " + logged
    module.exit_json(changed=False, finished=finished, line=line, label=params["label"], phase=phase,
                     elapsed_s=elapsed, progress=numbers, answered_at=time.time())


if __name__ == "__main__":
    main()

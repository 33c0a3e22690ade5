"""The replica's journal does not hold its API key (issue #36, finding 6).

SGLang logs its whole server_args at start, the API key included (0.5.23,
entrypoints/engine.py `_launch_subprocesses`; `_server_args_for_logging` redacts only the
watermark keys), and group adm reads the journal. The replica unit of role sglang_service
carries `LogFilterPatterns=` lines for journald (systemd 253+). Here they are taken from the
unit template as written and applied, with systemd's semantics, to what the SGLang double logs
when it starts as the unit starts it (the key from the `--config` secrets file) and to the line
0.5.23 itself writes. The test machines' containers run cgroup v1 hybrid hierarchies, where
journald cannot read a unit's filter (it lives in an xattr of the unit's cgroup): the filter's
effect in a real journal is seen on Ubuntu 24.04 hosts only (roles/sglang_service/README.md)."""
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import pytest

from support import free_port

REPO = pathlib.Path(__file__).resolve().parents[2]
UNIT_TEMPLATE = REPO / "roles" / "sglang_service" / "templates" / "sglang.service.j2"
DOUBLE = REPO / "tests" / "fixtures" / "sglang_double" / "python"
KEY = "sk-pro6000-journal-7f3a9c"


def filter_patterns():
    """(allow, deny) regular expressions of the template's LogFilterPatterns= lines."""
    lines = [line.split("=", 1)[1] for line in UNIT_TEMPLATE.read_text().splitlines()
             if line.startswith("LogFilterPatterns=")]
    assert lines, "the replica unit has no LogFilterPatterns= line: its journal keeps the API key"
    # Literal lines: what the template holds is what systemd reads.
    assert not [line for line in lines if "{" in line or "%" in line], lines
    return ([re.compile(p) for p in lines if not p.startswith("~")],
            [re.compile(p[1:]) for p in lines if p.startswith("~")])


def journal(lines):
    """The lines journald keeps (systemd.exec: a line matching a ~pattern is dropped; with any
    allow pattern, only lines matching one are kept)."""
    allow, deny = filter_patterns()
    return [line for line in lines
            if (not allow or any(p.search(line) for p in allow)) and not any(p.search(line) for p in deny)]


def start_log(tmp_path, key):
    """Everything the double writes from its start until it serves, started as the unit starts
    a replica: the key in the --config file role sglang_service writes (sglang.secrets.yaml.j2)."""
    target, drafter = tmp_path / "target", tmp_path / "drafter"
    for directory, config in ((target, {"architectures": ["Qwen3_5ForConditionalGeneration"],
                                        "model_type": "qwen3_5"}), (drafter, {"block_size": 16})):
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))
    argv = ["--model-path", str(target), "--speculative-algorithm", "DDTREE",
            "--speculative-draft-model-path", str(drafter)]
    if key:
        secrets = tmp_path / "secrets.yaml"
        secrets.write_text("# Managed by Ansible\n" + json.dumps({"api-key": key}) + "\n")
        argv += ["--config", str(secrets)]
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", *argv, "--port", str(port)],
        env=dict(os.environ, PYTHONPATH=str(DOUBLE), SGLANG_DOUBLE_STARTUP_S="0.2"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
    finally:
        process.terminate()
        output = process.communicate(timeout=10)[0]
    return output.splitlines()


def test_the_double_logs_the_key_as_the_release_does_and_the_journal_drops_it(tmp_path):
    logged = start_log(tmp_path, KEY)
    # The double, like 0.5.23, writes the key at start: without the filter the journal holds it.
    assert [line for line in logged if KEY in line and "server_args=" in line], logged
    kept = journal(logged)
    assert not [line for line in kept if KEY in line]
    # Only that line goes: the rest of the start (the entry point's warning, say) is kept.
    assert len(kept) == len(logged) - 1 and kept


def test_without_a_key_the_server_args_line_stays(tmp_path):
    logged = start_log(tmp_path, "")
    assert [line for line in journal(logged) if "server_args=" in line and "'api_key': None" in line]


@pytest.mark.parametrize("value", [KEY, "it's-a-key", 'a"b\'c'])
def test_the_line_of_release_0_5_23_is_dropped_whatever_the_key(value):
    # engine.py: logger.info(f"server_args={...}") of a dict; SGLang's log format prefixes the time.
    for field in ("api_key", "admin_api_key"):
        line = "[2026-12-06 04:40:00] server_args=%s" % ({"model_path": "/srv/models/Qwen3.6-27B", field: value,
                                                          "port": 30000},)
        assert value in line or repr(value)[1:-1] in line
        assert journal([line]) == []

"""Start and stop the SGLang test double for the benchmarks, and drive sglang_bench's code.

Run the benchmarks from the checkout: ``python tests/benchmarks/<name>.py``.
"""
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DOUBLE_PYTHON = REPO_ROOT / "tests" / "fixtures" / "sglang_double" / "python"
sys.path.insert(0, str(REPO_ROOT / "collections"))
sys.path.insert(0, str(REPO_ROOT / "tests"))

from ansible_collections.pro6000.inference.plugins.module_utils._sglang.client import SGLangClient  # noqa: E402
from support import free_port  # noqa: E402


@contextlib.contextmanager
def running_double(algorithm=None, env=None, cpu=None, max_running=256, block_size=16):
    """Start the double with SGLANG_DOUBLE_* ``env``; yield (client, pid); stop it afterwards.

    ``cpu`` pins the double to that core. Only the process started here is ever stopped.
    """
    with tempfile.TemporaryDirectory(prefix="sglang-double-") as models:
        target = pathlib.Path(models, "target")
        drafter = pathlib.Path(models, "drafter")
        target.mkdir()
        drafter.mkdir()
        (drafter / "config.json").write_text(json.dumps({"dflash_config": {"block_size": block_size}}))
        port = free_port()
        command = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(target),
                   "--port", str(port), "--host", "127.0.0.1", "--enable-metrics",
                   "--max-running-requests", str(max_running), "--log-level", "warning"]
        if algorithm:
            command += ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(drafter)]
        if algorithm == "DDTREE":
            command += ["--page-size", "1"]
        environment = dict(os.environ, PYTHONPATH=str(DOUBLE_PYTHON), SGLANG_DOUBLE_STARTUP_S="0.1")
        environment.update({key: str(value) for key, value in (env or {}).items()})
        server = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if cpu is not None:
                os.sched_setaffinity(server.pid, {cpu})
            client = SGLangClient("http://127.0.0.1:%d" % port, timeout=30)
            deadline = time.monotonic() + 30
            while True:
                if server.poll() is not None:
                    raise RuntimeError("the double exited: %s" % server.stderr.read().decode()[-2000:])
                try:
                    if client.get("/health", retries=0).status == 200:
                        break
                except Exception:  # not listening yet
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the double did not become healthy within 30 s")
                time.sleep(0.05)
            yield client, server.pid
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (from /proc)."""
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

"""Staging throughput of model_stage next to a plain copy, and its hashing next to sha256sum.

Generates a weight tree of --total-mib MiB (tests/fixtures/weights/generate.py, profile bench),
serves it with the HTTP mirror double on loopback, and times on the same bytes:

  cp -r + sync            a plain copy made durable (model_stage fsyncs every file it stages)
  model_stage mirror      HTTP download + sha256 while writing + fsync + switch
  model_stage path        the same from the local directory
  sha256sum               coreutils, one process, files one after another
  model_stage verify      full re-hash of the staged copy (verify: full), files in parallel

The page cache is warm for every run (the source was just written): the figures compare the
tools, not the disk. Run: python tests/benchmarks/bench_weights_staging.py [--total-mib 3072]
"""

import argparse
import contextlib
import grp
import io
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(REPO / "tests"))

from ansible.module_utils.testing import patch_module_args  # noqa: E402

from ansible_collections.pro6000.inference.plugins.module_utils import _weights  # noqa: E402
from ansible_collections.pro6000.inference.plugins.modules import model_stage  # noqa: E402
from support import free_port, load_module  # noqa: E402

REPO_ID = "Qwen/Qwen3.6-27B"


def timed(func):
    os.sync()  # nobody pays for the dirty pages of an earlier step
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def stage(args):
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        try:
            model_stage.main()
        except SystemExit:
            pass
    result = json.loads(out.getvalue())
    if result.get("failed"):
        raise SystemExit("model_stage failed: %s" % result["msg"])
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mib", type=int, default=3072)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--work-dir", default="/var/tmp/bench-weights")
    args = parser.parse_args()

    work = pathlib.Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = None
    try:
        generate = load_module("generate", REPO / "tests/fixtures/weights/generate.py")
        commit = generate.bench_profile(str(work / "fixtures"), args.total_mib, args.shards)[REPO_ID]["bench"]
        source = work / "fixtures" / "mirror" / REPO_ID / commit
        files = sorted(p for p in source.iterdir() if p.name != "manifest.json")
        total = sum(p.stat().st_size for p in files)
        port = free_port()
        server = subprocess.Popen([sys.executable, str(REPO / "tests/fixtures/hub_double/server.py"),
                                   "--root", str(work / "fixtures"), "--log", str(work / "requests.jsonl"),
                                   "--mirror-port", str(port), "--hub-port", str(free_port()),
                                   "--cdn-port", str(free_port())])
        time.sleep(1)
        owner = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        common = dict(revision=commit, repo_id=REPO_ID, kind="target", owner=owner, group=group,
                      workers=args.workers, reserve_bytes=0)

        rows = []

        def row(name, seconds):
            rows.append((name, seconds))

        dst = work / "cp-copy"
        row("cp -r + sync", timed(lambda: subprocess.run(["sh", "-c", f"cp -r {source} {dst} && sync"],
                                                         check=True))[0])
        cp_only = work / "cp-copy-2"
        row("cp -r (no sync)", timed(lambda: subprocess.run(["cp", "-r", str(source), str(cp_only)], check=True))[0])
        shutil.rmtree(dst)
        shutil.rmtree(cp_only)

        seconds, mirror = timed(lambda: stage(dict(common, dest=str(work / "mirror-dest" / "m"), source="mirror",
                                                   mirror_url=f"http://127.0.0.1:{port}")))
        assert mirror["fetched_bytes"] == mirror["bytes"] and mirror["changed"]
        row("model_stage mirror (HTTP, %d workers)" % args.workers, seconds)
        shutil.rmtree(work / "mirror-dest")

        seconds, local = timed(lambda: stage(dict(common, dest=str(work / "path-dest" / "m"), source="path",
                                                  source_path=str(source))))
        assert local["changed"]
        row("model_stage path (%d workers)" % args.workers, seconds)

        row("sha256sum (single process)",
            timed(lambda: subprocess.run(["sha256sum"] + [str(p) for p in files], check=True,
                                         stdout=subprocess.DEVNULL))[0])
        staged = os.path.realpath(work / "path-dest" / "m")
        marker = json.loads(pathlib.Path(staged, _weights.MARKER_NAME).read_text())
        seconds, bad = timed(lambda: _weights.quick_check(staged, marker, True, args.workers))
        assert bad == []
        row("model_stage verify: full (%d workers)" % args.workers, seconds)

        print("bytes per run: %d (%s in %d files), cores: %d, load average: %.1f"
              % (total, _weights.human_bytes(total), len(files), os.cpu_count(), os.getloadavg()[0]))
        for name, secs in rows:
            print("%-40s %7.2f s  %8.1f MiB/s" % (name, secs, total / secs / 2 ** 20))
        times = dict(rows)
        copy = times["cp -r + sync"]
        print("staging / plain copy (cp -r + sync): mirror %.2fx, path %.2fx (target >= 0.8x)" % (
            copy / times["model_stage mirror (HTTP, %d workers)" % args.workers],
            copy / times["model_stage path (%d workers)" % args.workers]))
        print("verification / sha256sum: %.2fx (target >= 1x)" % (
            times["sha256sum (single process)"] / times["model_stage verify: full (%d workers)" % args.workers]))
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

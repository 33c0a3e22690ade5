"""Staging throughput of model_stage, run through Ansible, next to a plain copy and sha256sum.

Generates a weight tree of --total-mib MiB (tests/fixtures/weights/generate.py, profile bench),
serves it with the HTTP mirror double on loopback, and times on the same bytes, in one run:

  cp -r + fsync           coreutils copy of the tree, then `sync` of the copied files only
                          (fsync each: model_stage makes every staged file durable too)
  sha256sum               coreutils, one process, files one after another
  model_stage mirror      HTTP download + sha256 while writing + fsync + switch
  model_stage path        the same from the local directory on the same file system, as a site
                          that allows it stages (link_mode: hardlink, every file hashed)
  model_stage path copy   the same with link_mode: copy (kernel copy, hashing beside it),
                          reported beside the goals
  model_stage verify      verify: full on the staged copy (every file hashed again)

The three model_stage runs are tasks of one ansible-playbook run on localhost; their times are
Ansible's own task durations (callback ansible.posix.json), module start-up included. Dirty
pages of an earlier step are flushed before each step, outside the timing. The page cache is
warm for every step (the source was just written): the figures compare the tools, not the disk.
Each round times every step once; a ratio is taken within a round (both sides under the same
load) and the median ratio over --repeat rounds is held against the goal. Goals: path and mirror >= 0.9x the copy, verify
>= 1.5x sha256sum. Run: python tests/benchmarks/bench_weights_staging.py [--total-mib 2048]
"""

import argparse
import datetime
import grp
import json
import os
import pathlib
import pwd
import shutil
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from support import free_port, load_module  # noqa: E402

REPO_ID = "Qwen/Qwen3.6-27B"
GOALS = {"mirror": ("copy", 0.9), "path": ("copy", 0.9), "verify": ("sha256sum", 1.5)}
STAGED = ("mirror", "path", "path-copy", "verify")


def timed(argv):
    os.sync()  # nobody pays for the dirty pages of an earlier step
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def playbook(work, commit, source, mirror_url, workers):
    common = {"repo_id": REPO_ID, "revision": commit, "kind": "target", "workers": workers, "reserve_bytes": 0,
              "owner": pwd.getpwuid(os.getuid()).pw_name, "group": grp.getgrgid(os.getgid()).gr_name}
    tasks = [
        {"name": "Flush dirty pages", "ansible.builtin.command": "sync", "changed_when": False},
        {"name": "mirror", "pro6000.inference.model_stage": dict(
            common, dest=str(work / "mirror-dest" / "m"), source="mirror", mirror_url=mirror_url)},
        {"name": "Flush dirty pages again", "ansible.builtin.command": "sync", "changed_when": False},
        {"name": "path", "pro6000.inference.model_stage": dict(
            common, dest=str(work / "path-dest" / "m"), source="path", source_path=str(source),
            link_mode="hardlink")},
        {"name": "Flush dirty pages after linking", "ansible.builtin.command": "sync", "changed_when": False},
        {"name": "path-copy", "pro6000.inference.model_stage": dict(
            common, dest=str(work / "copy-dest" / "m"), source="path", source_path=str(source), link_mode="copy")},
        {"name": "Flush dirty pages before verifying", "ansible.builtin.command": "sync", "changed_when": False},
        {"name": "verify", "pro6000.inference.model_stage": dict(
            common, dest=str(work / "path-dest" / "m"), source="path", source_path=str(source), verify="full")},
    ]
    path = work / "bench.yml"
    path.write_text(json.dumps([{"name": "Stage the bench tree", "hosts": "localhost", "connection": "local",
                                 "gather_facts": False, "tasks": tasks}]))
    return path


def run_playbook(path):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    done = subprocess.run(["ansible-playbook", "-i", "localhost,", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(path)], env=env, capture_output=True,
                          text=True, check=False)
    report = json.loads(done.stdout)
    seconds, results = {}, {}
    for task in report["plays"][0]["tasks"]:
        name = task["task"]["name"]
        result = task["hosts"]["localhost"]
        if result.get("failed"):
            raise SystemExit("task %s failed: %s" % (name, result.get("msg")))
        if name in STAGED:
            duration = task["task"]["duration"]
            seconds[name] = (parse_time(duration["end"]) - parse_time(duration["start"])).total_seconds()
            results[name] = result
    return seconds, results


def parse_time(text):
    return datetime.datetime.strptime(text.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mib", type=int, default=2048)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
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
        files = sorted(str(p) for p in source.iterdir() if p.name != "manifest.json")
        total = sum(os.path.getsize(p) for p in files)
        port = free_port()
        server = subprocess.Popen([sys.executable, str(REPO / "tests/fixtures/hub_double/server.py"),
                                   "--root", str(work / "fixtures"), "--log", str(work / "requests.jsonl"),
                                   "--mirror-port", str(port), "--hub-port", str(free_port()),
                                   "--cdn-port", str(free_port())])
        time.sleep(1)
        book = playbook(work, commit, source, "http://127.0.0.1:%d" % port, args.workers)
        rounds = {name: [] for name in ("copy", "sha256sum") + STAGED}
        loads = []
        for _round in range(args.repeat):
            loads.append(os.getloadavg()[0])
            copy = work / "cp-copy"
            rounds["copy"].append(timed(["sh", "-c", 'cp -r "$1" "$2" && sync "$2" "$2"/*', "cp", str(source),
                                         str(copy)]))
            shutil.rmtree(copy)
            rounds["sha256sum"].append(timed(["sha256sum"] + files))
            seconds, results = run_playbook(book)
            for name in STAGED:
                rounds[name].append(seconds[name])
            mirror, path, verify = results["mirror"], results["path"], results["verify"]
            assert results["path-copy"]["fetched_bytes"] == total
            # Every staged file has the source's size, and verify: full found each of them matching
            # the generator's manifest.
            assert mirror["changed"] and path["changed"] and not verify["changed"] and verify["repaired"] == []
            assert mirror["fetched_bytes"] == path["fetched_bytes"] == total
            for dest in ("mirror-dest", "path-dest", "copy-dest"):
                staged = work / dest / "m"
                assert all(os.path.getsize(staged / os.path.basename(p)) == os.path.getsize(p) for p in files)
            shutil.rmtree(work / "mirror-dest")
            shutil.rmtree(work / "path-dest")
            shutil.rmtree(work / "copy-dest")
        figures = dict((name, statistics.median(values)) for name, values in rounds.items())
        print("bytes per run: %d (%.1f GiB in %d files), cores: %d, load average (1 min) at each round: %s"
              % (total, total / 2 ** 30, len(files), os.cpu_count(), ", ".join("%.2f" % v for v in loads)))
        labels = {"copy": "cp -r + fsync of the copy", "sha256sum": "sha256sum (one process)",
                  "mirror": "model_stage mirror (ansible task)", "path": "model_stage path, hardlink (ansible task)",
                  "path-copy": "model_stage path, copy (ansible task)",
                  "verify": "model_stage verify: full (ansible task)"}
        for name, label in labels.items():
            print("%-42s median %6.2f s  %7.1f MiB/s   rounds: %s" % (
                label, figures[name], total / figures[name] / 2 ** 20,
                " ".join("%.2f" % v for v in rounds[name])))

        def ratios(name, baseline):
            return [b / n for b, n in zip(rounds[baseline], rounds[name])]

        print("path, link_mode copy: %.2fx of copy, rounds %s (no goal: its sha256 costs more CPU than the "
              "kernel's copy)" % (statistics.median(ratios("path-copy", "copy")),
                                  " ".join("%.2f" % r for r in ratios("path-copy", "copy"))))
        failed = []
        for name, (baseline, goal) in GOALS.items():
            ratio = statistics.median(ratios(name, baseline))
            print("%-6s %.2fx of %-9s (goal >= %.1fx) %s   rounds: %s" % (
                name, ratio, baseline, goal, "met" if ratio >= goal else "NOT MET",
                " ".join("%.2f" % r for r in ratios(name, baseline))))
            if ratio < goal:
                failed.append(name)
        return 1 if failed else 0
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

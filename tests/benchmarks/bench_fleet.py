"""What a no-op pass of the real site.yml costs per host, over a fleet of N lab-like hosts.

Starts N systemd containers pro6000-fleet-1..N (the platform of .config/molecule/config.yml,
labelled pro6000.bench-fleet=<checkout>), serves the test doubles inside each (the shared
prepare playbooks under molecule/shared, as the default scenario does), converges them with
the real site.yml and the lab's group_vars in one batch (the first host is also the monitoring
host, as a fleet has one), then reruns site.yml unchanged (its default batching, or --serial)
and measures that rerun:

  tasks / host            task results per host in the recap (ok + skipped + failed), from
                          the ansible.posix.json callback's stats; changed must be 0
  remote execs / host     `docker exec` runs the Docker daemon started in each container
                          during the rerun (`docker events`, exec_start, streamed): every module run,
                          file transfer and temporary-directory command counts, whatever
                          Ansible believes it did
  controller CPU-s / host user + system CPU of the ansible-playbook process and every process
                          it waited for (its forks, the docker CLI), from getrusage(CHILDREN)
  wall                    the rerun's elapsed time
  per role                tasks, task results and controller CPU-s of the rerun by role, all hosts
                          together (callback task_cpu beside this file: the CPU of the main
                          process and its reaped forks between one task's start and the next),
                          "(start)" being the parse of the playbooks and inventory before the
                          first task

Goals (issue #26) are printed beside the figures. The machine's 1-minute load average before
and after the rerun goes with them. The containers are removed at the end (--keep leaves them
for another run, which then reuses them and measures again).
Run: python tests/benchmarks/bench_fleet.py --hosts 4 [--serial 4] [--reruns 2] [--keep]
"""

import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
PREFIX = "pro6000-fleet-"
LABEL = "pro6000.bench-fleet"
PREPARE = ["prepare_nvidia_mirror.yml", "prepare_python_index.yml", "prepare_sglang_repo.yml",
           "prepare_weights_mirror.yml"]
GOALS = {"tasks": 60, "remote": 20, "cpu": 8.0}


def interpolate(text):
    """${VAR:-default} as Molecule reads its config."""
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}",
                  lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), text)


def docker_run_args(name):
    platform = yaml.safe_load((REPO / ".config/molecule/config.yml").read_text())["platforms"][0]
    args = ["docker", "run", "-d", "--name", name, "--hostname", name, "--label", f"{LABEL}={REPO}"]
    if platform.get("cgroupns_mode"):
        args += ["--cgroupns", platform["cgroupns_mode"]]
    args += [a for cap in platform.get("capabilities", []) for a in ("--cap-add", cap)]
    args += [a for opt in platform.get("security_opts", []) for a in ("--security-opt", opt)]
    args += [a for vol in platform.get("volumes", []) for a in ("-v", vol)]
    args += [a for fs in platform.get("tmpfs", []) for a in ("--tmpfs", fs)]
    return args + [interpolate(platform["image"]), platform["command"]]


def ours():
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={LABEL}={REPO}",
                          "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def start_hosts(names):
    existing = ours()
    for name in names:
        if name not in existing:
            subprocess.run(docker_run_args(name), check=True, stdout=subprocess.DEVNULL)


def remove_hosts(names):
    mine = ours() & set(names)
    if mine:
        subprocess.run(["docker", "rm", "-f", *sorted(mine)], check=True, stdout=subprocess.DEVNULL)


def write_inventory(directory, names):
    hosts = {name: {"ansible_connection": "community.docker.docker"} for name in names}
    inventory = {"pro6000": {"hosts": hosts},
                 "pro6000_monitoring": {"hosts": {names[0]: None}}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (directory / "group_vars").symlink_to(REPO / "inventories/lab/group_vars")
    return directory / "hosts.yml"


def environment():
    env = dict(os.environ)
    env.update(ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               MOLECULE_PROJECT_DIRECTORY=str(REPO), ANSIBLE_FORCE_COLOR="0",
               PATH=f"{REPO / '.venv/bin'}:{env['PATH']}")
    return env


def playbook(inventory, path, extra, log, json_out=False, task_cpu=None):
    """Runs ansible-playbook from the checkout; returns (rc, stdout, CPU-s, wall-s). task_cpu:
    the file callback task_cpu writes each task's CPU to."""
    env = environment()
    if json_out:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    if task_cpu:
        env.update(ANSIBLE_CALLBACK_PLUGINS=str(pathlib.Path(__file__).parent / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="task_cpu", TASK_CPU_FILE=str(task_cpu))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(path), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    log.write(proc.stdout + proc.stderr)
    return proc.returncode, proc.stdout, cpu, wall


def converge(inventory, extra, log):
    for name in PREPARE:
        rc, _stdout, _cpu, wall = playbook(inventory, REPO / "molecule/shared" / name, [], log)
        print(f"prepare {name}: rc={rc} {wall:.0f} s", flush=True)
        if rc:
            sys.exit(f"prepare {name} failed: see {log.name}")
    rc, _stdout, cpu, wall = playbook(inventory, REPO / "site.yml", extra, log)
    print(f"converge: rc={rc} {wall:.0f} s, {cpu:.1f} CPU-s", flush=True)
    if rc:
        sys.exit(f"converge failed: see {log.name}")


class ExecCounter:
    """Counts the daemon's exec_start events per container while it is open. A live stream:
    the daemon replays only its last 256 events for --since, fewer than one rerun makes."""

    def __init__(self, names):
        self.names = names

    def __enter__(self):
        self.out = tempfile.TemporaryFile("w+")
        filters = ["--filter", "type=container", "--filter", "event=exec_start"]
        filters += [a for name in self.names for a in ("--filter", f"container={name}")]
        self.proc = subprocess.Popen(["docker", "events", *filters,
                                      "--format", "{{.Actor.Attributes.name}}"], stdout=self.out)
        time.sleep(1)  # the stream is open before the first exec
        return self

    def __exit__(self, *exc):
        time.sleep(1)  # the last exec's event is out
        self.proc.terminate()
        self.proc.wait()
        self.out.seek(0)
        seen = self.out.read().split()
        self.out.close()
        self.counts = {name: seen.count(name) for name in self.names}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, choices=[1, 4, 8], default=1)
    parser.add_argument("--serial", help="site_serial for every run (JSON, e.g. 4 or '[1, \"25%%\"]');"
                        " without it, site.yml's default batching")
    parser.add_argument("--reruns", type=int, default=1, help="no-op reruns measured")
    parser.add_argument("--keep", action="store_true", help="leave the hosts for another run")
    parser.add_argument("--rerun-only", action="store_true",
                        help="hosts kept converged by an earlier --keep run: measure the rerun only")
    args = parser.parse_args()
    names = [f"{PREFIX}{i}" for i in range(1, args.hosts + 1)]
    extra = ["-e", json.dumps({"site_serial": json.loads(args.serial)})] if args.serial else []
    logdir = REPO / "build" / "bench-fleet"
    logdir.mkdir(parents=True, exist_ok=True)
    log = open(logdir / f"n{args.hosts}.log", "w")
    print(f"log: {log.name}", flush=True)
    try:
        start_hosts(names)
        with tempfile.TemporaryDirectory() as tmp:
            inventory = write_inventory(pathlib.Path(tmp), names)
            if not args.rerun_only:
                # One batch: only the rerun is measured, and one batch gets there soonest.
                converge(inventory, ["-e", json.dumps({"site_serial": args.hosts})], log)
            for rerun in range(1, args.reruns + 1):
                load_before = os.getloadavg()[0]
                with ExecCounter(names) as execs:
                    rc, stdout, cpu, wall = playbook(inventory, REPO / "site.yml", extra, log, json_out=True,
                                                     task_cpu=logdir / "task-cpu.json")
                load_after = os.getloadavg()[0]
                if rc:
                    sys.exit(f"no-op rerun failed: see {log.name}")
                stats = json.loads(stdout[stdout.index("{"):])["stats"]
                report(args.hosts, rerun, stats, execs.counts, cpu, wall, (load_before, load_after))
                report_roles(json.loads((logdir / "task-cpu.json").read_text()))
    finally:
        log.close()
        if not args.keep:
            remove_hosts(names)


def report(n, rerun, stats, execs, cpu, wall, load):
    tasks = {h: s["ok"] + s["skipped"] + s["failures"] + s["unreachable"] for h, s in stats.items()}
    changed = sum(s["changed"] for s in stats.values())
    worst = max(tasks.values())
    print(f"\nno-op rerun {rerun}, N={n} hosts, load average {load[0]:.2f} before, {load[1]:.2f} after")
    print(f"{'host':<20}{'tasks':>7}{'skipped':>9}{'remote execs':>14}")
    for host in sorted(tasks):
        print(f"{host:<20}{tasks[host]:>7}{stats[host]['skipped']:>9}{execs.get(host, 0):>14}")
    print(f"{'figure':<30}{'measured':>12}{'goal':>10}")
    print(f"{'changed (all hosts)':<30}{changed:>12}{0:>10}")
    print(f"{'tasks / host (most)':<30}{worst:>12}{GOALS['tasks']:>10}")
    print(f"{'remote execs / host (most)':<30}{max(execs.values()):>12}{GOALS['remote']:>10}")
    print(f"{'controller CPU-s / host':<30}{cpu / n:>12.1f}{GOALS['cpu']:>10.1f}")
    print(f"{'controller CPU-s (run)':<30}{cpu:>12.1f}")
    print(f"{'wall s':<30}{wall:>12.1f}", flush=True)


def report_roles(entries):
    """Tasks, task results and controller CPU-s by role (all hosts), the costliest first."""
    roles = {}
    for entry in entries:
        tasks, results, cpu = roles.get(entry["role"], (0, 0, 0.0))
        roles[entry["role"]] = (tasks + 1, results + entry["results"], cpu + entry["cpu"])
    print(f"{'role':<20}{'tasks':>7}{'results':>9}{'CPU-s':>8}")
    for role, (tasks, results, cpu) in sorted(roles.items(), key=lambda item: -item[1][2]):
        print(f"{role:<20}{tasks:>7}{results:>9}{cpu:>8.1f}")
    print(f"{'all':<20}{len(entries):>7}{sum(e['results'] for e in entries):>9}"
          f"{sum(e['cpu'] for e in entries):>8.1f}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Runs every check, keeps going after a failure so that one run shows everything, and ends
# with one summary line. Arguments: the Molecule scenarios to run, longest first.
#
# Every stage is a job with a log of its own, TEST_JOBS of them side by side (default 3 on any
# number of cores): scenarios spend most of their time waiting on containers, health gates and
# drains, and one scenario running alone left 52 to 58 % of two cores idle (issue #42); the
# run's CPU use is printed at the end, to judge the number by. Lint starts first (a broken lint
# shows within minutes), then the two longest stages that are not scenarios (the newest-line
# lane, pytest), then the other static checks, then the scenarios in the order given, longest
# first, so that the run ends on short ones.
#
# After the stage table (each stage's wall time and the CPU of its own processes) it says where
# the time went: the set-up before this script (`make test` passes the time it started in
# PRO6000_SETUP_STARTED), the 20 slowest pytest phases and the 20 slowest Ansible tasks of the
# scenarios (tests/scripts/timings.py), and the CPU the run kept busy.
set -uo pipefail
# Busy and idle ticks of all cores (/proc/stat): the share of the CPU the stages used.
cpu_ticks() {
  local _cpu user nice system idle iowait irq softirq steal _rest
  read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
  echo "$((user + nice + system + irq + softirq + steal)) $((idle + iowait))"
}
read -r busy_start idle_start < <(cpu_ticks)
# make test's prerequisites (virtual environments, Docker engine, base images) ran before this.
setup_seconds=
[ -z "${PRO6000_SETUP_STARTED:-}" ] || setup_seconds=$(($(date +%s) - PRO6000_SETUP_STARTED))
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
logs=build/logs
mkdir -p "$logs"

collection_build() {
  local out=build/galaxy
  rm -rf "$out" && mkdir -p "$out"
  ansible-galaxy collection build --force --output-path "$out" . &&
    ! tar -tzf "$out"/pro6000-inference-*.tar.gz | grep -E '^(tests|molecule|chatops/tests|chatops/build|chatops/[^/]*\.egg-info|collections|\.ci)/' &&
    ansible-galaxy collection install --force -p "$out/installed" "$out"/pro6000-inference-*.tar.gz &&
    ANSIBLE_COLLECTIONS_PATH="$top/$out/installed" ansible-doc -l pro6000.inference
}

# job NAME COMMAND...: runs COMMAND into NAME's log and records "ok|FAILED SECONDS CPU-SECONDS",
# the CPU (user and system) of the processes the job started and waited for: the stage's own
# processes (Ansible's controller, pytest, the linters), not what runs in its containers.
# `times` reports the shell it runs in, so it writes to a file rather than into a subshell.
job() {
  local name=$1 start=$SECONDS verdict=ok cpu
  shift
  "$@" >"$logs/$name.log" 2>&1 || verdict=FAILED
  times >"$logs/$name.times"
  cpu=$(awk 'function sec(t) { split(t, p, /[ms]/); return p[1] * 60 + p[2] }
    NR == 2 { printf "%d\n", sec($1) + sec($2) + 0.5 }' "$logs/$name.times")
  rm -f "$logs/$name.times"
  echo "$verdict $((SECONDS - start)) $cpu" >"$logs/$name.status"
}

names=()
commands=()
add() {
  names+=("$1")
  shift
  commands+=("$*")
}
add lint tests/scripts/lint.sh
# The two longest stages that are not scenarios next, so that they do not end the run.
add newest-lane tests/scripts/newest-lane.sh
# The modules its playbooks run on localhost keep the bytecode of what they import from their zip
# (tests/images/zipimport: PYTHONPATH reaches every Python this stage starts, only that changes).
add pytest env PYTHONPATH="$top/tests/images/zipimport${PYTHONPATH:+:$PYTHONPATH}" \
  python -m pytest tests/unit tests/integration chatops/tests -q -rfE --durations=20
# The execution environment's image runs ansible-core 2.19 on Python 3.11: the legacy line's
# only lane (README, "Tests": a sanity and unit lane of its own would need a third image).
add execution-environment tests/scripts/ee.sh
add sanity tests/scripts/sanity.sh
add collection-build collection_build
add galaxy tests/scripts/galaxy-check.sh
add controller-install tests/scripts/controller-install.sh
for scenario in "$@"; do
  add "molecule-$scenario" molecule test -s "$scenario"
done

# Containers made by this run carry this checkout in a label (.config/molecule/config.yml and
# the scenarios that list their own platforms); only those are removed, so that a `make lab`
# host, another checkout's test containers and anything else named pro6000-* stay.
export PRO6000_TEST_CHECKOUT=$top
label=pro6000.test-checkout
# The lab host is the default scenario's instance (same name, same config: see the Makefile),
# so that scenario's destroy would remove it: stop here and say so, before anything runs.
for scenario in "$@"; do
  [ "$scenario" = default ] || continue
  owner=$(docker inspect -f "{{ index .Config.Labels \"$label\" }}" pro6000-lab 2>/dev/null) || break
  if [ "$owner" != "$top" ]; then
    echo "run-all.sh: container pro6000-lab (a make lab host, or another checkout's default" \
      "scenario: label '$label=$owner') is there and the default scenario would destroy it." \
      "Stop it with 'make lab-down' (or leave default out: tests/scripts/run-all.sh SCENARIO...)." >&2
    exit 2
  fi
done
# Containers left by an interrupted run would be reused by Molecule's create instead of started
# fresh.
docker ps -aq --filter "label=$label=$top" | xargs -r docker rm -f >/dev/null
# Task records (callback lane_record, enabled in .config/molecule/config.yml) are appended to.
rm -f "$logs"/*.status "$logs"/tasks-*.jsonl
jobs_max=${TEST_JOBS:-3}
for i in "${!names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  echo "==> ${names[$i]} (started at $SECONDS s)"
  # shellcheck disable=SC2086  # the commands above are words without quoting needs
  job "${names[$i]}" ${commands[$i]} &
done
wait

passed=()
failed=()
own_cpu=0
for name in "${names[@]}"; do
  read -r verdict seconds cpu <"$logs/$name.status"
  echo "==> $name: $verdict ($seconds s; $cpu CPU-s of its own processes)"
  own_cpu=$((own_cpu + cpu))
  if [ "$verdict" = ok ]; then
    passed+=("$name")
    # pytest's counts (and its skips) are worth seeing on success too.
    [ "$name" != pytest ] || tail -3 "$logs/$name.log" | sed 's/^/    | /'
  else
    failed+=("$name")
    tail -120 "$logs/$name.log" | sed 's/^/    | /'
  fi
done

echo
echo "set-up before this script: ${setup_seconds:-not measured (run through make test)}${setup_seconds:+ s}"
python tests/scripts/timings.py --count 20 --pytest-log "$logs/pytest.log" --task-records "$logs"
read -r busy_end idle_end < <(cpu_ticks)
busy=$((busy_end - busy_start))
echo "CPU busy: $((100 * busy / (busy + idle_end - idle_start + 1))) % of $(nproc) cores while $jobs_max stages ran side by side"
# The rest of the busy time is the containers' (the modules Ansible runs there, the doubles),
# the Docker engine's and the kernel's (tests/benchmarks/test-suite-time.md, "Where the CPU goes").
echo "CPU-s: $((busy / $(getconf CLK_TCK))) busy, $own_cpu of them the stages' own processes"
echo
echo "total: $SECONDS s"
echo "passed: ${passed[*]:-none}"
echo "failed: ${failed[*]:-none}"
# Where only the end of this output is kept (a CI summary), the failing tests and tasks still
# show: pytest's summary lines, and for every other failed stage its last failed task or
# assertion (Molecule's log frames them in box-drawing characters and colours).
grep -hE '^(FAILED|ERROR) ' "$logs/pytest.log" 2>/dev/null | cut -c1-200 | sed 's/^/pytest: /'
for name in "${failed[@]}"; do
  [ "$name" != pytest ] || continue
  sed 's/\x1b\[[0-9;]*m//g; s/^[ │]*//' "$logs/$name.log" |
    grep -E '^(fatal: |failed: |FAILED|E  |ERROR! |\[ERROR\])' | grep -v RETRYING | tail -6 | cut -c1-200 | sed "s/^/$name: /"
done
echo "stages: ${#passed[@]} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]

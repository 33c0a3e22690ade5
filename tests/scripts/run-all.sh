#!/usr/bin/env bash
# Runs every check in order, keeps going after a failure so that one run shows everything,
# and ends with one summary line. Arguments: the Molecule scenarios to run.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
logs=build/logs
mkdir -p "$logs"
passed=()
failed=()

stage() {
  local name=$1; shift
  local start=$SECONDS
  echo "==> $name"
  if "$@" >"$logs/$name.log" 2>&1; then
    passed+=("$name")
    echo "    ok ($((SECONDS - start)) s)"
  else
    failed+=("$name")
    echo "    FAILED ($((SECONDS - start)) s); last lines of $logs/$name.log:"
    tail -60 "$logs/$name.log" | sed 's/^/    | /'
  fi
}

pytest_stage() {
  local name=$1; shift
  echo "==> $name"
  local start=$SECONDS
  # pytest prints its own summary; "no tests collected" (exit 5) is a failure here too.
  if python -m pytest "$@" -q -rfE; then
    passed+=("$name"); echo "    ok ($((SECONDS - start)) s)"
  else
    failed+=("$name"); echo "    FAILED ($((SECONDS - start)) s)"
  fi
}

collection_build() {
  local out=build/galaxy
  rm -rf "$out" && mkdir -p "$out"
  ansible-galaxy collection build --force --output-path "$out" . &&
    ! tar -tzf "$out"/pro6000-inference-*.tar.gz | grep -E '^(tests|molecule|chatops|collections|\.ci)/' &&
    ansible-galaxy collection install --force -p "$out/installed" "$out"/pro6000-inference-*.tar.gz &&
    ANSIBLE_COLLECTIONS_PATH="$top/$out/installed" ansible-doc -l pro6000.inference
}

stage lint ansible-lint --profile production
stage sanity tests/scripts/sanity.sh
stage collection-build collection_build
pytest_stage pytest tests/unit tests/integration chatops/tests
# Scenarios spend most of their time waiting on containers, not on the CPU: run
# MOLECULE_JOBS of them side by side (each has containers and logs of its own).
molecule_stage() {
  local scenario=$1 start=$SECONDS
  if molecule test -s "$scenario" >"$logs/molecule-$scenario.log" 2>&1; then
    echo "ok $((SECONDS - start))" >"$logs/molecule-$scenario.status"
  else
    echo "FAILED $((SECONDS - start))" >"$logs/molecule-$scenario.status"
  fi
}
# Containers left by an interrupted run (or by make lab) would be reused by Molecule's create
# instead of started fresh.
docker ps -aq --filter name=^pro6000- | xargs -r docker rm -f >/dev/null
jobs_max=${MOLECULE_JOBS:-2}
scenarios=("$@")
parallel=()
for scenario in "${scenarios[@]}"; do
  # The default scenario imports every shared prepare step: alone first, it fills the
  # controller-side caches (wheels, archives) that the scenarios after it only read.
  if [ "$scenario" = default ]; then
    echo "==> molecule-default (alone, first)"
    molecule_stage default
  else
    parallel+=("$scenario")
  fi
done
for scenario in "${parallel[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  echo "==> molecule-$scenario (started)"
  molecule_stage "$scenario" &
done
wait
for scenario in "${scenarios[@]}"; do
  read -r verdict seconds <"$logs/molecule-$scenario.status"
  echo "==> molecule-$scenario: $verdict ($seconds s)"
  if [ "$verdict" = ok ]; then
    passed+=("molecule-$scenario")
  else
    failed+=("molecule-$scenario")
    tail -80 "$logs/molecule-$scenario.log" | sed 's/^/    | /'
  fi
done

echo
echo "passed: ${passed[*]:-none}"
echo "failed: ${failed[*]:-none}"
echo "stages: ${#passed[@]} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]

#!/usr/bin/env bash
# Runs every check in order, keeps going after a failure so that one run shows everything,
# and ends with one summary line. Arguments: the Molecule scenarios to run.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
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
for scenario in "$@"; do
  stage "molecule-$scenario" molecule test -s "$scenario"
done

echo
echo "passed: ${passed[*]:-none}"
echo "failed: ${failed[*]:-none}"
echo "stages: ${#passed[@]} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]

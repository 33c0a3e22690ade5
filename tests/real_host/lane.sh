#!/usr/bin/env bash
# The real-host lane: run on a Pro6000 host (or any Ubuntu 24.04 GPU host) from a checkout, it
# checks the collection against the host it runs on (local connection) and changes nothing:
#   1. the GPU facts module, NVIDIA's repository as composed for this host, every role's preflight
#      (preflight.yml, check mode);
#   2. `ansible-playbook site.yml --check --diff` with the production inventory;
# then writes report.json and report.md (report.py) into the report directory.
#
#   tests/real_host/lane.sh [REPORT_DIR [ANSIBLE-PLAYBOOK ARGUMENTS...]]
#                                   default: tests/real_host/reports/<short hostname>
#
# Needs ansible-core: ansible-playbook on PATH, or ANSIBLE_PLAYBOOK="python3 -m ansible playbook" where
# it is only importable. Nothing is downloaded; check mode adds nothing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${1:-$here/reports/$(hostname -s)}
shift || true
mkdir -p "$out"
cd "$top" || exit 1
export ANSIBLE_COLLECTIONS_PATH="$top/collections" ANSIBLE_CALLBACK_PLUGINS="$here/callback_plugins"
export ANSIBLE_CALLBACKS_ENABLED=lane_record
export ANSIBLE_NOCOLOR=1 ANSIBLE_DEPRECATION_WARNINGS=0

# LANE_RAW_DIR keeps the raw logs (ansible-playbook's output and the recorded task results).
if [ -n "${LANE_RAW_DIR:-}" ]; then
  raw=$LANE_RAW_DIR
  mkdir -p "$raw"
else
  raw=$(mktemp -d)
  trap 'rm -rf "$raw"' EXIT
fi
# The host as a member of the production group, reached without ssh.
# The host watches itself, as a one-host site's monitoring host (site.yml stops while group
# pro6000_monitoring is empty).
cat >"$raw/inventory.yml" <<YAML
pro6000:
  hosts:
    real-host:
      ansible_connection: local
      ansible_python_interpreter: $(command -v python3)
pro6000_monitoring:
  hosts:
    real-host:
YAML
extra=("$@")
rm -f "$raw/exits"
echo "$*" >"$raw/arguments"
run() {
  local name=$1
  shift
  # shellcheck disable=SC2086  # ANSIBLE_PLAYBOOK may be a command with arguments
  LANE_RECORD_FILE="$raw/$name.jsonl" timeout "${LANE_TIMEOUT:-1200}" ${ANSIBLE_PLAYBOOK:-ansible-playbook} -i inventories/production \
    -i "$raw/inventory.yml" -e @tests/real_host/lane-vars.yml --check "$@" "${extra[@]}" >"$raw/$name.log" 2>&1
  echo "$name: exit $?" | tee -a "$raw/exits"
}
run preflight tests/real_host/preflight.yml
run site-check --diff site.yml

# The identity files Ansible reads, and what apt and the init system are, as seen here.
{
  echo "## /etc/os-release"; cat /etc/os-release
  echo "## /etc/lsb-release"; cat /etc/lsb-release 2>/dev/null || echo "(absent)"
  echo "## PID 1"; cat /proc/1/comm
  echo "## python3-apt"; dpkg-query -W -f='${Status} ${Version}\n' python3-apt 2>&1
  echo "## apt sources naming NVIDIA's repository"; grep -rh "cuda/repos\|nvidia" /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null || echo "(none)"
} >"$raw/host.txt"

python3 "$here/report.py" --raw "$raw" --out "$out"

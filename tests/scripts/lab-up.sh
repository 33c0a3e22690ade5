#!/usr/bin/env bash
# Brings the lab host back before `make lab` converges it. Molecule keeps the default scenario's
# "created" state outside the container, so after the machine or the Docker engine restarted it
# still believes in a container that is stopped (fact gathering then fails with "Container ...
# is not running") or gone. A stopped lab starts again as it was (builds, staged weights and
# units kept: its doubles are enabled units); for one that is gone, the scenario's destroy
# clears the stale state so that `molecule create` makes it anew. (`molecule reset` is not
# used: it stops every Molecule container on the machine, not only this scenario's.)
set -euo pipefail
name=pro6000-lab
running=$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null || echo gone)
case $running in
  true) ;;
  false)
    echo "lab-up: starting the stopped lab container $name"
    docker start "$name" >/dev/null
    state=
    for _ in $(seq 120); do
      state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
      case $state in running | degraded) break ;; esac
      sleep 1
    done
    echo "lab-up: systemd in $name is ${state:-not answering}"
    ;;
  gone)
    # Columns: instance, driver, provisioner, scenario, created, converged.
    if molecule list -s default --format plain 2>/dev/null | awk -v n="$name" '$1 == n && $5 == "true" {f = 1} END {exit !f}'; then
      echo "lab-up: Molecule still lists $name as created but the container is gone: clearing that state"
      molecule destroy -s default >/dev/null
    fi
    ;;
esac

#!/usr/bin/env bash
# Makes this machine able to run the container tests: Docker engine, debootstrap and the SSH
# client from Debian's packages, the engine started and answering. Safe to run again: it only
# does what is missing.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
# ssh reaches the test containers, ssh-keygen makes its key (tests/images/build.sh).
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# promtool for the rule tests (tests/unit/monitoring): the distribution's prometheus package,
# unpacked into the checkout rather than installed, so that no Prometheus starts on this machine.
top=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v promtool >/dev/null 2>&1 && [ ! -x "$top/.cache/prometheus/usr/bin/promtool" ]; then
  echo "unpacking promtool from the prometheus package"
  work=$(mktemp -d)
  cd "$work"
  if ! apt-get download -q prometheus >/dev/null 2>&1; then
    apt-get update -qq
    apt-get download -q prometheus >/dev/null
  fi
  cd "$top"
  mkdir -p "$top/.cache"
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  rm -rf "$top/.cache/prometheus" && mv "$work/root" "$top/.cache/prometheus"
  rm -rf "$work"
fi

if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd"
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { tail -20 /var/log/dockerd.log; echo "dockerd did not start" >&2; exit 1; }
fi
echo "docker engine $(docker info -f '{{.ServerVersion}}') is running"

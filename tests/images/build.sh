#!/usr/bin/env bash
# Builds the container base image that stands in for a Pro6000 host: Debian from Debian's own
# packages (no registry can be pulled from here), systemd as PID 1, python3 for Ansible, and the
# machine's extra certificate authorities so that pip and apt over HTTPS work inside.
# The image carries the hash of this recipe as a label: it is rebuilt only when the recipe or
# the trusted authorities change.
set -euo pipefail

suite=${1:-bookworm}
image=${2:-pro6000/debian12-systemd:latest}
ca_dir=/usr/local/share/ca-certificates
# What a provisioned host already has, plus what the roles install themselves (python3-venv, git,
# python3-debian for deb822_repository): preinstalled so that each scenario does not fetch it
# again; the roles still declare them and find them present.
packages=systemd,systemd-sysv,dbus,python3,python3-apt,python3-venv,python3-debian,sudo,iproute2,ca-certificates,procps,kmod,git,gnupg,curl

recipe_hash=$( { cat "$0"; echo "$suite $packages"; find "$ca_dir" -type f -name '*.crt' -print0 2>/dev/null | sort -z | xargs -0 -r cat; } | sha256sum | cut -c1-16)

if [ "$(docker image inspect -f '{{ index .Config.Labels "pro6000.recipe" }}' "$image" 2>/dev/null)" = "$recipe_hash" ]; then
  echo "image $image is current (recipe $recipe_hash)"
  exit 0
fi

rootfs=$(mktemp -d /var/tmp/pro6000-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "building $image from Debian $suite (recipe $recipe_hash)"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" >"$rootfs.log" 2>&1 || { tail -30 "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"

# Trust the same extra authorities as this machine, and point pip at the system bundle.
if compgen -G "$ca_dir/*.crt" >/dev/null; then
  cp "$ca_dir"/*.crt "$rootfs$ca_dir/"
  chroot "$rootfs" update-ca-certificates >/dev/null
fi
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
# A container has no console to log in on and no hardware clock to sync.
for unit in getty@tty1.service systemd-timesyncd.service; do
  chroot "$rootfs" systemctl mask "$unit" >/dev/null 2>&1 || true
done
# An image has no machine identity of its own: systemd writes one per container at boot.
: >"$rootfs/etc/machine-id"
chroot "$rootfs" apt-get clean

tar -C "$rootfs" -c . | docker import \
  -c 'CMD ["/lib/systemd/systemd"]' \
  -c 'ENV container=docker' \
  -c "LABEL pro6000.recipe=$recipe_hash" \
  - "$image" >/dev/null
echo "built $image"

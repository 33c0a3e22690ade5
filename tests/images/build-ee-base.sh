#!/usr/bin/env bash
# Builds pro6000/ee-base:latest, the base image that execution-environment.yml names, from
# Debian 12's packages: no RHEL-family image (what AWX's execution environments build on) can be
# pulled here. It gives ansible-builder what its scripts expect of a RHEL-family base
# (docs/execution-environment.md says what differs):
#
#   /usr/bin/dnf        a shim that maps the install and clean calls onto apt-get (ee-base/dnf)
#   python3.11          with python3-venv, which brings the wheels ensurepip installs from;
#                       the definition's python_interpreter step asks the shim for it again
#   ensurepip           Debian's block on the system interpreter removed, and the
#                       EXTERNALLY-MANAGED marker too: ansible-builder installs pip and the
#                       collection's Python needs into the system interpreter, as it does on RHEL
#
# Cached like the other images: rebuilt only when this recipe or the trusted authorities change.
set -euo pipefail

suite=bookworm
image=${1:-pro6000/ee-base:latest}
here=$(cd "$(dirname "$0")" && pwd)
ca_dir=/usr/local/share/ca-certificates
# python3-venv: Python 3.11 and the wheels ensurepip installs (python3-pip-whl, ...-setuptools-whl).
packages=python3-venv,ca-certificates

recipe_hash=$( { cat "$0" "$here"/ee-base/*; echo "$suite $packages"; find "$ca_dir" -type f -name '*.crt' -print0 2>/dev/null | sort -z | xargs -0 -r cat; } | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "pro6000.recipe" }}' "$image" 2>/dev/null)" = "$recipe_hash" ]; then
  echo "image $image is current (recipe $recipe_hash)"
  exit 0
fi

rootfs=$(mktemp -d /var/tmp/pro6000-ee-base.XXXXXX)
trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
echo "building $image from Debian $suite (recipe $recipe_hash)"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" >"$rootfs.log" 2>&1 || { tail -30 "$rootfs.log"; exit 1; }

if compgen -G "$ca_dir/*.crt" >/dev/null; then
  cp "$ca_dir"/*.crt "$rootfs$ca_dir/"
  chroot "$rootfs" update-ca-certificates >/dev/null
fi
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
install -m 0755 "$here/ee-base/dnf" "$rootfs/usr/bin/dnf"
# Debian's patch makes `python3 -m ensurepip` stop with "ensurepip is disabled in Debian/Ubuntu
# for the system python": _bootstrap calls the function it adds first. That call goes.
ensurepip=$rootfs/usr/lib/python3.11/ensurepip/__init__.py
sed -i '/^    _ensurepip_is_disabled_in_debian_for_system()$/d' "$ensurepip"
if grep -q '^    _ensurepip_is_disabled_in_debian_for_system()' "$ensurepip"; then
  echo "Debian's ensurepip block is still in $ensurepip" >&2
  exit 1
fi
rm -f "$rootfs"/usr/lib/python3.11/EXTERNALLY-MANAGED
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/*

tar -C "$rootfs" -c . | docker import \
  -c 'CMD ["/bin/bash"]' \
  -c "LABEL pro6000.recipe=$recipe_hash" \
  -c 'LABEL pro6000.identity="execution environment base: Debian 12 bookworm with a dnf shim"' \
  - "$image" >/dev/null
echo "built $image"

#!/usr/bin/env bash
# Builds the container base images that stand in for a Pro6000 host, from Debian's own packages
# (no registry can be pulled from here, and no Ubuntu archive is reachable): systemd as PID 1,
# python3 for Ansible, and the machine's extra certificate authorities so that pip and apt over
# HTTPS work inside. One debootstrap gives two images:
#
#   pro6000/ubuntu2404-identity:latest  Ubuntu 24.04 "noble" as Ansible sees it (os-release,
#                                       lsb-release, debian_version as on noble) on Debian 12
#                                       packages: the default platform of every scenario
#   pro6000/debian12-systemd:latest     plain Debian 12 "bookworm": the second platform
#
# Each image carries the hash of this recipe as a label: they are rebuilt only when the recipe or
# the trusted authorities change.
set -euo pipefail

suite=bookworm
ubuntu_image=${1:-pro6000/ubuntu2404-identity:latest}
debian_image=${2:-pro6000/debian12-systemd:latest}
here=$(cd "$(dirname "$0")" && pwd)
ca_dir=/usr/local/share/ca-certificates
# What a provisioned host already has, plus what the roles install themselves (python3-venv, git,
# python3-debian for deb822_repository): preinstalled so that each scenario does not fetch it
# again; the roles still declare them and find them present.
packages=systemd,systemd-sysv,dbus,python3,python3-apt,python3-venv,python3-debian,sudo,iproute2,ca-certificates,procps,kmod,git,gnupg,curl,openssh-server

# The key Ansible's ssh offers the test containers (any key opens them, see ssh/sshd_config_stdio):
# one per checkout, made once, beside the checkout's other caches.
key=$(cd "$here/../.." && pwd)/.cache/test-ssh/id_ed25519
if [ ! -f "$key" ]; then
  mkdir -p "$(dirname "$key")"
  ssh-keygen -q -t ed25519 -N '' -C pro6000-test-containers -f "$key"
fi

recipe_hash=$( { cat "$0" "$here"/ubuntu2404-identity/* "$here"/zipimport/zipimport_bytecode_cache.py "$here"/ssh/*; echo "$suite $packages"; find "$ca_dir" -type f -name '*.crt' -print0 2>/dev/null | sort -z | xargs -0 -r cat; } | sha256sum | cut -c1-16)

current() {
  [ "$(docker image inspect -f '{{ index .Config.Labels "pro6000.recipe" }}' "$1" 2>/dev/null)" = "$recipe_hash" ]
}
if current "$ubuntu_image" && current "$debian_image"; then
  echo "images $ubuntu_image and $debian_image are current (recipe $recipe_hash)"
  exit 0
fi

rootfs=$(mktemp -d /var/tmp/pro6000-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "building $debian_image and $ubuntu_image from Debian $suite (recipe $recipe_hash)"
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
# Modules import their module_utils from a zip that Python never caches the bytecode of: a cache
# for the test containers (the file says why and what it keeps), loaded by a .pth at start.
install -m 0644 "$here/zipimport/zipimport_bytecode_cache.py" "$rootfs/usr/lib/python3/dist-packages/"
echo 'import zipimport_bytecode_cache' >"$rootfs/usr/lib/python3/dist-packages/zipimport_bytecode_cache.pth"
# Ansible reaches the test containers over SSH, one `docker exec` per connection instead of one
# per command (README, "Tests"): sshd serves a connection on stdin and stdout, and nothing
# listens. ssh.service stays installed and disabled, for the scenario that starts it (AWX's
# execution environment reaches its host over the network).
install -m 0755 "$here/ssh/sshd-stdio" "$rootfs/usr/local/sbin/sshd-stdio"
install -m 0644 "$here/ssh/sshd_config_stdio" "$rootfs/etc/ssh/sshd_config_stdio"
chroot "$rootfs" systemctl disable ssh.service ssh.socket >/dev/null 2>&1
# An image has no machine identity of its own: systemd writes one per container at boot.
: >"$rootfs/etc/machine-id"
chroot "$rootfs" apt-get clean

import_image() {
  local image=$1 identity=$2
  tar -C "$rootfs" -c . | docker import \
    -c 'CMD ["/lib/systemd/systemd"]' \
    -c 'ENV container=docker' \
    -c "LABEL pro6000.recipe=$recipe_hash" \
    -c "LABEL pro6000.identity=\"$identity\"" \
    - "$image" >/dev/null
  echo "built $image ($identity)"
}
import_image "$debian_image" "Debian 12 bookworm"

# The Ubuntu identity: the files Ansible's distribution, os_family and lsb facts are read from,
# as Ubuntu 24.04.3 ships them. dpkg-divert keeps an upgrade of base-files from putting
# Debian's back.
for file in /usr/lib/os-release /etc/lsb-release /etc/debian_version /etc/issue; do
  chroot "$rootfs" dpkg-divert --quiet --local --no-rename --divert "$file.debian" --add "$file"
done
install -m 0644 "$here/ubuntu2404-identity/os-release" "$rootfs/usr/lib/os-release"
install -m 0644 "$here/ubuntu2404-identity/lsb-release" "$rootfs/etc/lsb-release"
echo "trixie/sid" >"$rootfs/etc/debian_version"
printf '%s\n' 'Ubuntu 24.04.3 LTS \n \l' >"$rootfs/etc/issue"
import_image "$ubuntu_image" "Ubuntu 24.04 noble identity on Debian 12 bookworm packages"

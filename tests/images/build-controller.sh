#!/usr/bin/env bash
# Builds the controller image of the newest-line lane: Debian 13 "trixie" from Debian's own
# packages (Python 3.13, which ansible-core 2.22 needs; Debian 12 has 3.11, Ubuntu 24.04 3.12),
# with the toolchain of controller/requirements.txt from the Python index in /opt/controller.
# The image is no host: no systemd, it runs one command and goes (tests/scripts/newest-lane.sh).
#
# Like build.sh, it carries the hash of its recipe as a label and is rebuilt only when the recipe
# or the trusted authorities change.
set -euo pipefail

suite=trixie
image=${1:?usage: build-controller.sh IMAGE (newest-lane.sh names it by its ansible-core pin)}
here=$(cd "$(dirname "$0")" && pwd)
ca_dir=/usr/local/share/ca-certificates
# git: ansible-test reads the file list from git; shellcheck: its sanity test; procps: the tests
# that look at processes; docker-cli and openssh-client: the SSH connection over `docker exec` of
# the scenario it converges; make: the unit test of `make venv`.
packages=python3,python3-venv,ca-certificates,git,shellcheck,procps,docker-cli,make,openssh-client

recipe_hash=$( { cat "$0" "$here"/controller/*; echo "$suite $packages"; find "$ca_dir" -type f -name '*.crt' -print0 2>/dev/null | sort -z | xargs -0 -r cat; } | sha256sum | cut -c1-16)

if [ "$(docker image inspect -f '{{ index .Config.Labels "pro6000.recipe" }}' "$image" 2>/dev/null)" = "$recipe_hash" ]; then
  echo "image $image is current (recipe $recipe_hash)"
  exit 0
fi

rootfs=$(mktemp -d /var/tmp/pro6000-controller.XXXXXX)
cleanup() {
  umount "$rootfs/proc" 2>/dev/null || true
  rm -rf "$rootfs" "$rootfs.log"
}
trap cleanup EXIT
echo "building $image from Debian $suite (recipe $recipe_hash)"
start=$SECONDS
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" >"$rootfs.log" 2>&1 || { tail -30 "$rootfs.log"; exit 1; }

# Trust the same extra authorities as this machine, and point pip at the system bundle.
if compgen -G "$ca_dir/*.crt" >/dev/null; then
  cp "$ca_dir"/*.crt "$rootfs$ca_dir/"
  chroot "$rootfs" update-ca-certificates >/dev/null
fi
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
mount -t proc proc "$rootfs/proc"
install -m 0644 "$here/controller/requirements.txt" "$rootfs/tmp/requirements.txt"
chroot "$rootfs" python3 -m venv /opt/controller
chroot "$rootfs" /opt/controller/bin/pip install -q --no-cache-dir -r /tmp/requirements.txt
# ansible-core 2.22's ansible-test pins pylint's dill to an archive of a commit on GitHub ("needed
# until dill released with 3.15 support"), which no test machine reaches: on this image's Python
# 3.13 the release that 2.21's pins, dill 0.4.1, stands in. Any other such URL stops the build.
requirements=$rootfs$(chroot "$rootfs" /opt/controller/bin/python -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_data/requirements
sed -i 's|^dill @ https://github\.com/uqfoundation/dill/archive/[0-9a-f]*\.zip#sha256=[0-9a-f]*$|dill==0.4.1|' "$requirements/sanity.pylint.txt"
if grep -n ' @ ' "$requirements"/*.txt; then
  echo "build-controller.sh: ansible-test names a requirement by URL (above), out of reach here" >&2
  exit 1
fi
umount "$rootfs/proc"
rm -f "$rootfs/tmp/requirements.txt"
: >"$rootfs/etc/resolv.conf"
chroot "$rootfs" apt-get clean

tar -C "$rootfs" -c . | docker import \
  -c 'ENV PATH=/opt/controller/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'CMD ["/bin/bash"]' \
  -c "LABEL pro6000.recipe=$recipe_hash" \
  -c "LABEL pro6000.identity=\"controller: Debian 13 trixie, $(chroot "$rootfs" python3 -V), ansible-core $(chroot "$rootfs" /opt/controller/bin/python -c 'import ansible.release as r; print(r.__version__)')\"" \
  - "$image" >/dev/null
echo "built $image in $((SECONDS - start)) s"

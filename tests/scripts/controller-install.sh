#!/usr/bin/env bash
# The README's controller install line, as written (the bash block after the marker
# "<!-- readme-example: controller-install -->"), in a fresh Ubuntu 24.04 container
# (pro6000/ubuntu2404-identity, see README "Tests") without a network, from a copy of this
# checkout; then, from the virtual environment it made, `ansible-playbook --version` and
# `ansible-doc pro6000.inference.sglang_bench` outside the checkout (from the installed collection).
# pip reads the packages of requirements-controller.txt from a local index inside the container
# (PIP_INDEX_URL, as an air-gapped controller's pip would be set), built by
# tests/fixtures/python_index/build_index.py from wheels downloaded once on this machine into
# .cache/python-index/controller-<hash of the file>/ for the image's Python (3.11).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
image=${PRO6000_TEST_IMAGE:-pro6000/ubuntu2404-identity:latest}
# Its own name per run: checkouts side by side each run theirs.
name=pro6000-controller-install-$$

block=$(python3 tests/scripts/readme_block.py controller-install)
wheels=.cache/python-index/controller-$(sha256sum requirements-controller.txt | cut -c1-16)
tests/scripts/fetch-wheels.sh "$wheels" "$(command -v python3)" -r requirements-controller.txt \
  --only-binary=:all: --python-version=3.11 --platform=manylinux2014_x86_64 \
  --platform=manylinux_2_17_x86_64 --platform=manylinux_2_28_x86_64

docker rm -f "$name" >/dev/null 2>&1 || true
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
docker run -d --name "$name" --network none --label "pro6000.test-checkout=${PRO6000_TEST_CHECKOUT:-none}" \
  -v "$top/$wheels:/srv/wheels:ro" -v "$top/tests/fixtures/python_index/build_index.py:/srv/build_index.py:ro" \
  "$image" sleep infinity >/dev/null
# The checkout as a user clones it: tracked and untracked files that git does not ignore.
git ls-files -z --cached --others --exclude-standard | tar --null -T - -c \
  | docker exec -i "$name" sh -c 'mkdir -p /root/pro6000-inference && tar -x -C /root/pro6000-inference'
docker exec "$name" python3 /srv/build_index.py /srv/index /srv/wheels >/dev/null
docker exec -d "$name" python3 -m http.server --bind 127.0.0.1 --directory /srv/index 8082
docker exec "$name" python3 -c '
import time, urllib.request
for _ in range(50):
    try:
        urllib.request.urlopen("http://127.0.0.1:8082/simple/ansible-core/")
        break
    except OSError:
        time.sleep(0.1)
'
docker exec -e PIP_INDEX_URL=http://127.0.0.1:8082/simple/ -e PIP_DISABLE_PIP_VERSION_CHECK=1 \
  -w /root/pro6000-inference "$name" bash -euo pipefail -c "$block
cd ~
command -v ansible-playbook
ansible-playbook --version
ansible-doc pro6000.inference.sglang_bench >/tmp/sglang_bench.txt
head -3 /tmp/sglang_bench.txt
# ansible-doc exits 0 even when it finds nothing: the page must come from the installed copy.
grep -qF /root/.ansible/collections/ansible_collections/pro6000/inference/plugins/modules/sglang_bench.py /tmp/sglang_bench.txt"
echo "controller-install: the README's install line works in a fresh $image"

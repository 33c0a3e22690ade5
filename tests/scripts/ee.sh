#!/usr/bin/env bash
# The execution environment, built and used: the base image (tests/images/build-ee-base.sh),
# the collection's tarball, `ansible-builder build` from execution-environment.yml, then inside
# the image `ansible-doc` of every module and filter and `--syntax-check` of every playbook by its
# FQCN, and last the execution_environment scenario, whose verify runs playbooks/smoke.yml in
# the image through ansible-navigator against a lab-style host.
#
# The image carries the hash of what it is built from (the definition, the collection's
# declared needs, the base image, the tarball's contents) as a label: an unchanged recipe is not
# built again. Arguments: the steps (default: build check smoke).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
version=$(python -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')
image=pro6000/inference-ee:$version
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build check smoke)

build() {
  tests/images/build-ee-base.sh
  rm -f build/pro6000-inference-*.tar.gz
  ansible-galaxy collection build --force --output-path build/ . >/dev/null
  local tarball=build/pro6000-inference-$version.tar.gz recipe
  recipe=$( { cat execution-environment.yml meta/execution-environment.yml meta/ee-bindep.txt meta/ee-requirements.txt meta/ee-ansible.cfg
              docker image inspect -f '{{.Id}}' pro6000/ee-base:latest
              tar -xOzf "$tarball"; } | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{ index .Config.Labels "pro6000.recipe" }}' "$image" 2>/dev/null)" = "$recipe" ]; then
    echo "image $image is current (recipe $recipe)"
    return
  fi
  local start=$SECONDS
  ansible-builder build -f execution-environment.yml -t "$image" -c build/ee-context \
    --container-runtime docker --extra-build-cli-args "--label pro6000.recipe=$recipe" -v 2
  echo "built $image in $((SECONDS - start)) s, $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%d MB", $1 / 1e6}')"
}

check() {
  local modules filters playbooks
  modules=$(find plugins/modules -name '*.py' ! -name '_*' -printf 'pro6000.inference.%f\n' | sed 's/\.py$//' | sort)
  filters=$(find plugins/filter -name '*.py' ! -name '_*' -printf 'pro6000.inference.%f\n' | sed 's/\.py$//' | sort)
  playbooks=$(find playbooks -maxdepth 1 -name '*.yml' -printf 'pro6000.inference.%f\n' | sed 's/\.yml$//' | sort)
  # One container for all of them, and one ansible-doc per plugin type and one syntax check for
  # every playbook (each run of an ansible command costs its start): each page must be there,
  # since ansible-doc only warns about a plugin it cannot find, and the syntax check names the
  # playbook that does not parse.
  # shellcheck disable=SC2016,SC2086  # expanded in the container; the lists are words
  docker run --rm -e ANSIBLE_NOCOLOR=1 -e MODULES="$modules" -e FILTERS="$filters" -e PLAYBOOKS="$playbooks" "$image" bash -ec '
    ansible --version | head -1
    # The image'"'"'s own controller settings, read where a job brings no ansible.cfg.
    settings=$(ansible-config dump --only-changed)
    for setting in "ANSIBLE_PIPELINING(/etc/ansible/ansible.cfg) = True" \
                   "DEFAULT_INTERNAL_POLL_INTERVAL(/etc/ansible/ansible.cfg) = 0.01"; do
      grep -qF "$setting" <<<"$settings" || { echo "ansible-config does not show $setting: $settings" >&2; exit 1; }
      echo "$setting: ok"
    done
    pages=$(ansible-doc $MODULES; ansible-doc -t filter $FILTERS) || true
    for m in $MODULES; do
      grep -q "^> MODULE $m " <<<"$pages" || { echo "ansible-doc $m does not render" >&2; exit 1; }
      echo "ansible-doc $m: ok"
    done
    for f in $FILTERS; do
      grep -q "^> FILTER $f " <<<"$pages" || { echo "ansible-doc -t filter $f does not render" >&2; exit 1; }
      echo "ansible-doc -t filter $f: ok"
    done
    ansible-playbook --syntax-check $PLAYBOOKS >/dev/null
    echo "syntax-check $(echo $PLAYBOOKS): ok"'
}

smoke() {
  PRO6000_EE_IMAGE=$image molecule test -s execution_environment
}

for step in "${steps[@]}"; do
  echo "==> $step"
  "$step"
done

#!/usr/bin/env bash
# ansible-lint on the checkout, and only the checkout. ansible-lint puts its cache's collections
# ($VIRTUAL_ENV/.ansible, else $ANSIBLE_HOME, else ~/.ansible) before ANSIBLE_COLLECTIONS_PATH
# and, unless offline, installs the project there first: a copy left there by another checkout
# or an older run would then be what the roles resolve to. A cache of this checkout's own
# (build/ansible-lint) and offline mode (.ansible-lint) leave the checkout the only copy.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
export ANSIBLE_COLLECTIONS_PATH="$top/collections" ANSIBLE_HOME="$top/build/ansible-lint"
unset VIRTUAL_ENV
exec ansible-lint --profile production "$@"

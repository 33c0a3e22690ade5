#!/usr/bin/env bash
# ansible-test needs the collection at ansible_collections/<namespace>/<name>: copy the tracked
# (and new, not ignored) files into such a tree under build/ and run the sanity tests there,
# each in the virtual environment ansible-test makes for it.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$top/build"
# A tree of its own per run, so that runs side by side do not remove each other's.
work=$(mktemp -d "$top/build/sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree="$work/ansible_collections/pro6000/inference"

# ansible-test bootstraps pip in its environments with a script from its own server, which is
# out of reach here: give it the offline stand-in under the name it looks for.
pip_version=$(python - <<'PY'
import inspect, re
from ansible_test._internal import python_requirements
print(re.search(r"pip='([^']+)'", inspect.getsource(python_requirements.get_venv_packages)).group(1))
PY
)
cache=~/.ansible/test/cache
mkdir -p "$cache"
cp "$top/tests/scripts/get_pip_offline.py" "$cache/get_pip_${pip_version//./_}.py"

mkdir -p "$tree"
cd "$top"
git ls-files -z --cached --others --exclude-standard \
  | grep -zv '^collections/' \
  | xargs -0 cp --parents -P -t "$tree/"
# ansible-test only looks at files git knows about in the tree it runs in.
cd "$tree"
git init -q && git add -A
# The tree is the only copy of the collection the tests see, whatever is installed elsewhere.
export ANSIBLE_COLLECTIONS_PATH="$work"
# The controller's own Python: 3.12 here, 3.13 on the newest-line controller.
ansible-test sanity --venv --python "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --color no "$@"

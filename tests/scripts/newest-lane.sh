#!/usr/bin/env bash
# The newest supported ansible-core line, from a controller of its own: the image that
# tests/images/build-controller.sh builds (Debian 13, Python 3.13, ansible-core 2.22), running
# against this checkout (mounted at the same path) and the host's Docker engine:
#
#   sanity   ansible-test sanity, as tests/scripts/sanity.sh runs it here
#   unit     the unit tests
#   converge the cuda_toolkit scenario on its Ubuntu platform (driver and two toolkits from the
#            NVIDIA-style mirror, the toolkit role reading the driver role's local fact), in
#            containers named apart from the cuda_toolkit stage's
#
# All of it with ANSIBLE_INJECT_FACT_VARS=False: facts are read through ansible_facts only.
# Arguments: the steps to run (default: all three).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# Image and ansible-test's environments are named by the ansible-core version the image pins:
# checkouts on different pins (a branch that moves the lane, main) keep their own side by side
# instead of rebuilding over each other's.
version=$(sed -n 's/^ansible-core==//p' "$top/tests/images/controller/requirements.txt")
image=pro6000/controller-trixie:ansible-core-$version
"$top/tests/images/build-controller.sh" "$image"

# ansible-test's virtual environments and pip's cache outlive the container: a second run
# installs nothing again.
cache="$top/.cache/newest-lane"
mkdir -p "$cache/ansible-test-$version" "$cache/pip"
instance=pro6000-cuda_toolkit-newest
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(sanity unit converge)

# A worktree's git data lives outside it, and sanity.sh asks git for the file list.
mounts=(-v "$top:$top")
git_dir=$(git -C "$top" rev-parse --path-format=absolute --git-common-dir)
case $git_dir in
  "$top"/*) ;;
  *) mounts+=(-v "$git_dir:$git_dir:ro") ;;
esac

run() {
  docker run --rm --network host \
    "${mounts[@]}" -w "$top" \
    -v /var/run/docker.sock:/var/run/docker.sock \
    -v "$cache/ansible-test-$version:/root/.ansible/test" -v "$cache/pip:/root/.cache/pip" \
    -e ANSIBLE_COLLECTIONS_PATH="$top/collections" -e ANSIBLE_INJECT_FACT_VARS=False \
    -e PRO6000_CUDA_TOOLKIT_INSTANCE="$instance" -e PRO6000_TEST_CHECKOUT \
    "$image" "$@"
}

docker run --rm "$image" sh -c 'python -V; ansible --version | head -1'
status=0
for step in "${steps[@]}"; do
  echo "==> $step"
  case $step in
    sanity) run tests/scripts/sanity.sh || status=1 ;;
    unit) run python -m pytest tests/unit -q -rfE -p no:cacheprovider || status=1 ;;
    converge)
      docker ps -aq --filter "name=^$instance" | xargs -r docker rm -f >/dev/null
      run molecule test -s cuda_toolkit --platform-name "$instance" || status=1 ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
exit $status

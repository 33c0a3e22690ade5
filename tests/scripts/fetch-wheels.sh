#!/bin/sh
# Usage: fetch-wheels.sh DEST PYTHON PIP_DOWNLOAD_ARGS...
# Downloads wheels into a private directory, then renames it to DEST in one step: a scenario
# running beside this one sees either no DEST or a complete one. Nothing to do if DEST exists.
set -eu
dest=$1
python=$2
shift 2
[ -d "$dest" ] && exit 0
mkdir -p "$(dirname "$dest")"
partial=$(mktemp -d "$dest.partial.XXXXXX")
trap 'rm -rf "$partial"' EXIT
"$python" -m pip download --quiet --dest "$partial" "$@"
# A run beside this one may have renamed its own copy first; that copy is as good.
mv -T "$partial" "$dest" 2>/dev/null || [ -d "$dest" ]

#!/usr/bin/env bash
# What Galaxy would say of this collection, offline: antsibull-changelog's lint of changelogs/,
# then galaxy-importer on the tarball `ansible-galaxy collection build` makes (its settings:
# tests/galaxy/galaxy-importer.cfg). The importer finishes "successfully" even when it has
# findings, so any WARNING or ERROR line it logs fails this check.
# Both tools come from the virtual environment of tests/requirements-galaxy.txt (make test
# makes it): galaxy-importer's pins do not resolve with the main toolchain's.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
tools=${GALAXY_VENV:-$top/.cache/venv-galaxy}/bin
cd "$top"

"$tools/antsibull-changelog" lint
echo "antsibull-changelog lint: no findings"

out=$(mktemp -d "$top/build/galaxy-check.XXXXXX")
trap 'rm -rf "$out"' EXIT
"$tools/ansible-galaxy" collection build --output-path "$out" . >/dev/null
log="$out/importer.log"
# Its own ansible and cache paths: nothing installed elsewhere takes part.
(cd "$out" && env -u VIRTUAL_ENV PATH="$tools:$PATH" HOME="$out/home" \
  GALAXY_IMPORTER_CONFIG="$top/tests/galaxy/galaxy-importer.cfg" \
  "$tools/python" -m galaxy_importer.main --print-result pro6000-inference-*.tar.gz) >"$log" 2>&1 || { cat "$log"; exit 1; }
# The log, then the result as JSON from its first line that opens an object.
sed '/^{/,$d' "$log"
grep -q '^Importer processing completed successfully' "$log"
if grep -E '^(WARNING|ERROR)' "$log"; then
  echo "galaxy-importer has the findings above" >&2
  exit 1
fi
# A plugin whose documentation the importer did not find is no finding in its log, only an
# empty entry in the result (the tune_table filter was one): every plugin must have its own,
# except an action plugin, which is documented by the module of its name (host_state).
sed -n '/^{/,$p' "$log" | "$tools/python" -c '
import json, sys
result = json.load(sys.stdin)
contents = result["docs_blob"]["contents"]
modules = {c["content_name"] for c in contents if c["content_type"] == "module" and c["doc_strings"]}
plugins = [c for c in contents if c["content_type"] not in ("role", "playbook", "module_utils", "doc_fragments")
           and not (c["content_type"] == "action" and c["content_name"] in modules)]
missing = ["%s %s" % (c["content_type"], c["content_name"]) for c in plugins if not c["doc_strings"]]
print("galaxy-importer: %d plugins documented" % (len(plugins) - len(missing)))
sys.exit("undocumented for galaxy-importer: %s" % ", ".join(missing) if missing else 0)
'

#!/usr/bin/env bash
# Every BRAID_* variable that braid's sources read by name (getenv) is listed by
# `braid-info --config`, the table users read for the knobs there are. Exit 0 = pass.
# Usage: config_table_test.sh SOURCE_DIR BRAID_INFO
set -euo pipefail
src=$1
info=$2
listed=$(env -i PATH="$PATH" "$info" --config | awk 'NR > 1 { print $1 }')
read_vars=$(grep -rhoE 'getenv\("BRAID_[A-Z0-9_]+"\)' "$src/src" "$src/transports" "$src/python" |
  sed -E 's/getenv\("([A-Z0-9_]+)"\)/\1/' | sort -u)
[[ -n $read_vars ]] || { echo "FAIL: found no getenv(\"BRAID_...\") under $src: wrong folder?"; exit 1; }
missing=0
for v in $read_vars; do
  grep -qx "$v" <<<"$listed" || { echo "FAIL: $v is read by name but braid-info --config does not list it"; missing=1; }
done
((missing == 0)) || exit 1
echo "ok: braid-info --config lists all $(wc -w <<<"$read_vars") BRAID_* variables the sources read by name"

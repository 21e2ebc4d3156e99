#!/usr/bin/env bash
# Every BRAID_* name that braid's sources spell out as a string is a variable listed by
# `braid-info --config`, the table users read for the knobs there are, or one of the few
# names below that are not variables. Exit 0 = pass.
# Usage: config_table_test.sh SOURCE_DIR BRAID_INFO
set -euo pipefail
src=$1
info=$2
# Strings that are not environment variables: the Horovod timeline's activity names.
not_variables="BRAID_ADASUM BRAID_ALLREDUCE"
# The table as a clean environment prints it (braid-info refuses settings it cannot read).
for v in $(compgen -e | grep '^BRAID_' || true); do unset "$v"; done
listed=$("$info" --config | awk 'NR > 1 { print $1 }')
names=$(grep -rhoE '"BRAID_[A-Z0-9_]+"' "$src/src" "$src/transports" "$src/cuda" "$src/python" | tr -d '"' | sort -u)
[[ -n $names ]] || { echo "FAIL: no \"BRAID_...\" string under $src: wrong folder?"; exit 1; }
missing=0 n=0
for v in $names; do
  [[ " $not_variables " == *" $v "* ]] && continue
  n=$((n + 1))
  grep -qx "$v" <<<"$listed" || { echo "FAIL: the sources name $v but braid-info --config does not list it"; missing=1; }
done
((missing == 0)) || exit 1
echo "ok: braid-info --config lists all $n BRAID_* variables the sources name"

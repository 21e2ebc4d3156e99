#!/usr/bin/env bash
# The main job: set up, build, then allreduce_perf across 4 local ranks over shared memory,
# checking every result. Extra arguments go to allreduce_perf (default: 8 B to 256 MiB).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
NP="${NP:-4}"
ARGS=("$@")
[ "${#ARGS[@]}" -gt 0 ] || ARGS=(-b 8 -e 256M -f 2 -c 1)
echo "== braidrun -np $NP allreduce_perf ${ARGS[*]}"
exec "$BUILD_DIR/src/launcher/braidrun" -np "$NP" "$BUILD_DIR/perf/allreduce_perf" "${ARGS[@]}"

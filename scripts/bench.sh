#!/usr/bin/env bash
# braid against OpenMPI and Gloo, in one run, with ratios (the peers' compare.sh):
# allreduce busbw (or time at 8 B) over shared memory and over forced TCP, for 2 and 4
# ranks. Usage: scripts/bench.sh [SIZES...]   (default 8 B ... 256 MiB)
# Results are printed and saved under $RESULTS (default ./bench-results).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
source "$ROOT/scripts/bench_lib.sh"
PEERS="${PEERS:-$ROOT/../shared/peers}"
[ -x "$PEERS/compare.sh" ] || { echo "peer harness not found at $PEERS (set PEERS=...)" >&2; exit 2; }
RESULTS="${RESULTS:-$ROOT/bench-results}"
mkdir -p "$RESULTS"
SIZES=("$@")
[ "${#SIZES[@]}" -gt 0 ] || SIZES=(8 65536 1048576 4194304 16777216 67108864 268435456)
stamp=$(date +%Y%m%d-%H%M%S)
for np in ${NPS:-2 4}; do
  echo "== np $np ($(date -Is), load: $(cut -d' ' -f1-3 /proc/loadavg))"
  # The tree's own programs, named: compare.sh would take the first it finds, which may be
  # the copy in the Python package (see find_exe).
  BRAIDRUN=${BRAIDRUN:-$(find_exe braidrun)} ALLREDUCE_PERF=${ALLREDUCE_PERF:-$(find_exe allreduce_perf)} \
    bash "$PEERS/compare.sh" "$BUILD_DIR" "$np" "${SIZES[@]}" | tee "$RESULTS/$stamp-np$np.txt"
done

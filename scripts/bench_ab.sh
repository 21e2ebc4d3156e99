#!/usr/bin/env bash
# braid against itself: two settings of the environment, alternated run by run on the same
# machine, best busbw of each and the ratio B / A (> 1: B better). For a knob's effect where
# the machine is too noisy for two separate runs to compare.
#
# usage: A="BRAID_TCP_ZCOPY=0" B="" scripts/bench_ab.sh
# environment:
#   A, B          space-separated VAR=value settings for each side (empty: the defaults)
#   BASE          settings both sides get (default BRAID_TRANSPORT=tcp)
#   COLLS="allreduce allgather broadcast sendrecv"   perf tools (sendrecv runs --one-way)
#   NPS="2 4", SIZES="1M 16M 64M", ROUNDS=3
#   SKIP_SETUP=1  use $BUILD_DIR (default build/) as it is; otherwise scripts/setup.sh first
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${SKIP_SETUP:-0}" != 1 ]; then bash "$ROOT/scripts/setup.sh"; fi
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
source "$ROOT/scripts/bench_lib.sh"
RUN="$(find_exe braidrun)"
[ -n "$RUN" ] || { echo "bench_ab: no braidrun under $BUILD_DIR" >&2; exit 1; }
A="${A:-}"; B="${B:-}"; BASE="${BASE:-BRAID_TRANSPORT=tcp}"
echo "# bench_ab $(date -Iseconds): A='$A' B='$B' BASE='$BASE' ROUNDS=${ROUNDS:-3}"
echo "# braid: $BUILD_DIR ($(git -C "$ROOT" rev-parse --short HEAD)); host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), tcp congestion control $(tcp_cc)"
printf "%-10s %3s %6s %9s %9s %6s\n" coll np size A B "B/A"
for coll in ${COLLS:-allreduce allgather broadcast sendrecv}; do
  exe="$(find_exe "${coll}_perf")"
  [ -n "$exe" ] || { echo "bench_ab: no ${coll}_perf under $BUILD_DIR" >&2; exit 1; }
  extra=(); [ "$coll" = sendrecv ] && extra=(--one-way)
  for np in ${NPS:-2 4}; do
    factor="$(bus_factor "$coll" "$np")"
    for size in ${SIZES:-1M 16M 64M}; do
      b="$(bytes "$size")"; n=$(( $(iters "$b") * 5 )); w="$(warm "$b")"
      runsA=(); runsB=()
      for _ in $(seq "${ROUNDS:-3}"); do
        for side in A B; do
          settings="$BASE ${!side}"
          # shellcheck disable=SC2086
          v="$(env $settings timeout 300 "$RUN" -np "$np" "$exe" -b "$b" -e "$b" -n "$n" -w "$w" -c 0 "${extra[@]}" 2>&1 \
              | pick_col "bw:$factor" || true)"
          if [ "$side" = A ]; then runsA+=("$v"); else runsB+=("$v"); fi
        done
      done
      bestA="$(best_of max "${runsA[@]}")"; bestB="$(best_of max "${runsB[@]}")"
      printf "%-10s %3s %6s %9s %9s %6s\n" "$coll" "$np" "$size" "$bestA" "$bestB" "$(ratio "$bestB" "$bestA" max)"
    done
  done
done

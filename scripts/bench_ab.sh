#!/usr/bin/env bash
# braid against itself: two settings of the environment, alternated run by run on the same
# machine, best busbw of each (or the median, STAT=median) and the ratio B / A (> 1: B
# better). For a knob's effect where the machine is too noisy for two separate runs to
# compare.
#
# usage: A="BRAID_TCP_ZCOPY=0" B="" scripts/bench_ab.sh
# environment:
#   A, B          space-separated VAR=value settings for each side (empty: the defaults)
#   BASE          settings both sides get (default BRAID_TRANSPORT=tcp)
#   COLLS="allreduce allgather broadcast sendrecv"   perf tools (sendrecv runs --one-way)
#   NPS="2 4", SIZES="1M 16M 64M", ROUNDS=3
#   SKIP_SETUP=1  use $BUILD_DIR (default build/) as it is; otherwise scripts/setup.sh first
#   BUILD_A, BUILD_B  build trees for each side (default $BUILD_DIR): a change against the
#                 commit before it, e.g. BUILD_A=/tmp/before/build A="" B=""
#   ITERS_X=k     k times the iterations and warmups (scripts/bench_lib.sh)
#   STAT=median   the median busbw of the rounds instead of the best: steadier where runs
#                 are bimodal (ranks sharing cores), with ROUNDS of 6 or more
#   STAT=paired   the medians, and B/A the median of the rounds' own ratios (a round's two
#                 runs are seconds apart): steadiest where the machine swings for minutes.
#                 Rounds whose two runs met the machine in different states are left out, and
#                 a last column gives B/A from the fast and the slow rounds apart
#                 (core_latency, scripts/bench_lib.sh; STATE_NS=200 the boundary)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${SKIP_SETUP:-0}" != 1 ]; then bash "$ROOT/scripts/setup.sh"; fi
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
source "$ROOT/scripts/bench_lib.sh"
A="${A:-}"; B="${B:-}"; BASE="${BASE:-BRAID_TRANSPORT=tcp}"
BUILD_A="${BUILD_A:-$BUILD_DIR}"; BUILD_B="${BUILD_B:-$BUILD_DIR}"
# A program of one side's build tree.
side_exe() {
  local tree=BUILD_$1 exe
  exe="$(BUILD_DIR="${!tree}" find_exe "$2")"
  [ -n "$exe" ] || { echo "bench_ab: no $2 under ${!tree}" >&2; exit 1; }
  echo "$exe"
}
# A build tree and the commit of the source it lies in (+dirty: with uncommitted changes).
describe() {
  local src="$1"; git -C "$src" rev-parse HEAD >/dev/null 2>&1 || src="$ROOT"
  echo "$1 ($(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet 2>/dev/null || echo '+dirty'))"
}
declare -A RUN EXE
RUN[A]="$(side_exe A braidrun)"; RUN[B]="$(side_exe B braidrun)"
STAT="${STAT:-max}"
case "$STAT" in max|median|paired) ;; *) echo "bench_ab: STAT=$STAT: use max (the best), median or paired" >&2; exit 2 ;; esac
echo "# bench_ab $(date -Iseconds): A='$A' B='$B' BASE='$BASE' ROUNDS=${ROUNDS:-3} ITERS_X=${ITERS_X:-1} STAT=$STAT"
if [ "$BUILD_A" = "$BUILD_B" ]; then echo "# braid: $(describe "$BUILD_A")"
else echo "# braid: A $(describe "$BUILD_A"), B $(describe "$BUILD_B")"; fi
echo "# host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), tcp congestion control $(tcp_cc)"
printf "%-10s %3s %6s %9s %9s %6s  %s\n" coll np size A B "B/A" "$([ "$STAT" = paired ] && echo "B/A by state (rounds)")"
for coll in ${COLLS:-allreduce allgather broadcast sendrecv}; do
  EXE[A]="$(side_exe A "${coll}_perf")"; EXE[B]="$(side_exe B "${coll}_perf")"
  extra=(); [ "$coll" = sendrecv ] && extra=(--one-way)
  for np in ${NPS:-2 4}; do
    factor="$(bus_factor "$coll" "$np")"
    for size in ${SIZES:-1M 16M 64M}; do
      b="$(bytes "$size")"; n=$(( $(iters "$b") * 5 )); w="$(warm "$b")"
      runsA=(); runsB=()
      for _ in $(seq "${ROUNDS:-3}"); do
        for side in A B; do
          settings="$BASE ${!side}"
          s0="$(state_now)"
          # shellcheck disable=SC2086
          v="$(env $settings timeout 300 "${RUN[$side]}" -np "$np" "${EXE[$side]}" -b "$b" -e "$b" -n "$n" -w "$w" -c 0 "${extra[@]}" 2>&1 \
              | pick_col "bw:$factor" || true)"
          v="$v:$(state_of "$s0" "$(state_now)")"
          if [ "$side" = A ]; then runsA+=("$v"); else runsB+=("$v"); fi
        done
      done
      printf "%-10s %3s %6s %9s %9s %6s  %s\n" "$coll" "$np" "$size" "$(shown_of "${runsA[@]}")" "$(shown_of "${runsB[@]}")" \
        "$(x_of runsB runsA)" "$([ "$STAT" = paired ] && states_of runsB runsA)"
    done
  done
done

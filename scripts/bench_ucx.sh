#!/usr/bin/env bash
# braid over its UCX plugin against the peers that use UCX, in one run, with ratios:
#   1. allreduce and allgather busbw, braid (BRAID_TRANSPORT=ucx) vs OpenMPI's UCX path
#      (pml ucx), both with the same UCX_TLS: tcp, then shared memory; 2 and 4 ranks;
#   2. braid over ucx with UCX_TLS=tcp vs braid's own tcp transport (allreduce), and the
#      bound on it: ucx_perftest -t tag_bw against braid's tcp, one direction (no target);
#   3. sendrecv_perf --one-way over ucx (2 ranks: rank 0 sends, rank 1 receives) vs
#      ucx_perftest -t tag_bw (one direction too) with the same UCX_TLS;
#   4. (only when PARTS names it) braid over ucx with whole blocks (the default) vs
#      BRAID_WHOLE_BLOCKS=0 (slot-sized slices), allgather, alltoall and one-way sendrecv:
#      what whole blocks give, no target.
# Implementations alternate size by size, ROUNDS times; the best of each is kept (STAT). Where
# ucx_perftest runs, braid's sendrecv_perf beside it sends as many messages (P2P_X below).
# x = braid / peer busbw (> 1: braid better). Targets (marked ok / MISS): part 1 x >= 1.0,
# part 2 x >= 0.9, part 3 x >= 0.9.
#
# usage: scripts/bench_ucx.sh
# environment:
#   NPS="2 4"                 ranks for parts 1 and 2
#   SIZES="64K 1M 16M 256M"   sizes for parts 1 and 2 (nccl-tests' meaning per collective)
#   P2P_SIZES="64K 1M 4M 16M" sizes for part 3
#   TLS="tcp sm"              UCX transport families (UCX_TLS=<family>,self for everyone)
#   COLLS="allreduce allgather"
#   PARTS="1 2 3"             which parts to run (4: whole blocks on/off, SIZES4="1M 16M 256M")
#   ROUNDS=2, CHECK=1, RUN_TIMEOUT=300, SKIP_SETUP, BUILD_DIR, BENCH_CACHE, RESULTS: as in
#                             scripts/bench_collectives.sh
#   ITERS_X=1                 k times the iterations and warmups of every run (bench_lib.sh)
#   STAT=max                  max: the best busbw of the rounds; median: their median, steadier
#                             where runs are bimodal (64 KiB calls, ranks sharing cores), with
#                             ROUNDS of 5 or more; paired: x is the median of the rounds' own
#                             ratios (each round's two runs are seconds apart), the columns
#                             medians: steadiest where the machine swings for minutes. Rounds
#                             whose two runs met the machine in different states are left out,
#                             and a last column gives x from the fast and the slow rounds apart
#                             (core_latency, scripts/bench_lib.sh; STATE_NS=200 the boundary)
# Debian's OpenMPI leaves its UCX path off by default; this selects it with
#   mpirun --mca pml ucx --mca pml_ucx_devices any --mca pml_ucx_tls any -x UCX_TLS=...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${SKIP_SETUP:-0}" = 1 ]; then
  BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
else
  source "$ROOT/scripts/setup.sh"
fi
source "$ROOT/scripts/bench_lib.sh"
set +e  # a failed run is reported in its cell, not fatal

NPS=${NPS:-2 4}
SIZES=(${SIZES:-64K 1M 16M 256M})
P2P_SIZES=(${P2P_SIZES:-64K 1M 4M 16M})
TLS=${TLS:-tcp sm}
COLLS=${COLLS:-allreduce allgather}
PARTS=" ${PARTS:-1 2 3} "
ROUNDS=${ROUNDS:-2}
STAT="${STAT:-max}"
case "$STAT" in max|median|paired) ;; *) echo "bench_ucx: STAT=$STAT: use max (the best), median or paired" >&2; exit 2 ;; esac
CHECK=${CHECK:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
CACHE=${BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/braid-bench-peers}
RESULTS=${RESULTS:-$ROOT/bench-results}

RUN=${BRAIDRUN:-$(find_exe braidrun)}
PERF_DIR=${PERF_DIR:-$(dirname "$(find_exe allreduce_perf)")}
[ -x "$RUN" ] || { echo "braidrun not found under $BUILD_DIR" >&2; exit 2; }
[ -e "$BUILD_DIR/lib/braid/libbraid-net-ucx.so" ] || { echo "no ucx plugin in $BUILD_DIR/lib/braid (UCX not found at configure?)" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (Debian: ucx-utils)" >&2; exit 2; }

mkdir -p "$CACHE" "$RESULTS"
MPI_EXE=$CACHE/mpi_coll_perf; MPI_SRC=$ROOT/bench/peers/mpi_coll_perf.c
if ! { [ "$MPI_EXE" -nt "$MPI_SRC" ] && [ "$MPI_EXE" -nt "${MPI_SRC%/*}/coll_data.h" ]; }; then
  echo "== building $MPI_EXE"
  mpicc -O3 -march=native -o "$MPI_EXE" "$MPI_SRC" || { echo "cannot build the MPI harness" >&2; exit 2; }
fi

results_init ucx  # RAW, OUT; say, fmt_pair, row: bench_lib.sh

# One run: impl (braid-ucx, mpi-ucx, braid-tcp), UCX_TLS value, collective, bytes, ranks.
# Prints the best busbw of this round's table with the machine's state (bench_lib.sh); the
# whole output goes to a log under $RAW.
# RUN_ITERS_MUL=k (in its environment) runs k times the usual iterations.
run_one() {
  local impl=$1 tls=$2 coll=$3 b=$4 np=$5 n w chk=0 log extra=() s0 v
  s0=$(state_now)
  [ "$coll" = sendrecv ] && extra=(--one-way)
  n=$(( $(iters "$b") * ${RUN_ITERS_MUL:-1} )); w=$(warm "$b")
  chk=$(checks_now)
  log=$RAW/$coll-$b-np$np-$impl-${tls//,/_}.log
  local common=(-b "$b" -e "$b" -n "$n" -w "$w" -c "$chk")
  {
    echo "### round $ROUND $(date -Is) load $(cut -d' ' -f1-3 /proc/loadavg)"
    case $impl in
      braid-ucx) BRAID_TRANSPORT=ucx UCX_TLS=$tls timeout -k 10 "$RUN_TIMEOUT" "$RUN" -np "$np" \
                   "$PERF_DIR/${coll}_perf" "${common[@]}" "${extra[@]}" ;;
      braid-slices) BRAID_WHOLE_BLOCKS=0 BRAID_TRANSPORT=ucx UCX_TLS=$tls timeout -k 10 "$RUN_TIMEOUT" "$RUN" -np "$np" \
                      "$PERF_DIR/${coll}_perf" "${common[@]}" "${extra[@]}" ;;
      braid-tcp) BRAID_TRANSPORT=tcp timeout -k 10 "$RUN_TIMEOUT" "$RUN" -np "$np" "$PERF_DIR/${coll}_perf" "${common[@]}" \
                   "${extra[@]}" ;;
      mpi-ucx) timeout -k 10 "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$np" \
                 --mca pml ucx --mca pml_ucx_devices any --mca pml_ucx_tls any -x UCX_TLS="$tls" \
                 "$MPI_EXE" -C "$coll" "${common[@]}" ;;
    esac
    echo "### exit $?"
  } >>"$log" 2>&1
  v=$(round_table "$log" | pick_col "bw:$(bus_factor "$coll" "$np")")
  echo "$v:$(state_of "$s0" "$(state_now)")"
}

# Point-to-point runs (ucx_perftest and braid's sendrecv_perf beside it, parts 2 and 3) send
# P2P_X times a collective's iterations, the same count on both sides: one message of 64 KiB
# takes a few µs, and a run of 200 lasts about a millisecond.
P2P_X=10

# ucx_perftest -t tag_bw between two processes on this host; prints GB/s (1e9 B/s).
# Its MB/s are 2^20 bytes.
perftest_bw() {
  local tls=$1 b=$2 port=$((13500 + RANDOM % 2000)) log=$RAW/perftest-$b-${1//,/_}.log n s0 v
  n=$(( $(iters "$b") * P2P_X ))
  s0=$(state_now)
  {
    echo "### round $ROUND $(date -Is)"
    UCX_TLS=$tls timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.5
    UCX_TLS=$tls timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t tag_bw -s "$b" -n "$n" -w 20 -f
    wait "$srv"
  } >>"$log" 2>&1
  v=$(awk -v r="### round $ROUND " 'index($0, r) == 1 { keep = 1; next } keep && $1 ~ /^[0-9]+$/ && NF >= 8 { v = $6 }
    END { if (v != "") printf "%.3f\n", v * 1048576 / 1e9 }' "$log")
  echo "$v:$(state_of "$s0" "$(state_now)")"
}

say "# bench_ucx $(date -Is): NPS='$NPS' SIZES='${SIZES[*]}' TLS='$TLS' ROUNDS=$ROUNDS ITERS_X=${ITERS_X:-1} STAT=$STAT"
say "# braid: $BUILD_DIR ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')); $(ucx_info -v | head -1 | sed 's/# //'); raw logs: $RAW"
say "# host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), tcp congestion control $(tcp_cc); busbw in GB/s (1e9 B/s); x = braid/peer, > 1: braid better"

if [[ $PARTS == *" 1 "* ]]; then
  for fam in $TLS; do
    tls="$fam,self"
    for np in $NPS; do
      for coll in $COLLS; do
        say ""
        say "== part 1: $coll, $np ranks, UCX_TLS=$tls (target x >= 1.0 vs OpenMPI pml ucx)"
        say "$(fmt_pair size braid-ucx mpi-ucx x target "$(state_head)")"
        for s in "${SIZES[@]}"; do
          b=$(bytes "$s"); A=(); B=()
          for ROUND in $(seq "$ROUNDS"); do
            A+=("$(run_one braid-ucx "$tls" "$coll" "$b" "$np")")
            B+=("$(run_one mpi-ucx "$tls" "$coll" "$b" "$np")")
          done
          row "$s" 1.0
        done
      done
    done
  done
fi

if [[ $PARTS == *" 2 "* ]]; then
  for np in $NPS; do
    say ""
    say "== part 2: allreduce, $np ranks, braid over ucx (UCX_TLS=tcp,self) vs braid's tcp (target x >= 0.9)"
    say "$(fmt_pair size braid-ucx braid-tcp x target "$(state_head)")"
    for s in "${SIZES[@]}"; do
      b=$(bytes "$s"); A=(); B=()
      for ROUND in $(seq "$ROUNDS"); do
        A+=("$(run_one braid-ucx tcp,self allreduce "$b" "$np")")
        B+=("$(run_one braid-tcp - allreduce "$b" "$np")")
      done
      row "$s" 0.9
    done
  done
  # What UCX's tcp carries at best, with its own tool and a window of sends in flight,
  # against braid's tcp in the same direction: a bound on part 2 for anything built on UCX.
  say ""
  say "== part 2, the bound: ucx_perftest -t tag_bw (UCX_TLS=tcp,self) vs braid's tcp, sendrecv_perf --one-way (x = perftest / braid-tcp, no target)"
  say "$(fmt_pair size perftest braid-tcp x '' "$(state_head)")"
  for s in "${P2P_SIZES[@]}"; do
    b=$(bytes "$s"); A=(); B=()
    for ROUND in $(seq "$ROUNDS"); do
      A+=("$(perftest_bw tcp,self "$b")")
      B+=("$(RUN_ITERS_MUL=$P2P_X run_one braid-tcp - sendrecv "$b" 2)")
    done
    row "$s"
  done
fi

if [[ $PARTS == *" 3 "* ]]; then
  for fam in $TLS; do
    tls="$fam,self"
    say ""
    say "== part 3: sendrecv_perf --one-way over ucx (2 ranks, rank 0 to rank 1) vs"
    say "   ucx_perftest -t tag_bw (one direction), UCX_TLS=$tls (target x >= 0.9)"
    say "$(fmt_pair size braid-ucx perftest x target "$(state_head)")"
    for s in "${P2P_SIZES[@]}"; do
      b=$(bytes "$s"); A=(); B=()
      for ROUND in $(seq "$ROUNDS"); do
        A+=("$(RUN_ITERS_MUL=$P2P_X run_one braid-ucx "$tls" sendrecv "$b" 2)")
        B+=("$(perftest_bw "$tls" "$b")")
      done
      row "$s" 0.9
    done
  done
fi

if [[ $PARTS == *" 4 "* ]]; then
  for fam in $TLS; do
    tls="$fam,self"
    for np in $NPS; do
      for coll in allgather alltoall sendrecv; do
        [ "$coll" = sendrecv ] && [ "$np" != 2 ] && continue
        say ""
        say "== part 4: $coll$([ "$coll" = sendrecv ] && echo ' --one-way'), $np ranks, UCX_TLS=$tls: whole blocks vs BRAID_WHOLE_BLOCKS=0 (no target)"
        say "$(fmt_pair size whole slices x '' "$(state_head)")"
        for s in ${SIZES4:-1M 16M 256M}; do
          b=$(bytes "$s"); A=(); B=()
          for ROUND in $(seq "$ROUNDS"); do
            A+=("$(run_one braid-ucx "$tls" "$coll" "$b" "$np")")
            B+=("$(run_one braid-slices "$tls" "$coll" "$b" "$np")")
          done
          row "$s"
        done
      done
    done
  done
fi

say ""
say "# $checked ratios checked, $misses below target; summary in $OUT"

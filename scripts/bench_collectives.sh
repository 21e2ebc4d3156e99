#!/usr/bin/env bash
# braid against OpenMPI and Gloo for every collective, in one run, with ratios: busbw per
# collective and size over shared memory (braid vs OpenMPI's vader) and over forced TCP on
# loopback (braid with BRAID_TRANSPORT=tcp vs OpenMPI's tcp btl and Gloo), plus the 8 B
# allreduce latency at 2 ranks. Implementations run alternately, size by size, ROUNDS times;
# the best of each is kept. Ratios: > 1 means braid is better (x = braid busbw / peer busbw;
# for latency x = peer time / braid time).
#
# The issue's targets are marked per row: "shm" = braid-shm busbw >= mpi-shm busbw, "tcp" =
# braid-tcp busbw >= 2 x Gloo's (where Gloo has the collective), and for latency braid-shm
# time <= 1.5 x mpi-shm time.
#
# usage: scripts/bench_collectives.sh
# environment:
#   NP=4                  ranks for the bandwidth tables
#   SIZES="1M 4M 16M 64M 256M"   sizes (B; K/M/G suffixes), nccl-tests' meaning per collective
#   COLLS=all             comma/space list of allreduce broadcast reduce allgather
#                         reduce_scatter alltoall gather scatter sendrecv
#   ROUNDS=2              alternating rounds (best of each kept)
#   ITERS_X=1             k times the iterations and warmups of every run (bench_lib.sh)
#   TRANSPORTS="shm tcp"  which halves to run (shm: braid vs MPI; tcp: braid vs MPI and Gloo)
#   PEERS="mpi gloo"      which peers to run
#   LAT=1                 8 B allreduce latency at LAT_NP=2 ranks (LAT=0 skips, LAT=only
#                         runs nothing else); LAT_ITERS=2000
#   CHECK=1               validate results in the first round (CHECK=all: every round,
#                         CHECK=0: never); #wrong != 0 shows as "WRONG"
#   AVG=1                 time combined over ranks: 0 rank 0, 1 mean, 2 min, 3 max (all tools)
#   GLOO_ALGS=ring_chunked,halving_doubling   Gloo allreduce algorithms: all run in round 1,
#                         later rounds rerun only the round-1 winner for that size
#   RUN_TIMEOUT=300       seconds before one run is killed (shows as "-")
#   SKIP_SETUP=1          do not run scripts/setup.sh (BUILD_DIR must hold a build)
#   BUILD_DIR=./build     braid build (setup.sh builds it); BRAIDRUN=..., PERF_DIR=... override
#   BENCH_CACHE=~/.cache/braid-bench-peers   where the peer harnesses are built
#   RESULTS=./bench-results                  summary and raw logs go here
#   BUSY=0                processes that never wait, started before the first run and ended
#                         after the last, as a data loader or another job on a shared node
#                         would be (BUSY=$(nproc): one per core); every implementation runs
#                         beside them
# Cost: everything with the defaults took 22 min on the 2-core dev host while other jobs kept
# its load at 10-20 (before round 2 dropped the checks and Gloo's losing allreduce algorithm);
# allreduce at 256 MiB is the largest share. Aim: ~15 min on a quiet host. Narrow with COLLS,
# SIZES, ROUNDS=1, TRANSPORTS or PEERS.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${SKIP_SETUP:-0}" = 1 ]; then
  BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
else
  source "$ROOT/scripts/setup.sh"
fi
set +e  # a failed run is reported in its cell, not fatal

NP=${NP:-4}
SIZES=(${SIZES:-1M 4M 16M 64M 256M})
ALL_COLLS="allreduce broadcast reduce allgather reduce_scatter alltoall gather scatter sendrecv"
COLLS=${COLLS:-all}; [ "$COLLS" = all ] && COLLS=$ALL_COLLS; COLLS=${COLLS//,/ }
ROUNDS=${ROUNDS:-2}
TRANSPORTS=" ${TRANSPORTS:-shm tcp} "
PEERS=" ${PEERS:-mpi gloo} "
LAT=${LAT:-1}; LAT_NP=${LAT_NP:-2}; LAT_ITERS=${LAT_ITERS:-2000}
CHECK=${CHECK:-1}; AVG=${AVG:-1}
GLOO_ALGS=${GLOO_ALGS:-ring_chunked,halving_doubling}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
CACHE=${BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/braid-bench-peers}
RESULTS=${RESULTS:-$ROOT/bench-results}

# find_exe, bytes, iters, warm, pick_col, bus_factor, best_of, ratio, verdict: shared with the
# other benchmark scripts.
source "$ROOT/scripts/bench_lib.sh"

RUN=${BRAIDRUN:-$(find_exe braidrun)}
[ -x "$RUN" ] || { echo "braidrun not found under $BUILD_DIR (set BUILD_DIR or BRAIDRUN)" >&2; exit 2; }
PERF_DIR=${PERF_DIR:-$(dirname "$(find_exe allreduce_perf)")}

# ---- peer harnesses, built once per source change into the cache ---------------------------
mkdir -p "$CACHE" "$RESULTS"
MPI_EXE=$CACHE/mpi_coll_perf; GLOO_EXE=$CACHE/gloo_coll_perf
MPI_SRC=$ROOT/bench/peers/mpi_coll_perf.c; GLOO_SRC=$ROOT/bench/peers/gloo_coll_perf.cc
if [[ $PEERS == *" mpi "* ]] && ! { [ "$MPI_EXE" -nt "$MPI_SRC" ] && [ "$MPI_EXE" -nt "${MPI_SRC%/*}/coll_data.h" ]; }; then
  echo "== building $MPI_EXE"
  mpicc -O3 -march=native -o "$MPI_EXE" "$MPI_SRC" || { echo "cannot build the MPI harness" >&2; exit 2; }
fi
if [[ $PEERS == *" gloo "* ]] && ! [ "$GLOO_EXE" -nt "$GLOO_SRC" ]; then
  echo "== building $GLOO_EXE"
  g++ -std=c++17 -O3 -march=native -o "$GLOO_EXE" "$GLOO_SRC" -lgloo -lpthread ||
    { echo "cannot build the Gloo harness" >&2; exit 2; }
fi

stamp=$(date +%Y%m%d-%H%M%S)
[ -e "$RESULTS/$stamp-raw" ] && stamp+="-$$"
RAW=$RESULTS/$stamp-raw; mkdir -p "$RAW"
OUT=$RESULTS/$stamp-collectives-np$NP.txt
say() { echo "$*" | tee -a "$OUT"; }

# The Gloo allreduce algorithm with the fastest row in round 1 of a run's log.
gloo_winner() {
  awk '
    /^### round / { keep = ($3 == "1") }
    keep && /^# collective:/ { alg = $0; sub(/.*\(Gloo, /, "", alg); sub(/\).*/, "", alg) }
    keep && !/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ && $6 + 0 > 0 {
      v = $6 + 0; if (best == "" || v < best) { best = v; win = alg } }
    END { print win }' "$1"
}
# One run of one implementation: name, collective, bytes, what (see pick_col), ranks. Prints
# the picked value; the whole output is appended to a log under $RAW.
run_one() {
  local impl=$1 coll=$2 b=$3 what=$4 np=$5 n w log
  n=${ITERS_OVERRIDE:-$(iters "$b")}; w=$(warm "$b")
  log=$RAW/$coll-$b-np$np-$impl.log
  local chk=0 algs=$GLOO_ALGS
  if [ "$CHECK" = all ] || { [ "$CHECK" != 0 ] && [ "$ROUND" = 1 ]; }; then chk=1; fi
  if [ "$impl" = gloo-tcp ] && [ "$coll" = allreduce ] && [ "$ROUND" != 1 ] && [ -f "$log" ]; then
    algs=$(gloo_winner "$log"); algs=${algs:-$GLOO_ALGS}
  fi
  local common=(-b "$b" -e "$b" -n "$n" -w "$w" -c "$chk" -a "$AVG")
  {
    echo "### round $ROUND $(date -Is) load $(cut -d' ' -f1-3 /proc/loadavg)"
    case $impl in
      braid-shm) timeout -k 10 "$RUN_TIMEOUT" "$RUN" -np "$np" "$PERF_DIR/${coll}_perf" "${common[@]}" ;;
      braid-tcp) BRAID_TRANSPORT=tcp timeout -k 10 "$RUN_TIMEOUT" "$RUN" -np "$np" "$PERF_DIR/${coll}_perf" "${common[@]}" ;;
      mpi-shm) timeout -k 10 "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$np" \
                 --mca pml ob1 --mca btl vader,self "$MPI_EXE" -C "$coll" "${common[@]}" ;;
      mpi-tcp) timeout -k 10 "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$np" \
                 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo "$MPI_EXE" -C "$coll" "${common[@]}" ;;
      gloo-tcp) local gn=$n; [ "$b" -le 65536 ] && gn=$((n / 4 + 10))
                timeout -k 10 "$RUN_TIMEOUT" "$GLOO_EXE" -N "$np" -C "$coll" -A "$algs" -P 0 \
                  -b "$b" -e "$b" -n "$gn" -w "$w" -c "$chk" -a "$AVG" ;;
    esac
    echo "### exit $?"
  } >>"$log" 2>&1
  # Only this round's table counts.
  round_table "$log" | pick_col "$what"
}

has() { [[ " $1 " == *" $2 "* ]]; }
gloo_has() { has "allreduce broadcast reduce allgather reduce_scatter alltoall gather scatter sendrecv" "$1"; }
fmt() { printf '%-8s %9s %9s %6s | %9s %9s %9s %6s %6s | %s\n' "$@"; }

BUSY=${BUSY:-0}
busy_pids=()
stop_busy() { [ "${#busy_pids[@]}" -eq 0 ] || { kill "${busy_pids[@]}" 2>/dev/null; wait "${busy_pids[@]}" 2>/dev/null; }; }
trap stop_busy EXIT
for ((i = 0; i < BUSY; i++)); do
  bash -c 'while :; do :; done' &
  busy_pids+=($!)
done

misses=0; checked=0
say "# bench_collectives $(date -Is): NP=$NP SIZES='${SIZES[*]}' ROUNDS=$ROUNDS CHECK=$CHECK AVG=$AVG ITERS_X=${ITERS_X:-1}$([ "$BUSY" = 0 ] || echo " BUSY=$BUSY")"
say "# braid: $BUILD_DIR ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')); peers: $CACHE; raw logs: $RAW"
say "# host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), tcp congestion control $(tcp_cc); busbw in GB/s (1e9 B/s); x = braid/peer, > 1: braid better"
say "# targets: shm = braid-shm >= mpi-shm; tcp = braid-tcp >= 2 x gloo-tcp (sendrecv: Gloo point-to-point, not a Gloo collective)"
t_start=$SECONDS

if [ "$LAT" != only ]; then
for coll in $COLLS; do
  if ! has "$ALL_COLLS" "$coll"; then say "# $coll: unknown collective, skipped"; continue; fi
  if ! [ -x "$PERF_DIR/${coll}_perf" ]; then
    say "# $coll: skipped, braid has no ${coll}_perf yet (looked in $PERF_DIR)"; continue
  fi
  say ""
  say "== $coll, $NP ranks ($(date +%T), load $(cut -d' ' -f1 /proc/loadavg))"
  say "$(fmt size braid-shm mpi-shm x braid-tcp mpi-tcp gloo-tcp x-mpi x-gloo targets)"
  bf=$(bus_factor "$coll" "$NP")
  for s in "${SIZES[@]}"; do
    b=$(bytes "$s")
    declare -A got=()
    for ROUND in $(seq "$ROUNDS"); do
      impls=()
      if [[ $TRANSPORTS == *" shm "* ]]; then impls+=(braid-shm); [[ $PEERS == *" mpi "* ]] && impls+=(mpi-shm); fi
      if [[ $TRANSPORTS == *" tcp "* ]]; then
        impls+=(braid-tcp); [[ $PEERS == *" mpi "* ]] && impls+=(mpi-tcp)
        [[ $PEERS == *" gloo "* ]] && gloo_has "$coll" && impls+=(gloo-tcp)
      fi
      for impl in "${impls[@]}"; do got[$impl]+="$(run_one "$impl" "$coll" "$b" "bw:$bf" "$NP") "; done
    done
    A=$(best_of max ${got[braid-shm]:-}); M=$(best_of max ${got[mpi-shm]:-})
    T=$(best_of max ${got[braid-tcp]:-}); MT=$(best_of max ${got[mpi-tcp]:-}); G=$(best_of max ${got[gloo-tcp]:-})
    xm=$(ratio "$A" "$M" max); xtm=$(ratio "$T" "$MT" max); xg=$(ratio "$T" "$G" max)
    tg=""
    if [ "$xm" != - ]; then v=$(verdict "$xm" 1); tg+="shm:$v "; checked=$((checked + 1)); [ "$v" = MISS ] && misses=$((misses + 1)); fi
    if [ "$xg" != - ] && [ "$coll" != sendrecv ]; then
      v=$(verdict "$xg" 2); tg+="tcp:$v"; checked=$((checked + 1)); [ "$v" = MISS ] && misses=$((misses + 1))
    fi
    say "$(fmt "$s" "$A" "$M" "$xm" "$T" "$MT" "$G" "$xtm" "$xg" "${tg:--}")"
    unset got
  done
done
fi

if [ "$LAT" != 0 ]; then
  say ""
  if ! [ -x "$PERF_DIR/allreduce_perf" ]; then
    say "# latency: skipped, no allreduce_perf"
  else
    say "== allreduce 8 B latency, $LAT_NP ranks, time in us (x = peer time / braid time, > 1: braid better)"
    say "$(fmt size braid-shm mpi-shm x braid-tcp mpi-tcp gloo-tcp x-mpi x-gloo targets)"
    declare -A got=()
    for ROUND in $(seq "$ROUNDS"); do
      impls=()
      if [[ $TRANSPORTS == *" shm "* ]]; then impls+=(braid-shm); [[ $PEERS == *" mpi "* ]] && impls+=(mpi-shm); fi
      if [[ $TRANSPORTS == *" tcp "* ]]; then
        impls+=(braid-tcp); [[ $PEERS == *" mpi "* ]] && impls+=(mpi-tcp); [[ $PEERS == *" gloo "* ]] && impls+=(gloo-tcp)
      fi
      for impl in "${impls[@]}"; do
        got[$impl]+="$(ITERS_OVERRIDE=$LAT_ITERS run_one "$impl" allreduce 8 lat "$LAT_NP") "
      done
    done
    A=$(best_of min ${got[braid-shm]:-}); M=$(best_of min ${got[mpi-shm]:-})
    T=$(best_of min ${got[braid-tcp]:-}); MT=$(best_of min ${got[mpi-tcp]:-}); G=$(best_of min ${got[gloo-tcp]:-})
    xm=$(ratio "$A" "$M" min)
    tg="-"
    if [ "$xm" != - ]; then
      v=$(awk -v a="$A" -v m="$M" 'BEGIN { print (a + 0 <= 1.5 * m ? "ok" : "MISS") }')
      tg="lat(<=1.5x mpi):$v"; checked=$((checked + 1)); [ "$v" = MISS ] && misses=$((misses + 1))
    fi
    say "$(fmt 8 "$A" "$M" "$xm" "$T" "$MT" "$G" "$(ratio "$T" "$MT" min)" "$(ratio "$T" "$G" min)" "$tg")"
  fi
fi

say ""
say "# targets checked: $checked, missed: $misses; took $((SECONDS - t_start)) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
say "# saved: $OUT"

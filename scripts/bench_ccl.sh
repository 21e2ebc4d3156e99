#!/usr/bin/env bash
# braid against Intel's oneCCL, in one run, with ratios: busbw per collective and size, braid
# over shared memory vs oneCCL over Intel MPI's shared memory (I_MPI_FABRICS=shm), then
# braid's tcp vs oneCCL over Intel MPI's libfabric tcp on loopback (I_MPI_FABRICS=ofi,
# FI_PROVIDER=tcp, FI_TCP_IFACE=lo). oneCCL runs its collectives on the CPU over Intel MPI by
# default (its ATL transport "mpi"); both come from PyPI (oneccl-devel pulls oneccl and
# impi-rt), installed once into a virtual environment in the cache, and the harness
# (bench/peers/ccl_coll_perf.cc) is built against it. Intel MPI's launcher (mpiexec.hydra)
# starts oneCCL's ranks, braidrun braid's. Implementations alternate size by size, ROUNDS
# times. x = braid busbw / oneCCL busbw (> 1: braid better); target x >= 1.0 (ok / MISS).
#
# usage: scripts/bench_ccl.sh
# environment:
#   NPS="2"                  ranks (oneCCL polls while it waits: with more ranks than cores,
#                            as 4 on the 2-core build machine, each call takes milliseconds)
#   SIZES="8 64K 1M 16M 64M" sizes (nccl-tests' meaning per collective)
#   COLLS="allreduce broadcast reduce allgather reduce_scatter alltoall"  (oneCCL has no
#                            gather or scatter; its send/recv crash on host memory, see the
#                            harness)
#   TRANSPORTS="shm tcp"     which halves to run
#   ROUNDS=3, STAT=paired, CHECK=1, ITERS_X=1, RUN_TIMEOUT=300, SKIP_SETUP, BUILD_DIR,
#   BENCH_CACHE, RESULTS     as in scripts/bench_ucx.sh (STAT: max, median or paired)
#   CCL_VENV=$BENCH_CACHE/ccl-venv   where oneCCL is installed (pip install oneccl-devel)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${SKIP_SETUP:-0}" = 1 ]; then
  BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
else
  source "$ROOT/scripts/setup.sh"
fi
source "$ROOT/scripts/bench_lib.sh"
set +e  # a failed run is reported in its cell, not fatal

NPS=${NPS:-2}
SIZES=(${SIZES:-8 64K 1M 16M 64M})
COLLS=${COLLS:-allreduce broadcast reduce allgather reduce_scatter alltoall}; COLLS=${COLLS//,/ }
TRANSPORTS=${TRANSPORTS:-shm tcp}
ROUNDS=${ROUNDS:-3}
STAT="${STAT:-paired}"
case "$STAT" in max|median|paired) ;; *) echo "bench_ccl: STAT=$STAT: use max (the best), median or paired" >&2; exit 2 ;; esac
CHECK=${CHECK:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
CACHE=${BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/braid-bench-peers}
RESULTS=${RESULTS:-$ROOT/bench-results}
CCL_VENV=${CCL_VENV:-$CACHE/ccl-venv}

RUN=${BRAIDRUN:-$(find_exe braidrun)}
PERF_DIR=${PERF_DIR:-$(dirname "$(find_exe allreduce_perf)")}
[ -x "$RUN" ] || { echo "braidrun not found under $BUILD_DIR" >&2; exit 2; }

# ---- oneCCL and its harness ----------------------------------------------------------------
mkdir -p "$CACHE" "$RESULTS"
if ! [ -e "$CCL_VENV/include/oneapi/ccl.hpp" ] || ! [ -x "$CCL_VENV/bin/mpiexec.hydra" ]; then
  echo "== installing oneCCL and Intel MPI from PyPI into $CCL_VENV (about 2 GB)"
  python3 -m venv "$CCL_VENV" && "$CCL_VENV/bin/pip" install -q oneccl-devel ||
    { echo "cannot install oneccl-devel from PyPI" >&2; exit 2; }
fi
CCL_EXE=$CACHE/ccl_coll_perf; CCL_SRC=$ROOT/bench/peers/ccl_coll_perf.cc
if ! { [ "$CCL_EXE" -nt "$CCL_SRC" ] && [ "$CCL_EXE" -nt "${CCL_SRC%/*}/coll_data.h" ]; }; then
  echo "== building $CCL_EXE"
  rm -f "$CCL_EXE"  # a failed build must not leave the old harness to be run
  g++ -std=c++17 -O3 -march=native -I"$CCL_VENV/include" -o "$CCL_EXE" "$CCL_SRC" \
    -L"$CCL_VENV/lib" -lccl -Wl,-rpath,"$CCL_VENV/lib" 2>&1 | grep -v "may conflict with" >&2
  [ -x "$CCL_EXE" ] || { echo "cannot build the oneCCL harness" >&2; exit 2; }
fi
CCL_VERSION=$("$CCL_VENV/bin/pip" list 2>/dev/null | awk '$1 == "oneccl" { v = $2 } $1 == "impi-rt" { m = $2 }
  END { printf "oneCCL %s, Intel MPI %s", v, m }')

results_init ccl  # RAW, OUT; say, fmt_pair, row, time_row: bench_lib.sh

# One run: impl (braid-shm, braid-tcp, ccl-shm, ccl-tcp), collective, bytes, ranks. Prints
# the best busbw of this round's table (below 1 KiB the lowest time in us instead: busbw has
# too few digits there) with the machine's state (bench_lib.sh); the whole output goes to a
# log under $RAW.
run_one() {
  local impl=$1 coll=$2 b=$3 np=$4 n w chk=0 log s0 v
  s0=$(state_now)
  n=$(iters "$b"); w=$(warm "$b")
  chk=$(checks_now)
  log=$RAW/$coll-$b-np$np-$impl.log
  local common=(-b "$b" -e "$b" -n "$n" -w "$w" -c "$chk")
  local hydra=(env PATH="$CCL_VENV/bin:$PATH" LD_LIBRARY_PATH="$CCL_VENV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
               timeout -k 10 "$RUN_TIMEOUT" "$CCL_VENV/bin/mpiexec.hydra" -n "$np")
  {
    echo "### round $ROUND $(date -Is) load $(cut -d' ' -f1-3 /proc/loadavg)"
    case $impl in
      braid-shm) timeout -k 10 "$RUN_TIMEOUT" "$RUN" -np "$np" "$PERF_DIR/${coll}_perf" "${common[@]}" ;;
      braid-tcp) BRAID_TRANSPORT=tcp timeout -k 10 "$RUN_TIMEOUT" "$RUN" -np "$np" "$PERF_DIR/${coll}_perf" "${common[@]}" ;;
      ccl-shm) "${hydra[@]}" -genv I_MPI_FABRICS shm "$CCL_EXE" -C "$coll" "${common[@]}" ;;
      ccl-tcp) "${hydra[@]}" -genv I_MPI_FABRICS ofi -genv FI_PROVIDER tcp -genv FI_TCP_IFACE lo \
                 "$CCL_EXE" -C "$coll" "${common[@]}" ;;
    esac
    echo "### exit $?"
  } >>"$log" 2>&1
  v=$(round_table "$log" | pick_col "$(if [ "$b" -lt 1024 ]; then echo lat; else echo "bw:$(bus_factor "$coll" "$np")"; fi)")
  echo "$v:$(state_of "$s0" "$(state_now)")"
}

say "# bench_ccl $(date -Is): NPS='$NPS' SIZES='${SIZES[*]}' COLLS='$COLLS' TRANSPORTS='$TRANSPORTS' ROUNDS=$ROUNDS ITERS_X=${ITERS_X:-1} STAT=$STAT"
say "# braid: $BUILD_DIR ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')); $CCL_VERSION; raw logs: $RAW"
say "# host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); busbw in GB/s (1e9 B/s); x = braid/oneCCL, > 1: braid better"
for t in $TRANSPORTS; do
  case $t in
    shm) what="braid's shared memory vs oneCCL over Intel MPI's (I_MPI_FABRICS=shm)" ;;
    tcp) what="braid's tcp vs oneCCL over Intel MPI's libfabric tcp on lo" ;;
    *) echo "bench_ccl: TRANSPORTS: shm or tcp, not '$t'" >&2; exit 2 ;;
  esac
  for np in $NPS; do
    for coll in $COLLS; do
      say ""
      say "== $coll, $np ranks, $what (target x >= 1.0)"
      say "$(fmt_pair size braid-$t ccl-$t x target "$(state_head)")"
      for s in "${SIZES[@]}"; do
        b=$(bytes "$s"); A=(); B=()
        for ROUND in $(seq "$ROUNDS"); do
          A+=("$(run_one "braid-$t" "$coll" "$b" "$np")")
          B+=("$(run_one "ccl-$t" "$coll" "$b" "$np")")
        done
        # Below 1 KiB times: x = oneCCL's / braid's.
        if [ "$b" -lt 1024 ]; then time_row "$s" 1.0; else row "$s" 1.0; fi
      done
    done
  done
done

say ""
say "# $checked ratios checked, $misses below target; summary in $OUT"

#!/usr/bin/env bash
# The NCCL peer benchmark (bench/peers/nccl_coll_perf.cc) under braidrun:
#   nccl_coll_perf.sh nogpu BRAIDRUN NCCL_COLL_PERF
#     with no GPU visible (CUDA_VISIBLE_DEVICES empty, on any machine): every rank exits 77
#     saying why, none waits for the others in NCCL;
#   nccl_coll_perf.sh gpu BRAIDRUN NCCL_COLL_PERF
#     where a GPU is visible (otherwise 77): every collective checked (-c 1) on one rank, on
#     two ranks each with a host id of its own (NCCL's network path, also on one GPU), and on
#     two ranks with one host id, which NCCL refuses while they share a GPU ("Duplicate GPU
#     detected") and runs on two GPUs.
set -uo pipefail
mode=$1 BRAIDRUN=$2 PERF=$3
fail=0

# run NAME EXPECTED_RC ARGS...: prints the output, checks the exit status.
run() {
  local name=$1 want=$2 rc
  shift 2
  out=$(timeout 300 "$@" 2>&1)
  rc=$?
  echo "== $name (exit $rc)"
  echo "$out"
  [ "$rc" = "$want" ] || { echo "FAIL: $name: exit $rc, expected $want"; fail=1; }
}

case $mode in
  nogpu)
    run "no GPU visible" 77 env CUDA_VISIBLE_DEVICES= "$BRAIDRUN" -np 2 "$PERF" -C all -b 8 -e 1K
    for r in 0 1; do
      grep -q "nccl_coll_perf: rank $r: no usable GPU: " <<< "$out" || { echo "FAIL: rank $r did not say why"; fail=1; }
    done
    ;;
  gpu)
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    if [ "${gpus:-0}" -lt 1 ]; then
      echo "SKIP: no GPU visible (nvidia-smi -L)"
      exit 77
    fi
    run "one rank, every collective" 0 "$BRAIDRUN" -np 1 "$PERF" -C all -b 8 -e 4M -f 32 -n 3 -w 1 -c 1
    run "two ranks, a host id each" 0 "$BRAIDRUN" -np 2 "$PERF" --host-per-rank -C all -b 8 -e 4M -f 32 -n 3 -w 1 -c 1
    if [ "$gpus" -ge 2 ]; then
      run "two ranks on two GPUs" 0 "$BRAIDRUN" -np 2 "$PERF" -C all -b 8 -e 4M -f 32 -n 3 -w 1 -c 1
    else
      run "two ranks sharing the GPU" 1 "$BRAIDRUN" -np 2 "$PERF" -C allreduce -b 8 -e 8
      grep -q "ncclCommInitRank" <<< "$out" || { echo "FAIL: the refusal does not name ncclCommInitRank"; fail=1; }
    fi
    ;;
  *)
    echo "usage: $0 nogpu|gpu BRAIDRUN NCCL_COLL_PERF" >&2
    exit 2
    ;;
esac
[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail

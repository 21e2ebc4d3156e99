#!/usr/bin/env bash
# The checks and benchmarks that need a GPU, in one run, each under its own time limit:
#   bash scripts/gpu_checks.sh [BUILD_DIR] [LOG_DIR]
# BUILD_DIR (default build) is a build made with nvcc; LOG_DIR (default gpu-logs) gets one
# log per step and summary.txt. PYTHON (default: python3) is a Python whose torch sees the
# GPU; the braid package is built against it into LOG_DIR/py (skipped when that fails).
# QUICK=1 leaves out the slowest step (allreduce of every type and op on device buffers).
# BUDGET_S (default: none) bounds the whole run: each step's limit is cut to what is left,
# and a step with under 15 s left is skipped and said so. The steps run most telling first:
# the unit tests and the three paths of an allreduce, then the figures the GPU path is held
# to (the kernels against memcpy, braid against NCCL), then the paths that have run least,
# then the other benchmarks.
# Exits non-zero when any correctness step failed; benchmarks only report.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-build}" && pwd)
LOGS=${2:-gpu-logs}
mkdir -p "$LOGS" && LOGS=$(cd "$LOGS" && pwd)
PY=${PYTHON:-python3}
SUMMARY=$LOGS/summary.txt
: > "$SUMMARY"
failed=0

note() { echo "$*" | tee -a "$SUMMARY"; }
# step NAME LIMIT_S CHECK(1: counts as a correctness step) COMMAND...
BUDGET=${BUDGET_S:-0}
step() {
  local name=$1 limit=$2 check=$3
  shift 3
  local t0=$SECONDS rc
  if [ "$BUDGET" -gt 0 ]; then
    local left=$((BUDGET - SECONDS))
    if [ "$left" -lt 15 ]; then
      note "$(printf '%-22s skipped: %ss of BUDGET_S=%s left' "$name" "$left" "$BUDGET")"
      return 0
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  timeout -k 5 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  note "$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")"
  if [ "$check" = 1 ] && [ "$rc" != 0 ] && [ "$rc" != 77 ]; then failed=1; fi
  return $rc
}

note "== $(date -u +%FT%TZ) $(uname -n)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
nproc | sed 's/^/cpus: /' | tee -a "$SUMMARY"

# The Python package builds in the background while the C++ steps run.
pybuild_pid=
if "$PY" -c 'import torch, nanobind, scikit_build_core' > /dev/null 2>&1; then
  (cd "$ROOT" && PY_ENV=$(dirname "$(dirname "$(command -v "$PY")")") &&
   timeout 300 "$PY" -m pip install -q --disable-pip-version-check --upgrade --no-build-isolation --no-deps \
     -C build-dir="$LOGS/pybuild" -C cmake.define.BRAID_PREBUILT_LIBRARY="$BUILD/src/api/libbraid.so.0" \
     -C cmake.define.BRAID_PY_TORCH=ON -C cmake.define.BRAID_PREBUILT_PROGRAMS="$BUILD/src/launcher/braidrun" \
     -C build.verbose=false --target "$LOGS/py" "$ROOT/python") > "$LOGS/python_build.log" 2>&1 &
  pybuild_pid=$!
else
  note "python: $PY lacks torch, nanobind or scikit-build-core: the Python steps are skipped"
fi

BR="$BUILD/src/launcher/braidrun"
# The build's plugins, also where the build was copied to another machine (libbraid looks
# in the folder it was built in only while it lives there).
[ -z "${BRAID_PLUGIN_DIR:-}" ] && [ -d "$BUILD/lib/braid" ] && export BRAID_PLUGIN_DIR=$BUILD/lib/braid
PERF=$BUILD/perf
AR="$PERF/allreduce_perf -b 8 -e 128M -f 8 -n 20 -w 5 -c 1 -D 1"
step test_cuda_gpu 240 1 "$BUILD/tests/unit/cuda/test_cuda_gpu"
step test_device 120 1 "$BUILD/tests/unit/device/test_device"
# The three ways a device call runs, 2 ranks sharing the GPU, side by side: staged through
# pinned host memory (default), direct (the fused kernels between the device buffers and the
# registered shared-memory slots), ipc (the slots in GPU memory, written by the peers' kernels).
step allreduce_D1_np2 120 1 "$BR" -np 2 $AR
for path in direct ipc; do
  step "allreduce_D1_np2_$path" 120 1 env BRAID_CUDA_PATH=$path BRAID_DEBUG=INFO "$BR" -np 2 $AR
done
# The ipc path with its slots made by cuMemCreate and shared as file descriptors (fetched over
# each rank's Unix socket) instead of CUDA IPC handles, as processes and as threads; then as
# fabric handles, which need a GPU and driver that export them (IMEX): a refusal makes every
# rank keep the host slots, and the step says so without failing the run.
for t in 1 2; do
  np=$((3 - t))
  step "allreduce_D1_np${np}_t${t}_ipc_cumem_fd" 120 1 bash -c 'out=$(env BRAID_CUDA_PATH=ipc BRAID_CUDA_MEM_HANDLE=fd \
    BRAID_DEBUG=INFO "$@" 2>&1); rc=$?; echo "$out"; [ "$rc" = 0 ] && grep -q "moves device calls through" <<< "$out"' _ \
    "$BR" -np "$np" $AR -t "$t"
done
step allreduce_D1_np2_ipc_cumem_fabric 120 0 env BRAID_CUDA_PATH=ipc BRAID_CUDA_MEM_HANDLE=fabric BRAID_DEBUG=INFO \
  "$BR" -np 2 $AR
grep -h -o -e "moves device calls through [0-9]* device slot areas" -e "keeps the shared-memory slots: .*" \
  "$LOGS/allreduce_D1_np2_ipc_cumem_fabric.log" 2>/dev/null | head -1 | sed 's/^/  fabric handles: /' | tee -a "$SUMMARY"
# The same 2 ranks as threads of one process (-t 2), sharing one CUDA context: ranks in
# processes of their own each have a context, and without MPS the GPU runs contexts of
# different processes by turns (time slices), not side by side.
for path in staged direct ipc; do
  step "allreduce_D1_t2_$path" 120 1 env BRAID_CUDA_PATH=$path "$BR" -np 1 $AR -t 2
done
# The kernels alone against the GPU's device-to-device memcpy (the target: 0.85x for the sum).
step kernel_perf_float 90 1 "$BUILD/cuda/kernel_perf" -b 1M -e 256M -f 4 -d float
step kernel_perf_bf16 90 1 "$BUILD/cuda/kernel_perf" -b 1M -e 256M -f 16 -d bfloat16
step kernel_perf_half 90 1 "$BUILD/cuda/kernel_perf" -b 16M -e 256M -f 16 -d half
step kernel_perf_f8e4m3 90 1 "$BUILD/cuda/kernel_perf" -b 16M -e 256M -f 16 -d f8e4m3
# NCCL in the same run (bench/peers/nccl_coll_perf.cc, the tools' table; docs/cuda.md,
# "Against NCCL"). NCCL refuses two ranks on one GPU; with a host id per rank it runs them
# through its network path (sockets), the configuration of braid's ranks across emulated
# hosts (BRAID_TRANSPORT=tcp), staged and direct. With two GPUs or more, one rank per GPU on
# both sides. compare LABEL A B: per size, the busbw of logs A and B and x = B's time / A's
# (columns 6 and 8, braid's out of place; x > 1: A faster, the busbw ratio where both are > 0).
compare() {
  local label=$1 a=$LOGS/$2.log b=$LOGS/$3.log
  [ -s "$a" ] && [ -s "$b" ] || { note "$label: a log is missing"; return 0; }
  note "$label: size (B), busbw $2, busbw $3 (GB/s), x"
  awk 'FNR == 1 { f++ } /^ *[0-9]+ / { t[f, $1] = $6; bw[f, $1] = $8; if (f == 1) order[++n] = $1 }
       END { for (i = 1; i <= n; i++) { s = order[i]; if ((2, s) in t && t[1, s] > 0)
               printf "  %10s  %8.2f  %8.2f  x %5.2f\n", s, bw[1, s], bw[2, s], t[2, s] / t[1, s] } }' \
    "$a" "$b" | tee -a "$SUMMARY"
}
NCCL_PERF=$BUILD/perf/nccl_coll_perf
NSZ="-b 8 -e 128M -f 8 -n 20 -w 5 -c 1"
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${ngpus:-0}" -ge 2 ]; then
  # The ranks as threads of one process, one per GPU: each opens the others' device slots
  # by their address and reaches them through peer access.
  step "allreduce_D1_t${ngpus}_gpus_ipc" 150 1 bash -c 'out=$(BRAID_CUDA_PATH=ipc BRAID_DEBUG=INFO "$@" 2>&1); rc=$?
    echo "$out"; [ "$rc" = 0 ] && grep -q "moves device calls through" <<< "$out"' _ \
    "$BR" -np 1 "$PERF/allreduce_perf" $NSZ -D 1 -t "$ngpus"
fi
if [ -x "$NCCL_PERF" ]; then
  step nccl_coll_perf_gpu 300 1 bash "$ROOT/tests/unit/cuda/nccl_coll_perf.sh" gpu "$BR" "$NCCL_PERF"
  step nccl_allreduce_np2_hosts 150 0 "$BR" -np 2 "$NCCL_PERF" --host-per-rank -C allreduce $NSZ
  step allreduce_D1_np2_tcp 150 0 env BRAID_TRANSPORT=tcp "$BR" -np 2 "$PERF/allreduce_perf" $NSZ -D 1
  step allreduce_D1_np2_tcp_direct 150 0 env BRAID_TRANSPORT=tcp BRAID_CUDA_PATH=direct "$BR" -np 2 \
    "$PERF/allreduce_perf" $NSZ -D 1
  compare "2 ranks on one GPU over sockets: braid's tcp, staged, against NCCL's network path" \
    allreduce_D1_np2_tcp nccl_allreduce_np2_hosts
  compare "the same, braid's tcp direct" allreduce_D1_np2_tcp_direct nccl_allreduce_np2_hosts
  compare "braid's own path on one host (shared memory, staged) against NCCL's network path" \
    allreduce_D1_np2 nccl_allreduce_np2_hosts
  if [ "${ngpus:-0}" -ge 2 ]; then
    step "nccl_allreduce_np$ngpus" 150 0 "$BR" -np "$ngpus" "$NCCL_PERF" -C allreduce $NSZ
    for path in staged ipc; do
      step "allreduce_D1_np${ngpus}_gpus_$path" 150 0 env BRAID_CUDA_PATH=$path "$BR" -np "$ngpus" \
        "$PERF/allreduce_perf" $NSZ -D 1
      compare "one rank per GPU ($ngpus), braid $path against NCCL" "allreduce_D1_np${ngpus}_gpus_$path" \
        "nccl_allreduce_np$ngpus"
    done
  else
    note "NCCL with one rank per GPU: ${ngpus:-0} GPU here, and NCCL refuses two ranks on one (nccl_coll_perf_gpu)"
  fi
else
  note "nccl_coll_perf: not built (needs nvcc and NCCL under the toolkit): no NCCL comparison"
fi
for path in direct ipc; do
  for coll in broadcast sendrecv allgather reduce_scatter alltoall reduce gather scatter; do
    step "${coll}_D1_np3_$path" 60 1 env BRAID_CUDA_PATH=$path "$BR" -np 3 "$PERF/${coll}_perf" \
      -b 8 -e 16M -f 64 -n 5 -w 1 -c 1 -D 1
  done
done
for path in staged direct ipc; do
  step "allreduce_D1_np4_$path" 120 1 env BRAID_CUDA_PATH=$path "$BR" -np 4 $AR
done
step allreduce_D1_np2_all_direct 120 1 env BRAID_CUDA_PATH=direct "$BR" -np 2 "$PERF/allreduce_perf" \
  -b 4K -e 1M -f 16 -n 3 -w 1 -c 1 -o all -d all -D 1
# The direct path on the slots of the network transports (tcp's, and UCX's through the plugin
# ABI), as it runs across hosts: here on one host, with the transport forced.
for tp in tcp ucx; do
  step "allreduce_D1_np2_direct_$tp" 120 1 env BRAID_CUDA_PATH=direct BRAID_TRANSPORT=$tp UCX_TLS=tcp,self "$BR" \
    -np 2 "$PERF/allreduce_perf" -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 -D 1
done
# GPUDirect RDMA (ipc over verbs, docs/cuda.md): where an RDMA port is active, 2 ranks through
# it with the device areas registered with the NIC (dmabuf, else nvidia-peermem), or, where
# neither registers GPU memory, every rank on the host slots, saying why; -c 1 either way.
# The log's INFO and WARN lines say which ran.
if command -v ibv_devinfo > /dev/null 2>&1 && ibv_devinfo 2>/dev/null | grep -q PORT_ACTIVE; then
  step allreduce_D1_np2_gdr 120 1 env BRAID_CUDA_PATH=ipc BRAID_TRANSPORT=ibverbs BRAID_DEBUG=INFO "$BR" -np 2 \
    "$PERF/allreduce_perf" -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 -D 1
  grep -h -o -e "registered with the NIC (GPUDirect RDMA)" -e "keeps the shared-memory slots: .*" \
    "$LOGS/allreduce_D1_np2_gdr.log" | head -2 | sed 's/^/  gdr: /' | tee -a "$SUMMARY"
else
  note "allreduce_D1_np2_gdr   skipped: no active RDMA port (ibv_devinfo), so GPUDirect RDMA did not run"
fi
# Fixed grid caps (512-thread blocks): the old 64 and one and two per SM of an H200, against
# the default (what the SMs hold of each kernel, from CUDA's occupancy calculator). fp16 and
# bf16 at one and two per SM: their kernels are built to fit two (cuda/reduce_copy.cuh).
for blocks in 64 132 264; do
  step "kernel_perf_float_blocks$blocks" 90 0 env BRAID_CUDA_MAX_BLOCKS=$blocks "$BUILD/cuda/kernel_perf" \
    -b 16M -e 256M -f 16 -d float
done
for type in bfloat16 half; do
  for blocks in 132 264; do
    step "kernel_perf_${type}_blocks$blocks" 90 0 env BRAID_CUDA_MAX_BLOCKS=$blocks "$BUILD/cuda/kernel_perf" \
      -b 16M -e 256M -f 16 -d $type
  done
done

if [ -n "$pybuild_pid" ]; then
  if wait "$pybuild_pid" && [ -d "$LOGS/py/braid" ]; then
    # The package's modules link the build's libbraid, found here also where the build was
    # copied to another machine (a copied build's modules could not load it there).
    export LD_LIBRARY_PATH="$BUILD/src/api${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    note "python_build           rc=0"
    step python_cuda 210 1 env BRAID_PYTHON_SITE="$LOGS/py" "$PY" -m pytest -q -rfEs -p no:cacheprovider \
      "$ROOT/tests/python/test_cuda.py"
    for path in staged ipc; do
      step "bench_torch_np2_$path" 150 0 env BRAID_CUDA_PATH=$path PYTHONPATH="$LOGS/py" "$PY" \
        "$ROOT/python/bench/cuda_allreduce_bench.py" --nprocs 2 --max-bytes $((128 << 20)) --nccl-host-per-rank \
        --json "$LOGS/bench_torch_np2_$path.json"
    done
  else
    note "python_build           failed (see python_build.log)"
    failed=1
    step bench_gloo_np2 120 0 "$PY" "$ROOT/python/bench/cuda_allreduce_bench.py" --nprocs 2
  fi
fi

step allreduce_D1_np1 60 1 "$BR" -np 1 $AR
# Processes sharing a GPU take turns on it by time slice, one context at a time, unless
# CUDA's MPS server runs their work in one (docs/cuda.md, "Ranks sharing one GPU"): the
# staged path on 2 ranks and the direct path on 4, as above, under a private MPS server
# that is stopped after them.
if command -v nvidia-cuda-mps-control > /dev/null 2>&1; then
  MPS=(env CUDA_MPS_PIPE_DIRECTORY="$LOGS/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$LOGS/mps/log")
  mkdir -p "$LOGS/mps/pipe" "$LOGS/mps/log"
  if "${MPS[@]}" nvidia-cuda-mps-control -d > "$LOGS/mps_start.log" 2>&1; then
    step allreduce_D1_np2_mps 120 1 "${MPS[@]}" "$BR" -np 2 $AR
    step allreduce_D1_np4_direct_mps 120 1 "${MPS[@]}" BRAID_CUDA_PATH=direct "$BR" -np 4 $AR
    echo quit | "${MPS[@]}" nvidia-cuda-mps-control > /dev/null 2>&1
  else
    note "mps: nvidia-cuda-mps-control -d failed (mps_start.log): the MPS steps are skipped"
  fi
else
  note "mps: no nvidia-cuda-mps-control: the MPS steps are skipped"
fi
# How a stream waits for the host (BRAID_CUDA_STREAM_WAIT), compared in the same run.
for mode in kernel memop host; do
  step "allreduce_D1_np2_wait_$mode" 90 1 env BRAID_CUDA_STREAM_WAIT=$mode "$BR" -np 2 "$PERF/allreduce_perf" \
    -b 8 -e 128M -f 64 -n 20 -w 5 -c 1 -D 1
done
step allreduce_D1_np2_z2 90 1 "$BR" -np 2 "$PERF/allreduce_perf" -b 8 -e 128M -f 64 -n 20 -w 5 -c 1 -z 2 -D 1
step allreduce_D0_np2 90 1 "$BR" -np 2 "$PERF/allreduce_perf" -b 8 -e 128M -f 8 -n 20 -w 5 -c 1 -D 0
[ -n "${QUICK:-}" ] || step allreduce_D1_np2_all 120 1 "$BR" -np 2 "$PERF/allreduce_perf" -b 4K -e 4M -f 32 -n 5 -w 1 -c 1 -o all -d all -D 1
# Every collective on staged device buffers, checked, 3 ranks sharing the GPU.
for coll in broadcast sendrecv allgather reduce_scatter alltoall reduce gather scatter; do
  step "${coll}_D1_np3" 60 1 "$BR" -np 3 "$PERF/${coll}_perf" -b 8 -e 16M -f 64 -n 5 -w 1 -c 1 -D 1
done
# Calls of 8 MiB and more are staged in pieces (docs/cuda.md, "Pieces"), those of allgather,
# reduce-scatter, alltoall, gather and scatter with strided copies of every rank's block.
for coll in allgather reduce_scatter alltoall reduce broadcast gather scatter; do
  step "${coll}_D1_np3_pieces" 60 1 "$BR" -np 3 "$PERF/${coll}_perf" -b 12M -e 48M -f 4 -n 5 -w 1 -c 1 -D 1
done
# CUDA graphs (-G): the timed loop captured once and launched 3 times, -c checking a
# captured call (docs/cuda.md, "Graph capture").
for coll in allreduce allgather sendrecv; do
  step "${coll}_D1_np2_graph" 60 1 "$BR" -np 2 "$PERF/${coll}_perf" -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 -D 1 -G 3
done
# Captured on the direct paths: staged at each replay, the warm-up calls direct.
for path in direct ipc; do
  step "allreduce_D1_np2_graph_$path" 60 1 env BRAID_CUDA_PATH=$path "$BR" -np 2 "$PERF/allreduce_perf" \
    -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 -D 1 -G 3
done
# The direct and ipc paths launch one kernel per slice and wait for it: larger slots mean
# fewer launches (2 and 8 MiB against the default 512 KiB of allreduce_D1_np2_direct/_ipc).
for path in direct ipc; do
  for slot in 2M 8M; do
    step "allreduce_D1_np2_${path}_slot$slot" 60 1 env BRAID_CUDA_PATH=$path BRAID_SLOT_BYTES=$slot "$BR" -np 2 \
      "$PERF/allreduce_perf" -b 1M -e 128M -f 8 -n 20 -w 5 -c 1 -D 1
  done
done
# One core per rank (braidrun's old binding) against the default blocks of cores.
step allreduce_D1_np2_bind_core 90 0 "$BR" -np 2 --bind-to core "$PERF/allreduce_perf" -b 8 -e 128M -f 64 -n 20 -w 5 -c 1 -D 1
note "== done in ${SECONDS}s, correctness steps $([ $failed = 0 ] && echo passed || echo FAILED)"
exit $failed

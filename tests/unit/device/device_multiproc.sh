#!/usr/bin/env bash
# The direct device paths with ranks as processes, BRAIDRUN -np N DEVICE_RANK on the
# host-memory runtime: BRAID_CUDA_PATH=direct over shared memory (each process registers its
# own mapping of the segments), over tcp (its connections' staging slots), through tcp
# behind the plugin ABI and over UCX (the slots a v5 plugin hands out); ipc over shared
# memory (each process makes device slots, the others map them, as CUDA IPC would); and a
# plugin of the first ABI version, which hands out no slots, where every call is staged.
# Every element of every collective is checked; the kernels must have run (on the device
# slots for ipc), nothing staged on the direct paths, and everything undone at destroy.
# Then a rank is killed mid-job on each path: every survivor's call fails, naming it.
#
# Environment: BRAIDRUN, DEVICE_RANK; TCP_ABI_PLUGIN, V1_PLUGIN (test plugins, where built)
# and DEVICE_UCX_PLUGIN (where braid has UCX): a case whose plugin is missing says SKIP. (Not
# UCX_PLUGIN: UCX warns of every UCX_ variable it does not know, from the rank's main thread,
# and under clang 14's LeakSanitizer that warning made the exit-time leak check crash, "Tracer
# caught signal 11", on a DTLS range of the main thread LSan had recorded wrong, in builds of
# some layouts and not others.)
set -uo pipefail
fail=0
pids=()
out=""  # the last case's output

# run CASE NP PATH KIND [VAR=VALUE...]: KIND is direct, ipc or staged.
run() {
  local name=$1 np=$2 path=$3 kind=$4 rc
  shift 4
  out=$(env BRAID_CUDA_PATH="$path" BRAID_DEBUG=WARN "$@" timeout 120 "$BRAIDRUN" -np "$np" "$DEVICE_RANK" 2>&1)
  rc=$?
  echo "== $name (exit $rc)"
  echo "$out"
  [ $rc = 0 ] || { echo "FAIL: $name: exit $rc"; fail=1; }
  [ "$(grep -c 'DEVICE rank=[0-9] error=none ' <<<"$out")" = "$np" ] || { echo "FAIL: $name: not every rank right"; fail=1; }
  local want
  case $kind in
    ipc) want='kernels=[1-9][0-9]* slotKernels=[1-9][0-9]* areas=[1-9][0-9]* registered=[1-9][0-9]* copies=0' ;;
    direct) want='kernels=[1-9][0-9]* slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0' ;;
    staged) want='kernels=0 slotKernels=0 areas=0 registered=0 copies=[1-9]' ;;
  esac
  [ "$(grep -c "DEVICE rank=[0-9] error=none $want" <<<"$out")" = "$np" ] ||
    { echo "FAIL: $name: not every rank ran $kind"; fail=1; }
  if [ "$kind" = staged ]; then
    [ "$(grep -c 'device buffers are staged instead on rank [0-9]: a peer is reached through a transport plugin' <<<"$out")" = "$np" ] ||
      { echo "FAIL: $name: no warning saying why"; fail=1; }
  fi
  [ "$(grep -c 'AFTER rank=[0-9] areas=0 imports=0 registered=0 hostLive=0 pid=' <<<"$out")" = "$np" ] ||
    { echo "FAIL: $name: left over"; fail=1; }
  pids+=($(grep -o 'AFTER rank=.* pid=[0-9]*' <<<"$out" | sed 's/.*pid=//'))
}

run "direct over shm" 3 direct direct BRAID_TRANSPORT=shm
run "ipc over shm" 3 ipc ipc BRAID_TRANSPORT=shm
# The same with the slots' memory passed as file descriptors (cuMem's POSIX handles), fetched
# from each exporter over its Unix socket, and offered no longer once every peer has them.
run "ipc over shm, handles as file descriptors" 3 ipc ipc BRAID_TRANSPORT=shm BRAID_CUDA_MEM_HANDLE=fd
[ "$(grep -c 'DEVICE rank=[0-9] error=none .* fdImports=[1-9][0-9]* offered=0$' <<<"$out")" = 3 ] ||
  { echo "FAIL: ipc with descriptors: not every rank fetched its peers' descriptors and stopped offering its own"; fail=1; }
run "direct over tcp" 3 direct direct BRAID_TRANSPORT=tcp
if [ -f "${TCP_ABI_PLUGIN:-}" ]; then
  run "direct through tcp behind the plugin ABI" 2 direct direct BRAID_TRANSPORT_PLUGIN="$TCP_ABI_PLUGIN" \
    BRAID_TRANSPORT=tcp-abi
else
  echo "SKIP: tcp behind the plugin ABI: ${TCP_ABI_PLUGIN:-TCP_ABI_PLUGIN} is not built (tests/transport left out)"
fi
if [ -f "${V1_PLUGIN:-}" ]; then
  run "direct asked for through a v1 plugin: staged" 2 direct staged BRAID_TRANSPORT_PLUGIN="$V1_PLUGIN" \
    BRAID_TRANSPORT=failing
else
  echo "SKIP: a v1 plugin: ${V1_PLUGIN:-V1_PLUGIN} is not built (tests/transport left out)"
fi
if [ -f "${DEVICE_UCX_PLUGIN:-}" ]; then
  run "direct over UCX (tcp)" 2 direct direct BRAID_TRANSPORT_PLUGIN="$DEVICE_UCX_PLUGIN" BRAID_TRANSPORT=ucx UCX_TLS=tcp,self
else
  echo "SKIP: UCX: braid was built without it"
fi
# A rank killed (SIGKILL) while the others run device calls, on each path: every survivor's
# call fails with a remote error naming it, within 5 s (the timeout is 20 s).
killed() {
  local name=$1 path=$2 transport=$3 n
  shift 3
  out=$(env "$@" BRAID_CUDA_PATH="$path" BRAID_TRANSPORT="$transport" DEVICE_DIE_RANK=2 BRAIDRUN_GRACE_SEC=20 \
    BRAID_TIMEOUT=20 timeout 120 "$BRAIDRUN" -np 3 "$DEVICE_RANK" 2>&1)
  echo "== rank 2 killed: $name"
  echo "$out"
  n=$(grep -E -c 'SURVIVOR rank=[01] result=3 calls=[0-9]+ ms=[0-9]{1,4} error=.*rank 2.*\(failed rank 2\)' <<<"$out")
  [ "$n" = 2 ] || { echo "FAIL: rank 2 killed, $name: $n of 2 survivors failed within 5 s naming it"; fail=1; }
  # The killed rank's device slots, which a GPU frees with the process, are the fake's
  # shared-memory segments here: gone with it too.
  local victim
  victim=$(grep -o 'VICTIM rank=2 pid=[0-9]*' <<<"$out" | sed 's/.*pid=//')
  [ -n "$victim" ] && rm -f /dev/shm/braid-fake-slots-"$victim"-*
}
killed "direct over shm" direct shm
killed "ipc over shm" ipc shm
killed "ipc over shm, handles as file descriptors" ipc shm BRAID_CUDA_MEM_HANDLE=fd
killed "direct over tcp" direct tcp
killed "staged" staged shm
# The segments of these ranks only (other tests may run beside this one).
left=0
for pid in "${pids[@]}"; do
  left=$((left + $(ls /dev/shm 2>/dev/null | grep -c "^braid-fake-slots-$pid-" || true)))
done
[ "$left" = 0 ] || { echo "FAIL: $left device slot segments left in /dev/shm"; fail=1; }
exit $fail

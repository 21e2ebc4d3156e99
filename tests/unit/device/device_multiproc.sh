#!/usr/bin/env bash
# The direct device paths with ranks as processes: BRAIDRUN -np 3 DEVICE_RANK over shared
# memory for BRAID_CUDA_PATH=direct (each process registers its own mapping of the
# segments) and ipc (each process makes device slots, the others map them, as CUDA IPC
# would), and over tcp for direct (each process registers its connections' staging slots),
# on the host-memory runtime. Every element of every collective is checked; the kernels
# must have run (on the device slots for ipc) and everything is undone at destroy.
set -uo pipefail
fail=0
pids=()
for run in "direct shm" "ipc shm" "direct tcp"; do
  read -r path transport <<<"$run"
  out=$(BRAID_CUDA_PATH=$path BRAID_TRANSPORT=$transport timeout 120 "$BRAIDRUN" -np 3 "$DEVICE_RANK" 2>&1)
  rc=$?
  echo "== $path over $transport (exit $rc)"
  echo "$out"
  [ $rc = 0 ] || fail=1
  [ "$(grep -c 'DEVICE rank=[0-9] error=none kernels=[1-9]' <<<"$out")" = 3 ] || { echo "FAIL: $path: not every rank right"; fail=1; }
  if [ $path = ipc ]; then
    [ "$(grep -c 'slotKernels=[1-9][0-9]* areas=[1-9]' <<<"$out")" = 3 ] || { echo "FAIL: ipc: device slots unused"; fail=1; }
  else
    [ "$(grep -c 'slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0' <<<"$out")" = 3 ] ||
      { echo "FAIL: direct: slots not registered, or something staged"; fail=1; }
  fi
  [ "$(grep -c 'AFTER rank=[0-9] areas=0 imports=0 registered=0 hostLive=0 pid=' <<<"$out")" = 3 ] || { echo "FAIL: $path: left over"; fail=1; }
  pids+=($(grep -o 'AFTER rank=.* pid=[0-9]*' <<<"$out" | sed 's/.*pid=//'))
done
# A peer reached through a transport plugin (tcp behind the plugin ABI, which hands out no
# slot memory): direct is not taken, every call is staged and still right.
if [ -f "${TCP_ABI_PLUGIN:-}" ]; then
  out=$(BRAID_CUDA_PATH=direct BRAID_TRANSPORT_PLUGIN=$TCP_ABI_PLUGIN BRAID_TRANSPORT=tcp-abi BRAID_DEBUG=WARN \
    timeout 120 "$BRAIDRUN" -np 2 "$DEVICE_RANK" 2>&1)
  rc=$?
  echo "== direct through the tcp-abi plugin (exit $rc)"
  echo "$out"
  [ $rc = 0 ] || fail=1
  [ "$(grep -c 'DEVICE rank=[0-9] error=none kernels=0 slotKernels=0 areas=0 registered=0 copies=[1-9]' <<<"$out")" = 2 ] ||
    { echo "FAIL: through a plugin: not every rank staged and right"; fail=1; }
  [ "$(grep -c 'device buffers are staged instead on rank [01]: a peer is reached through a transport plugin' <<<"$out")" = 2 ] ||
    { echo "FAIL: through a plugin: no warning saying why"; fail=1; }
  pids+=($(grep -o 'AFTER rank=.* pid=[0-9]*' <<<"$out" | sed 's/.*pid=//'))
else
  echo "SKIP: the plugin case: ${TCP_ABI_PLUGIN:-TCP_ABI_PLUGIN} is not built (tests/transport left out)"
fi
# The segments of these ranks only (other tests may run beside this one).
left=0
for pid in "${pids[@]}"; do
  left=$((left + $(ls /dev/shm 2>/dev/null | grep -c "^braid-fake-slots-$pid-" || true)))
done
[ "$left" = 0 ] || { echo "FAIL: $left device slot segments left in /dev/shm"; fail=1; }
exit $fail

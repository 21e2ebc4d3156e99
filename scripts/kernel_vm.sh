#!/usr/bin/env bash
# Runs braid's tests under a Linux kernel that has what this machine's kernel lacks and
# cannot load, inside a virtual machine: kernel TLS (the `tls` TCP ULP, docs/security.md,
# "Kernel TLS") and Soft-RoCE (`rdma_rxe`, a verbs device over an Ethernet interface,
# docs/ibverbs.md), so the paths that need them run somewhere.
#
#   bash scripts/kernel_vm.sh prepare          qemu, busybox and kmod from Debian's packages, and
#                                              Debian's kernel into $BRAID_VM_CACHE
#   bash scripts/kernel_vm.sh ktls BUILD       the TLS tests; each must say its records were
#                                              protected in the kernel
#   bash scripts/kernel_vm.sh ktls-bench BUILD allreduce_perf over tcp, 2 ranks: plain, TLS in
#                                              OpenSSL, TLS in the kernel
#   bash scripts/kernel_vm.sh verbs BUILD      the verbs transport over Soft-RoCE
#   bash scripts/kernel_vm.sh verbs-hosts BUILD  the same across two VMs joined by a wire
#   bash scripts/kernel_vm.sh ucx-bench BUILD  scripts/bench_ucx.sh over UCX's rc_verbs on
#                                              rxe0: braid against OpenMPI's pml ucx and
#                                              ucx_perftest, 2 ranks (emulated: ratios only)
#   bash scripts/kernel_vm.sh job FILE         any shell script, run as root in the VM
#
# Exit 77 when not prepared. The VM: Debian's kernel under qemu (software emulation;
# BRAID_VM_KVM=1 tries KVM), with an initramfs of busybox and the kernel's modules. The host's
# root filesystem is shared read-only over 9p with a tmpfs overlay above it, so the build
# tree runs as it is, at the same paths, and nothing is written back to the host. The job's
# output comes back on the serial console. Software emulation makes it slow (a minute or
# two per job) and its timings say nothing about real hardware.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${BRAID_VM_CACHE:-/var/cache/braid/kernel-vm}"
MODE="${1:-}"
BUILD="${2:-$ROOT/build}"
# Kernel module folders the VM needs: 9p and virtio for the shared root, overlayfs above it;
# tls and the AEAD ciphers; Soft-RoCE (rdma_rxe, the verbs core and user access, the UDP
# tunnels it sends over), veth for an interface to run it on, and virtio_net for the wire
# between two VMs.
MODULE_DIRS=(net/9p fs/9p fs/netfs fs/fscache fs/overlayfs drivers/virtio net/tls crypto
             arch/x86/crypto lib/crypto drivers/infiniband/core drivers/infiniband/sw/rxe
             net/ipv4/udp_tunnel.ko net/ipv6/ip6_udp_tunnel.ko drivers/net/veth.ko
             drivers/net/virtio_net.ko drivers/net/net_failover.ko net/core/failover.ko)

skip() { echo "kernel_vm: skipped: $*"; exit 77; }

prepare() {
  local pkgs=(qemu-system-x86 busybox-static kmod) missing=() p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  local SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
  fi
  # Debian's current kernel image, unpacked (not installed): its vmlinuz and the modules above.
  local pkg
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')"
  if [ -z "$pkg" ]; then
    $SUDO apt-get update -q >/dev/null
    pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')"
  fi
  [ -n "$pkg" ] || { echo "kernel_vm: apt knows no linux-image-amd64 (run apt-get update)"; return 1; }
  # Unpacked already, with these module folders: nothing to do.
  if [ -f "$CACHE/$pkg/ready" ] && [ "$(cat "$CACHE/$pkg/dirs" 2>/dev/null)" = "${MODULE_DIRS[*]}" ]; then return 0; fi
  echo "== unpacking $pkg into $CACHE/$pkg"
  local tmp
  tmp="$(mktemp -d)"
  (cd "$tmp" && { apt-get download -q "$pkg" >/dev/null 2>&1 ||
                  { $SUDO apt-get update -q >/dev/null && apt-get download -q "$pkg" >/dev/null 2>&1; }; } &&
   dpkg-deb -x ./*.deb unpacked) || { echo "kernel_vm: cannot download $pkg"; rm -rf "$tmp"; return 1; }
  local ver
  ver="$(ls "$tmp/unpacked/lib/modules")"
  $SUDO mkdir -p "$CACHE/$pkg"
  $SUDO rm -rf "$CACHE/$pkg"/*
  $SUDO cp "$tmp/unpacked/boot/vmlinuz-$ver" "$CACHE/$pkg/vmlinuz"
  local d
  for d in "${MODULE_DIRS[@]}"; do
    $SUDO mkdir -p "$CACHE/$pkg/modules/lib/modules/$ver/kernel/$(dirname "$d")"
    $SUDO cp -r "$tmp/unpacked/lib/modules/$ver/kernel/$d" "$CACHE/$pkg/modules/lib/modules/$ver/kernel/$d"
  done
  $SUDO cp "$tmp/unpacked/lib/modules/$ver"/modules.{order,builtin,builtin.modinfo} \
    "$CACHE/$pkg/modules/lib/modules/$ver/"
  $SUDO depmod -b "$CACHE/$pkg/modules" "$ver"
  echo "${MODULE_DIRS[*]}" | $SUDO tee "$CACHE/$pkg/dirs" >/dev/null
  echo "$ver" | $SUDO tee "$CACHE/$pkg/ready" >/dev/null
  rm -rf "$tmp"
}

# The newest prepared kernel, or nothing.
kernel_dir() {
  local d
  d="$(ls -d "$CACHE"/linux-image-*/ 2>/dev/null | sort -V | tail -1)"
  [ -n "$d" ] && [ -f "$d/ready" ] && echo "${d%/}"
}

# Skips (exit 77) unless `prepare` has run: qemu, busybox and an unpacked kernel.
require_vm() {
  command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (bash scripts/kernel_vm.sh prepare)"
  [ -x /bin/busybox ] || skip "no busybox (bash scripts/kernel_vm.sh prepare)"
  kernel_dir >/dev/null || skip "no kernel in $CACHE (bash scripts/kernel_vm.sh prepare)"
}

# Boots a VM with JOB (a shell script run as root in the host's tree, whose writes, /tmp's
# included, stay in the VM's memory) and prints what it prints; returns the job's exit status.
# NAME (default vm) names its folder under $WORK; QEMU_ARGS (default: no network card) are
# added to qemu's.
run_vm() {
  local job="$1" limit="$2" name="${3:-vm}"
  shift $(( $# < 3 ? $# : 3 ))
  local extra=("$@")
  [ "${#extra[@]}" -gt 0 ] || extra=(-nic none)
  require_vm
  local kdir
  kdir="$(kernel_dir)"
  local work="$WORK/$name"
  local ird="$work/initramfs"
  rm -rf "$work"  # a job run once more starts afresh
  mkdir -p "$ird"/{bin,sbin,proc,sys,dev,lower,upper,host}
  cp /bin/busybox "$ird/bin/busybox"
  local a
  for a in sh mount mkdir chroot cat modprobe poweroff sync ip tail ln; do ln -s busybox "$ird/bin/$a"; done
  ln -s ../bin/busybox "$ird/sbin/modprobe"
  cp -r "$kdir/modules/lib" "$ird/"
  cp "$job" "$ird/job.sh"
  cat > "$ird/init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
echo /sbin/modprobe > /proc/sys/kernel/modprobe
for m in virtio_pci 9pnet_virtio 9p overlay tls gcm ghash_generic aesni_intel chacha20poly1305 veth virtio_net rdma_rxe ib_uverbs; do
  modprobe "$m" || echo "kernel-vm: modprobe $m failed"
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 hostroot /lower || echo "kernel-vm: cannot mount the host's root"
mount -t tmpfs -o size=75% upper /upper
mkdir -p /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /host || echo "kernel-vm: no overlay"
mount --bind /proc /host/proc
mount --bind /sys /host/sys
mount --bind /dev /host/dev
mkdir -p /host/dev/shm
mount -t tmpfs shm /host/dev/shm
cp /job.sh /host/tmp/kernel-vm-job.sh
ip link set lo up
echo "kernel-vm: kernel $(cat /proc/sys/kernel/osrelease), $(grep -c ^processor /proc/cpuinfo) CPUs; TCP ULPs: $(cat /proc/sys/net/ipv4/tcp_available_ulp)"
chroot /host /bin/sh /tmp/kernel-vm-job.sh
echo "kernel-vm: exit $?"
sync
poweroff -f
EOF
  chmod +x "$ird/init"
  (cd "$ird" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 > "$work/initrd.gz")
  local accel=(-accel tcg,thread=multi -cpu max)
  [ "${BRAID_VM_KVM:-0}" = 1 ] && accel=(-enable-kvm -cpu host,-arch-capabilities)
  local out="$work/console.log" rc=0
  timeout "$limit" qemu-system-x86_64 "${accel[@]}" -m "${BRAID_VM_MEM:-2G}" -smp "${BRAID_VM_CPUS:-2}" \
    -nographic -no-reboot -kernel "$kdir/vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    "${extra[@]}" > "$out" 2>&1 || rc=$?
  # The console's own escapes and carriage returns, then what the job printed.
  tr -d '\r' < "$out" | sed -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' | grep -a -v -e '^SeaBIOS' -e '^iPXE' \
    -e '^Press Ctrl-B' -e '^Booting from' -e 'reboot: Power down' -e '^c$' -e '^$' || true
  if [ "$rc" = 124 ]; then
    echo "kernel_vm: the VM did not finish within ${limit} s"
    return 1
  fi
  local status
  status="$(tr -d '\r' < "$out" | sed -n 's/^kernel-vm: exit \([0-9]*\)$/\1/p' | tail -1)"
  [ -n "$status" ] || { echo "kernel_vm: the VM ended without the job's exit status (qemu: $rc)"; return 1; }
  return "$status"
}

# The start of every job: the build's paths, and `step NAME CMD...`, which runs CMD with its
# output in /tmp/step.log and prints one line, ok or FAIL with the log's tail.
job_prelude() {
  local build="$1"
  cat <<EOF
#!/bin/sh
cd "$ROOT"
B="$build"
EOF
  cat <<'EOF'
AR="$B/perf/allreduce_perf"
RUN="$B/src/launcher/braidrun"
MP="$B/tests/multiproc"
failed=0
# A step's own check of its log, beyond its exit status (empty: none).
check=""
# The check of a step that kills rank 1 of 3: ranks 0 and 2 failed naming it.
KILLED1='for r in 0 2; do grep -q "RESULT rank=$r code=[1-9][0-9]* failed_rank=1 " /tmp/step.log || echo "rank $r did not fail naming rank 1"; done'
# The guest's heartbeat: its clock, once a second. The guest's clock follows the host's, so
# a gap between two beats is a time the guest did not run at all (its emulator was not
# scheduled), which its ranks' timeouts count as their peers' silence.
(while :; do date +%s; sleep 1; done) > /tmp/heartbeat 2>/dev/null &
# The longest gap between beats from $1 to now, in seconds.
longest_gap() {
  awk -v s="$1" -v e="$(date +%s)" '$1 >= s - 1 { if (p && $1 - p > g) g = $1 - p; p = $1 }
    END { if (p && e - p > g) g = e - p; print g + 0 }' /tmp/heartbeat
}
step() {
  name="$1"; shift
  start=$(date +%s)
  "$@" > /tmp/step.log 2>&1
  rc=$?
  why=""
  [ "$rc" = 0 ] || why="exit $rc"
  if [ -z "$why" ] && [ -n "$check" ]; then why=$(sh -c "$check" < /tmp/step.log); fi
  secs=$(( $(date +%s) - start ))
  gap=$(longest_gap "$start" 2>/dev/null)
  # Said of every step, passed or failed; the host looks for it (emulator_stalled).
  [ "${gap:-0}" -lt 10 ] || echo "kernel-vm: the guest did not run for $gap s (a gap in its heartbeat) during: $name"
  if [ -z "$why" ]; then
    echo "kernel-vm: ok   $name (${secs} s)"
  else
    echo "kernel-vm: FAIL $name (${secs} s): $why"
    tail -40 /tmp/step.log
    failed=1
  fi
  check=""
}
EOF
}

# kernel TLS: each step runs with BRAID_DEBUG=INFO and passes only if a process of it logged
# that its records were protected in the kernel, and none that they were not (a test that
# fell back to OpenSSL would pass on its own).
write_ktls_job() {
  job_prelude "$1"
  cat <<'EOF'
export BRAID_DEBUG=INFO
KERNEL='grep -q "TLS: records are protected in the kernel" /tmp/step.log || echo "no process had its records in the kernel"'
NOT='grep -m1 "TLS: records are protected \(in OpenSSL\|sending\|receiving\)" /tmp/step.log'
ktls() { check="$KERNEL; $NOT; $1"; }
# Only test_tls's TCP case: the other one's socket pair cannot take the kernel's TLS, and a
# process logs where its records are protected once, for its first session.
ktls ""
step "unit: a TLS stream over TCP, 3 MiB each way, then the end of the stream (test_tls)" \
  "$B/tests/unit/common/test_tls" "TLS: over TCP*"
ktls ""
step "tcp transport with BRAID_TLS: intact, never in the clear, a changed byte fails naming the sender, closes" \
  "$B/tests/transport/test_transport" "[tcp][tls]"
# The changed byte again, alone and with every assertion printed: the kernel refused the record.
ktls 'grep -q "did not authenticate (kernel TLS)" /tmp/step.log || echo "the changed byte was not refused by the kernel"'
step "a record changed on the wire: the kernel refuses it, the receive fails naming rank 1" \
  "$B/tests/transport/test_transport" "tcp: with BRAID_TLS a byte changed on the way*" -s
ktls ""
step "tcp store with BRAID_TLS" "$B/tests/unit/bootstrap/test_bootstrap" "[tls]"
ktls 'grep -q "Out of bounds values : 0 OK" /tmp/step.log || echo "wrong results"'
step "allreduce_perf -c 1, 3 ranks, BRAID_TLS=1 over tcp, 2 sockets per peer" \
  "$RUN" -np 3 -x BRAID_TLS=1 -x BRAID_TRANSPORT=tcp -x BRAID_SOCKETS_PER_PEER=2 "$AR" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
# (Every collective over BRAID_TLS=1 is test_multiproc's; the records take the same path.)
ktls "$KILLED1"
step "rank 1 killed mid-allreduce: ranks 0 and 2 fail naming it" \
  sh -c "'$RUN' -np 3 -x BRAID_TLS=1 -x BRAID_TRANSPORT=tcp -x BRAID_TIMEOUT=20 '$MP/mp_fault' kill 1 20 262144; true"
exit $failed
EOF
}

write_ktls_bench_job() {
  job_prelude "$1"
  cat <<'EOF'
for mode in plain openssl kernel; do
  case $mode in
    plain) env="-x BRAID_TLS=0" ;;
    openssl) env="-x BRAID_TLS=1 -x BRAID_TLS_KERNEL=0" ;;
    kernel) env="-x BRAID_TLS=1 -x BRAID_TLS_KERNEL=1" ;;
  esac
  echo "kernel-vm: allreduce over tcp, 2 ranks, $mode"
  "$RUN" -np 2 -x BRAID_TRANSPORT=tcp -x BRAID_DEBUG=INFO $env "$AR" -b 64K -e 4M -f 4 -n 5 -w 1 -c 1 2>&1 |
    grep -E "^ +[0-9]|records are protected|Out of bounds" | sed 's/^/  /'
done
EOF
}

# Soft-RoCE in one VM: rxe0 over one end of a veth pair (its own address, 10.77.0.1), which
# loops traffic between queue pairs of the same device.
rxe_on_veth() {
  cat <<'EOF'
ip link add vm-rxe type veth peer name vm-rxe-peer
ip addr add 10.77.0.1/24 dev vm-rxe
ip addr add 10.77.0.2/24 dev vm-rxe-peer
ip link set vm-rxe up
ip link set vm-rxe-peer up
rdma link add rxe0 type rxe netdev vm-rxe || echo "kernel-vm: rdma link add failed"
ulimit -l unlimited
EOF
}

# The verbs transport's suite and jobs over rxe0, then UCX's.
write_verbs_job() {
  job_prelude "$1"
  rxe_on_veth
  cat <<'EOF'
rdma link show
export BRAID_IB_HCA=rxe0
check='grep -q "ibverbs" /tmp/step.log || echo "braid-info does not list ibverbs"'
step "braid-info lists the verbs transport on rxe0" "$B/src/launcher/braid-info"
grep -i -A3 "ibverbs" /tmp/step.log | head -8
check='! grep -q "unavailable here" /tmp/step.log || echo "the suite was skipped"'
step "the transport conformance suite over ibverbs" "$B/tests/transport/test_transport" "[ibverbs]"
check='grep -q "Out of bounds values : 0 OK" /tmp/step.log || echo "wrong results"'
step "allreduce_perf -c 1, 2 ranks, BRAID_TRANSPORT=ibverbs" \
  "$RUN" -np 2 -x BRAID_TRANSPORT=ibverbs -x BRAID_IB_HCA "$AR" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
# The direct device path over verbs, on the host-memory runtime (tests/unit/device): every
# byte moved by the kernels' own source between the verbs connections' registered slots (its
# staging slab and slot FIFO, given through the plugin ABI's slot_memory), nothing staged,
# every element of every collective right and everything undone at the end.
DEV="$B/tests/unit/device/device_rank"
check='[ "$(grep -c "DEVICE rank=[01] error=none kernels=[1-9][0-9]* slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0" /tmp/step.log)" = 2 ] || echo "not every rank ran the direct path right"; [ "$(grep -c "AFTER rank=[01] areas=0 imports=0 registered=0 hostLive=0" /tmp/step.log)" = 2 ] || echo "left over"'
[ -x "$DEV" ] && step "device buffers over ibverbs, BRAID_CUDA_PATH=direct (host-memory runtime), 2 ranks" \
  "$RUN" -np 2 -x BRAID_TRANSPORT=ibverbs -x BRAID_IB_HCA -x BRAID_CUDA_PATH=direct "$DEV"
# GPUDirect RDMA (BRAID_CUDA_PATH=ipc over verbs): each connection's ends have device areas
# (the runtime's "GPU memory", here host memory) registered with rxe0; the kernels write a
# payload into the sender's area, one RDMA write moves it into the receiver's, and the header
# follows into the slot FIFO. Every element right, kernels on the areas, every payload read
# after a flush, nothing staged, everything unregistered and freed at the end.
GDR='DEVICE rank=[01] error=none kernels=[1-9][0-9]* slotKernels=[1-9][0-9]* areas=[1-9][0-9]* registered=[1-9][0-9]* copies=0 rdmaFlushes=[1-9][0-9]*'
check='[ "$(grep -c "'"$GDR"'" /tmp/step.log)" = 2 ] || echo "not every rank moved device calls through registered areas"; [ "$(grep -c "AFTER rank=[01] areas=0 imports=0 registered=0 hostLive=0" /tmp/step.log)" = 2 ] || echo "left over"; [ "$(grep -c "registered with the NIC (GPUDirect RDMA)" /tmp/step.log)" = 2 ] || echo "no rank said it registered its areas"'
[ -x "$DEV" ] && step "device buffers over ibverbs, BRAID_CUDA_PATH=ipc: device areas registered with rxe0 (host-memory runtime), 2 ranks" \
  "$RUN" -np 2 -x BRAID_TRANSPORT=ibverbs -x BRAID_IB_HCA -x BRAID_CUDA_PATH=ipc -x BRAID_DEBUG=INFO "$DEV"
# Two emulated hosts of two ranks each (a host id per pair, one store): within a host the
# shared-memory FIFOs with CUDA IPC areas (the receiver's, opened by its sender), between
# hosts verbs with registered areas at both ends, set up together at the first device call.
# (Waits for its ranks alone: the job's heartbeat is a child of this shell too.)
two_by_two() {
  pids=""
  for r in 0 1 2 3; do
    BRAID_RANK=$r BRAID_WORLD_SIZE=4 BRAID_LOCAL_RANK=$((r % 2)) BRAID_LOCAL_SIZE=2 BRAID_HOST_ID=emulated$((r / 2)) \
      BRAID_STORE_ADDR=127.0.0.1:29611 BRAID_CUDA_PATH=ipc BRAID_DEBUG=INFO BRAID_TIMEOUT=60 timeout -k 5 120 "$DEV" &
    pids="$pids $!"
  done
  rc=0
  for p in $pids; do wait "$p" || rc=1; done
  return $rc
}
check='[ "$(grep -c "DEVICE rank=[0-3] error=none kernels=[1-9][0-9]* slotKernels=[1-9][0-9]* areas=[1-9][0-9]* registered=[1-9][0-9]* copies=0 rdmaFlushes=[1-9][0-9]*" /tmp/step.log)" = 4 ] || echo "not every rank moved device calls through device areas"; [ "$(grep -c "AFTER rank=[0-3] areas=0 imports=0 registered=0 hostLive=0" /tmp/step.log)" = 4 ] || echo "left over"; [ "$(grep -c "device slot areas of its own and [1-9][0-9]* of its peers., registered with the NIC" /tmp/step.log)" = 4 ] || echo "not every rank had both kinds of area"; grep -q "transports \[self,shm,ibverbs,ibverbs\]" /tmp/step.log || echo "rank 0 did not reach its host peer by shm and the others by verbs"'
[ -x "$DEV" ] && step "device buffers, BRAID_CUDA_PATH=ipc, 2 emulated hosts x 2 ranks: CUDA IPC areas within a host, areas registered with rxe0 between" two_by_two
# A rank killed (SIGKILL) while the others run device allreduces through registered areas:
# both survivors' calls fail with a remote error naming it, within 5 s (the timeout is 20 s).
check='n=$(grep -E -c "SURVIVOR rank=[01] result=3 calls=[0-9]+ ms=[0-9]{1,4} error=.*rank 2.*\(failed rank 2\)" /tmp/step.log); [ "$n" = 2 ] || echo "$n of 2 survivors failed within 5 s naming rank 2"'
[ -x "$DEV" ] && step "rank 2 killed mid device allreduce over ibverbs, BRAID_CUDA_PATH=ipc: ranks 0 and 1 fail naming it" \
  sh -c "'$RUN' -np 3 -x BRAID_TRANSPORT=ibverbs -x BRAID_IB_HCA -x BRAID_CUDA_PATH=ipc -x DEVICE_DIE_RANK=2 -x BRAID_TIMEOUT=20 '$DEV'; true"
grep "^SURVIVOR" /tmp/step.log | cut -c1-200 | sed 's/^/  /'
# A rank whose GPU cannot take part in GPUDirect RDMA: every rank keeps the registered host
# slots of `direct` (none makes an area), saying why, and every element is still right.
check='[ "$(grep -c "DEVICE rank=[01] error=none kernels=[1-9][0-9]* slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0 rdmaFlushes=0" /tmp/step.log)" = 2 ] || echo "not every rank kept the host slots"; [ "$(grep -c "AFTER rank=[01] areas=0 imports=0 registered=0 hostLive=0" /tmp/step.log)" = 2 ] || echo "left over"; [ "$(grep -c "keeps the shared-memory slots: .*fake: no GPUDirect RDMA, on purpose" /tmp/step.log)" = 2 ] || echo "not every rank said why"'
[ -x "$DEV" ] && step "device buffers over ibverbs, BRAID_CUDA_PATH=ipc, rank 1 without GPUDirect RDMA: both keep the host slots" \
  "$RUN" -np 2 -x BRAID_TRANSPORT=ibverbs -x BRAID_IB_HCA -x BRAID_CUDA_PATH=ipc -x DEVICE_NO_RDMA=1 -x BRAID_DEBUG=WARN "$DEV"
# (Every collective over ibverbs runs across two VMs: verbs-hosts.)
check="$KILLED1"
step "rank 1 killed mid-allreduce over ibverbs: ranks 0 and 2 fail naming it" \
  sh -c "'$RUN' -np 3 -x BRAID_TRANSPORT=ibverbs -x BRAID_IB_HCA -x BRAID_TIMEOUT=20 '$MP/mp_fault' kill 1 20 262144; true"
# UCX over the same device: its rc_verbs, wired up over its ud_verbs (on one host UCX would
# otherwise take shared memory). The plugin sees that rxe0 is Soft-RoCE and turns off UCX's
# check of each UD packet's destination GID, without which nothing wires up (ucx_env.h).
UCXRC="-x BRAID_TRANSPORT=ucx -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=rxe0:1"
RC_LANES='[ "$(grep -c "ep_cfg\[[0-9]*\]: tag(rc_verbs/rxe0:1)" /tmp/step.log)" -ge 2 ] || echo "UCX did not send over rc_verbs"; grep -q "rxe0 is Soft-RoCE: UCX.s check of each UD packet.s destination GID is off" /tmp/step.log || echo "the plugin did not turn the check off"'
check='! grep -q "unavailable here" /tmp/step.log || echo "the suite was skipped"'
UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=rxe0:1 \
  step "the transport conformance suite over UCX's rc_verbs on rxe0" "$B/tests/transport/test_transport" "[ucx]"
check='grep -q "Out of bounds values : 0 OK" /tmp/step.log || echo "wrong results"; '"$RC_LANES"
step "allreduce_perf -c 1, 2 ranks, over UCX's rc_verbs on rxe0" \
  "$RUN" -np 2 $UCXRC -x BRAID_DEBUG=INFO -x UCX_LOG_LEVEL=info "$AR" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
check='[ "$(grep -c "collectives ok rank [0-2] of 3" /tmp/step.log)" = 3 ] || echo "not every rank ran every collective"'
step "every collective over UCX's rc_verbs on rxe0, 3 ranks" "$RUN" -np 3 $UCXRC "$MP/mp_collectives"
check="$KILLED1"
step "rank 1 killed mid-allreduce over UCX's rc_verbs: ranks 0 and 2 fail naming it" \
  sh -c "'$RUN' -np 3 $UCXRC -x BRAID_TIMEOUT=20 '$MP/mp_fault' kill 1 20 262144; true"
grep "^RESULT" /tmp/step.log | sed 's/^/  /'
check="$KILLED1"
step "rank 1 stopped (SIGSTOP) mid-allreduce over UCX's rc_verbs: ranks 0 and 2 fail naming it" \
  sh -c "'$RUN' -np 3 $UCXRC -x BRAID_TIMEOUT=10 '$MP/mp_fault' stop 1 20 262144; true"
grep "^RESULT" /tmp/step.log | sed 's/^/  /'
# The port going down under running allreduces (its interface taken down; last, as rxe0 stays
# down): both ranks fail within 5 s, not at the timeout of 20 s, through the verbs transport
# (the device's async event, "rxe0 port 1 went down (port error)", or the error completion
# of a write, a credit update or a receive, whichever comes first) or, where the other rank
# published its failure first, through that record ("rank 1 reported: ..."), which then
# names the same rank on both.
port_down() {
  timeout 60 "$RUN" -np 2 -x BRAID_TRANSPORT=ibverbs -x BRAID_IB_HCA -x BRAID_TIMEOUT=20 "$MP/mp_fault" external 0 0 262144 &
  job=$!
  i=0
  while [ "$(grep -c '^RUNNING rank=' /tmp/step.log)" != 2 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  ip link set vm-rxe down
  wait $job
  true
}
check='for r in 0 1; do grep -E -q "RESULT rank=$r code=3 failed_rank=[01] elapsed_ms=[0-9]{1,4} " /tmp/step.log || echo "rank $r did not fail within 5 s with a remote error"; done; grep -E -q "ibverbs: (connection with rank [01] failed: rxe0 port 1 went down \(port error\)|(RDMA write|credit update|receive from) (to )?rank [01] failed: .*\(completion status [0-9]+\))" /tmp/step.log || echo "no rank failed through the verbs transport"'
step "rxe0's port down mid-allreduce: both ranks fail within 5 s" port_down
exit $failed
EOF
}

# scripts/bench_ucx.sh in the VM over rxe0 (as the verbs job sets it up), UCX_TLS
# rc_verbs,ud_verbs,self for braid, OpenMPI's pml ucx and ucx_perftest alike: parts 1
# (allreduce against OpenMPI) and 3 (one-way sendrecv against ucx_perftest). Every program
# gets UCX's UD destination check off, as the plugin sets it for braid on Soft-RoCE, and the
# MPI harness is built in the VM for its CPU. The emulator's timings say nothing about an
# RDMA card; the ratios compare the programs' costs on one emulated device.
write_ucx_bench_job() {
  job_prelude "$1"
  rxe_on_veth
  cat <<'EOF'
# OpenMPI refuses the console's host name "(none)".
hostname vm
export HOME=/root UCX_NET_DEVICES=rxe0:1 UCX_UD_ETH_DGID_CHECK=n
BUILD_DIR="$B" SKIP_SETUP=1 BENCH_CACHE=/tmp/peers RESULTS=/tmp/bench PARTS="1 3" TLS=rc_verbs,ud_verbs NPS=2 \
  SIZES="64K 1M 16M" P2P_SIZES="64K 1M 4M" COLLS=allreduce ROUNDS=2 RUN_TIMEOUT=120 \
  bash scripts/bench_ucx.sh 2>&1 | grep -v '^== building'
EOF
}

# Two VMs, one rank each, joined by a virtual Ethernet wire (qemu's socket netdev): each puts
# rxe0 on its eth0 (10.78.0.<h+1>), so the ranks' RDMA writes and hellos cross the wire as
# RoCE v2 packets, as between two hosts. Rank 0 serves the store. H is 0 or 1.
write_verbs_hosts_job() {
  job_prelude "$1"
  cat <<EOF
export H=$2
KEY=$3
EOF
  cat <<'EOF'
ip addr add 10.78.0.$((H + 1))/24 dev eth0
ip link set eth0 up
rdma link add rxe0 type rxe netdev eth0 || echo "kernel-vm: rdma link add failed"
ulimit -l unlimited
export BRAID_IB_HCA=rxe0 BRAID_TRANSPORT=ibverbs BRAID_RANK=$H BRAID_WORLD_SIZE=2 BRAID_LOCAL_RANK=0
export BRAID_LOCAL_SIZE=1 BRAID_HOST_ID=vm$H BRAID_AUTH_KEY=$KEY BRAID_TIMEOUT=30 BRAID_DEBUG=INFO
# Each step is a job of its own, with a store port of its own.
check='grep -q "Out of bounds values : 0 OK" /tmp/step.log || [ "$H" = 1 ] || echo "wrong results"'
BRAID_STORE_ADDR=10.78.0.1:29500 step "host $H: allreduce_perf -c 1 across two VMs over RoCE v2" \
  "$AR" -b 8 -e 2M -f 8 -n 3 -w 1 -c 1
grep -m1 "ibverbs: using" /tmp/step.log
check='grep -q "collectives ok rank $H of 2" /tmp/step.log || echo "rank $H did not run every collective"'
BRAID_STORE_ADDR=10.78.0.1:29501 step "host $H: every collective across two VMs over RoCE v2" "$MP/mp_collectives"
# The direct device path between the hosts (host-memory runtime, docs/cuda.md): the kernels'
# source fills and drains the verbs slots that RDMA writes carry across the wire.
DEV="$B/tests/unit/device/device_rank"
check='grep -E -q "DEVICE rank=$H error=none kernels=[1-9][0-9]* slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0" /tmp/step.log || echo "rank $H did not run the direct path right"; grep -q "AFTER rank=$H areas=0 imports=0 registered=0 hostLive=0" /tmp/step.log || echo "left over"'
[ -x "$DEV" ] && BRAID_STORE_ADDR=10.78.0.1:29502 BRAID_CUDA_PATH=direct \
  step "host $H: device buffers across two VMs over RoCE v2, BRAID_CUDA_PATH=direct" "$DEV"
# GPUDirect RDMA between the hosts: each device payload crosses the wire from the sender's
# registered area into the receiver's, its header after it.
check='grep -E -q "DEVICE rank=$H error=none kernels=[1-9][0-9]* slotKernels=[1-9][0-9]* areas=[1-9][0-9]* registered=[1-9][0-9]* copies=0 rdmaFlushes=[1-9][0-9]*" /tmp/step.log || echo "rank $H did not move device calls through registered areas"; grep -q "AFTER rank=$H areas=0 imports=0 registered=0 hostLive=0" /tmp/step.log || echo "left over"; grep -q "registered with the NIC (GPUDirect RDMA)" /tmp/step.log || echo "rank $H did not say it registered its areas"'
[ -x "$DEV" ] && BRAID_STORE_ADDR=10.78.0.1:29506 BRAID_CUDA_PATH=ipc \
  step "host $H: device buffers across two VMs over RoCE v2, BRAID_CUDA_PATH=ipc (device areas registered with rxe0)" "$DEV"
# UCX across the wire with its own choice of transports: it sends over rc_verbs (wired up
# over ud_verbs, whose check of UD destinations the plugin turns off on Soft-RoCE).
RC_LANES='grep -q "ep_cfg\[[0-9]*\]: tag(rc_verbs/rxe0:1)" /tmp/step.log || echo "UCX did not send over rc_verbs"'
check='{ grep -q "Out of bounds values : 0 OK" /tmp/step.log || [ "$H" = 1 ]; } || echo "wrong results"; '"$RC_LANES"
BRAID_STORE_ADDR=10.78.0.1:29503 BRAID_TRANSPORT=ucx UCX_LOG_LEVEL=info \
  step "host $H: allreduce_perf -c 1 across two VMs over UCX (rc_verbs)" "$AR" -b 8 -e 2M -f 8 -n 3 -w 1 -c 1
# With UCX the only plugin and no BRAID_TRANSPORT, UCX's RDMA device puts it above tcp (rank
# 0 lists the transports chosen).
check='grep -q "collectives ok rank $H of 2" /tmp/step.log || echo "rank $H did not run every collective"; { grep -q "transports \[self,ucx\]" /tmp/step.log || [ "$H" = 1 ]; } || echo "ucx was not chosen over tcp"; '"$RC_LANES"
BRAID_STORE_ADDR=10.78.0.1:29504 BRAID_PLUGIN_DIR=none BRAID_TRANSPORT_PLUGIN="$B/lib/braid/libbraid-net-ucx.so" \
  UCX_LOG_LEVEL=info step "host $H: every collective across two VMs, UCX the only plugin, chosen over tcp" \
  env -u BRAID_TRANSPORT "$MP/mp_collectives"
check='grep -E -q "DEVICE rank=$H error=none kernels=[1-9][0-9]* slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0" /tmp/step.log || echo "rank $H did not run the direct path right"; grep -q "AFTER rank=$H areas=0 imports=0 registered=0 hostLive=0" /tmp/step.log || echo "left over"'
[ -x "$DEV" ] && BRAID_STORE_ADDR=10.78.0.1:29505 BRAID_CUDA_PATH=direct BRAID_TRANSPORT=ucx \
  step "host $H: device buffers across two VMs over UCX (rc_verbs), BRAID_CUDA_PATH=direct" "$DEV"
exit $failed
EOF
}

# Whether a failed job's output (FILES) shows that its emulator, not the job, stalled: a
# guest that did not run for 10 s or more (its heartbeat), or whose emulated NIC stopped
# sending (its kernel's "NETDEV WATCHDOG": the emulator stopped serving the queue, as a
# loaded machine's software emulation once did for two minutes). Either fails the job's
# ranks through no fault of theirs (their timeouts count the guest's lost time); the job is
# then run once more, saying why.
emulator_stalled() {
  local why
  why="$(grep -h -m1 -o -e "NETDEV WATCHDOG" -e "the guest did not run for [0-9]* s" "$@" | head -1)"
  [ -n "$why" ] || return 1
  echo "kernel_vm: the emulator stalled ($why): running the job once more"
}

# Exits unless $BUILD is a build tree; need_verbs: skips unless it has the verbs plugin.
need_build() { [ -x "$BUILD/src/launcher/braidrun" ] || { echo "kernel_vm: no build at $BUILD"; exit 2; }; }
need_verbs() {
  need_build
  [ -n "$(find "$BUILD" -name libbraid-net-ibverbs.so -print -quit)" ] || skip "this build has no verbs transport"
}
# $WORK: the VMs' scratch folder, removed on exit.
make_work() {
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/kernel-vm.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
}

case "$MODE" in
  prepare) prepare ;;
  verbs-hosts)
    need_verbs
    require_vm  # here, not only in the VMs' subshells, whose skip would read as a failure
    make_work
    key="$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
    write_verbs_hosts_job "$BUILD" 0 "$key" > "$WORK/job0.sh"
    write_verbs_hosts_job "$BUILD" 1 "$key" > "$WORK/job1.sh"
    # The two VMs, joined by UDP between their emulators (each frame one datagram); output in
    # $WORK/host*.out. A datagram wire drops a frame the other side is too slow to take, as
    # Ethernet does, and RoCE's transport resends it; a stream socket instead pushed back
    # until the sender's NIC stopped transmitting (the guest's "NETDEV WATCHDOG").
    run_pair() {
      local port=$(( 20000 + RANDOM % 20000 )) pid0 rc0=0 rc1=0
      BRAID_VM_CPUS="${BRAID_VM_CPUS:-1}" run_vm "$WORK/job0.sh" "${BRAID_VM_LIMIT:-600}" host0 \
        -netdev "socket,id=wire,udp=127.0.0.1:$((port + 1)),localaddr=127.0.0.1:$port" \
        -device virtio-net-pci,netdev=wire,mac=52:54:00:4b:00:01 > "$WORK/host0.out" 2>&1 &
      pid0=$!
      BRAID_VM_CPUS="${BRAID_VM_CPUS:-1}" run_vm "$WORK/job1.sh" "${BRAID_VM_LIMIT:-600}" host1 \
        -netdev "socket,id=wire,udp=127.0.0.1:$port,localaddr=127.0.0.1:$((port + 1))" \
        -device virtio-net-pci,netdev=wire,mac=52:54:00:4b:00:02 > "$WORK/host1.out" 2>&1 || rc1=$?
      wait "$pid0" || rc0=$?
      sed 's/^/[host 0] /' "$WORK/host0.out"
      sed 's/^/[host 1] /' "$WORK/host1.out"
      [ "$rc0" = 0 ] && [ "$rc1" = 0 ]
    }
    if ! run_pair; then
      emulator_stalled "$WORK/host0.out" "$WORK/host1.out" || exit 1
      run_pair
    fi
    ;;
  ktls | ktls-bench | verbs | ucx-bench | job)
    make_work
    job="$WORK/job.sh"
    case "$MODE" in
      job) cp "$2" "$job" ;;
      ktls | ktls-bench)
        need_build
        grep -q "^OPENSSL_SSL_LIBRARY:FILEPATH=/" "$BUILD/CMakeCache.txt" 2>/dev/null || skip "this build has no OpenSSL"
        if [ "$MODE" = ktls ]; then write_ktls_job "$BUILD" > "$job"; else write_ktls_bench_job "$BUILD" > "$job"; fi ;;
      verbs)
        need_verbs
        write_verbs_job "$BUILD" > "$job" ;;
      ucx-bench)
        need_verbs  # Soft-RoCE's user space (rdma-core) comes with it
        [ -e "$BUILD/lib/braid/libbraid-net-ucx.so" ] || skip "this build has no UCX plugin"
        write_ucx_bench_job "$BUILD" > "$job" ;;
    esac
    rc=0
    # The verbs job runs braid's suite and UCX's over rxe0: about 250-360 s alone (CTest runs
    # it alone), and over 600 s beside another emulator on 2 cores, every step passing.
    limit=600
    [ "$MODE" = verbs ] && limit=900
    run_vm "$job" "${BRAID_VM_LIMIT:-$limit}" > "$WORK/vm.out" || rc=$?
    cat "$WORK/vm.out"
    if [ "$rc" != 0 ]; then
      emulator_stalled "$WORK/vm.out" || exit "$rc"
      run_vm "$job" "${BRAID_VM_LIMIT:-$limit}"
    fi
    ;;
  *) echo "usage: $0 prepare | ktls BUILD | ktls-bench BUILD | verbs BUILD | verbs-hosts BUILD | ucx-bench BUILD | job FILE" >&2; exit 2 ;;
esac

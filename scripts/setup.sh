#!/usr/bin/env bash
# Installs what braid needs from Debian's packages (when missing), then configures and
# builds into $BUILD_DIR (default ./build). Sourced by run.sh and test.sh; safe to re-run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"

# Required to build and test; the rest are detected and reported by the configure step, and
# OpenMPI + Gloo are the peers the benchmarks compare against (ucx-utils: ucx_perftest, for
# the UCX benchmark).
# libnetfilter-queue-dev and iptables let the multi-host tests add latency between
# emulated hosts on kernels without netem (tests/netns/nfq_delay.c). python3-matplotlib:
# perf/plot.py. openssh-server/-client: braidrun -H across emulated hosts (an sshd each).
# libpmix-dev: PMIx's headers, for the store's address under mpirun across hosts.
# clang + libclang-rt-dev: libFuzzer, for scripts/fuzz.sh. libssl-dev: BRAID_TLS.
# etcd-server: the tests start their own etcd for BRAID_STORE=etcd://; openssl (the command)
# makes their certificates for etcds://.
PACKAGES=(cmake g++ make pkg-config libhwloc-dev hwloc catch2 iproute2
          openmpi-bin libopenmpi-dev libpmix-dev libgloo-dev libucx-dev libibverbs-dev graphviz
          libnetfilter-queue-dev iptables ucx-utils python3-matplotlib openssh-server openssh-client
          clang libclang-rt-dev libssl-dev etcd-server openssl)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

JOBS="${JOBS:-$(nproc)}"
echo "== configuring $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" ${CMAKE_ARGS:-} | grep -E "^-- (  |braid)" || true
echo "== building with $JOBS jobs"
cmake --build "$BUILD_DIR" -j "$JOBS" 2>&1 | grep -E "error|warning: unused|^make.*Error" || true
# The grep above only trims output; fail if the build itself failed.
cmake --build "$BUILD_DIR" -j "$JOBS" >/dev/null

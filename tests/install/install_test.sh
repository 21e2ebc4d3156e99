#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs an outside project
# against it through find_package(braid), and a C program through pkg-config.
set -euo pipefail
BUILD_DIR=$1
SRC_DIR=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD_DIR" --prefix "$WORK/prefix" >/dev/null
for f in lib/libbraid.so include/braid/braid.h include/braid/braid.hpp bin/braidrun bin/allreduce_perf \
         bin/broadcast_perf bin/reduce_perf bin/allgather_perf bin/reduce_scatter_perf bin/alltoall_perf \
         bin/gather_perf bin/scatter_perf bin/sendrecv_perf lib/cmake/braid/braidConfig.cmake lib/pkgconfig/braid.pc; do
  [ -e "$WORK/prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
cmake -S "$SRC_DIR/consumer" -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/consumer" >/dev/null
LD_LIBRARY_PATH="$WORK/prefix/lib" "$WORK/consumer/consumer_c"
LD_LIBRARY_PATH="$WORK/prefix/lib" "$WORK/consumer/consumer_cxx"
export PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig"
cc -std=c99 "$SRC_DIR/consumer/consumer.c" -o "$WORK/pc" $(pkg-config --cflags --libs braid)
LD_LIBRARY_PATH="$WORK/prefix/lib" "$WORK/pc"
# Transport plugins: libbraid itself links neither UCX nor verbs; the UCX plugin (when the
# build has one) lands in <libdir>/braid, where an installed braid finds it with no
# environment at all: two ranks of the installed allreduce_perf run over it.
if ldd "$WORK/prefix/lib/libbraid.so" | grep -E 'libucp|libucs|libuct|libibverbs'; then
  echo "libbraid.so links UCX or verbs"; exit 1
fi
if [ -e "$BUILD_DIR/lib/braid/libbraid-net-ucx.so" ]; then
  [ -e "$WORK/prefix/lib/braid/libbraid-net-ucx.so" ] || { echo "missing after install: lib/braid/libbraid-net-ucx.so"; exit 1; }
  out=$(env -u BRAID_TRANSPORT_PLUGIN -u BRAID_PLUGIN_DIR LD_LIBRARY_PATH="$WORK/prefix/lib" BRAID_TRANSPORT=ucx \
        "$WORK/prefix/bin/braidrun" -np 2 --timeout 60 "$WORK/prefix/bin/allreduce_perf" -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 2>&1) ||
    { echo "$out"; echo "the installed braid could not run over its ucx plugin"; exit 1; }
  grep -q 'Out of bounds values : 0 OK' <<<"$out" || { echo "$out"; exit 1; }
  echo "installed ucx plugin ok"
fi
echo "install ok"

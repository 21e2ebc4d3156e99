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
echo "install ok"

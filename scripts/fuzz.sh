#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder that reads bytes from outside (tests/fuzz), with
# libFuzzer, ASan and UBSan, in a clang build of its own (build-fuzz/):
#   bash scripts/fuzz.sh                    # each target FUZZ_SECONDS (default 10) seconds
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh fuzz_wire   # one target, longer
# Starts from the seed corpus in tests/fuzz/corpus/<target> (never written to: what the run
# finds goes to a scratch folder). Fails if a target crashes, leaks, trips a sanitizer or a
# property; the input that did it is kept as build-fuzz/crash-<target>-*. Prints each
# target's executions and coverage. Needs clang and libclang-rt-dev (scripts/setup.sh).
# FUZZ_PREBUILT=1 with FUZZ_BUILD_DIR: that build is configured already (an ASan build made
# with FUZZ_TARGETS=1 by scripts/test_sanitizers.sh, as CI does, with coverage in the
# decoders alone); only the targets are built there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_EACH="${FUZZ_SECONDS:-10}"
JOBS="${JOBS:-$(nproc)}"
TARGETS=(fuzz_store_protocol fuzz_wire fuzz_unique_id fuzz_topology fuzz_algo_override)
[ "$#" -gt 0 ] && TARGETS=("$@")
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-dev)" >&2; exit 2; }

if [ "${FUZZ_PREBUILT:-0}" = 1 ]; then
  grep -q "^BRAID_ASAN_FUZZ_TARGETS:BOOL=ON" "$DIR/CMakeCache.txt" 2>/dev/null || {
    echo "fuzz.sh: FUZZ_PREBUILT=1 but $DIR is not a build with BRAID_ASAN_FUZZ_TARGETS=ON" >&2; exit 2; }
  echo "== fuzz targets from $DIR (ASan + UBSan, coverage in the decoders)"
else
  echo "== configuring $DIR (clang, libFuzzer + ASan + UBSan)"
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$DIR" -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -gline-tables-only" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" -DBRAID_SANITIZE=fuzzer \
    -DBRAID_ENABLE_CUDA=OFF -DBRAID_BUILD_PERF=OFF "-DBRAID_TEST_DIRS=fuzz" >/dev/null
fi
echo "== building ${TARGETS[*]}"
cmake --build "$DIR" -j "$JOBS" --target "${TARGETS[@]}" >/dev/null

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/tests/fuzz/lsan.supp:print_suppressions=0}"
status=0
for t in "${TARGETS[@]}"; do
  work="$(mktemp -d)"
  log="$DIR/$t.log"
  # -rss_limit_mb: the decoders must stay far below it whatever the input (the topology
  # bounds, the store's frame limit); -max_len covers the largest seed.
  if "$DIR/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=1024 -max_len=200000 -timeout=10 \
       -artifact_prefix="$DIR/crash-$t-" -print_final_stats=1 "$work" "$ROOT/tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
    echo "== $t: ok, $runs executions in ${SECONDS_EACH} s, coverage $cov edges, corpus $(ls "$work" | wc -l) new inputs"
  else
    echo "== $t: FAILED (log below; the input is in $DIR/crash-$t-*)"
    grep -E "ERROR|SUMMARY|property failed|==[0-9]+==|#[0-9]+ " "$log" | head -40 || tail -40 "$log"
    status=1
  fi
  rm -rf "$work"
done
exit $status

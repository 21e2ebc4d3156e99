#!/usr/bin/env bash
# The whole test suite: set up, build, the unit, world and transport tests under ASan and
# UBSan (scripts/test_sanitizers.sh), a short libFuzzer run of every decoder (scripts/fuzz.sh),
# then every test under CTest (unit, world, transport, multiproc, chaos; gpu and python
# where available; those that passed under the sanitizers are not run twice). Ends with
# CTest's summary line and fails if any test, sanitizer run or fuzz target fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
# The PyTorch backend's tests need torch: a pinned, CPU-usable install cached outside the
# clone (quick when already there). Without it they report themselves skipped.
bash "$ROOT/scripts/python_env.sh" || echo "== python environment unavailable: python tests will be skipped"
# cuobjdump and nvdisasm for the CUDA device-code check, from PyPI when the toolkit lacks them.
bash "$ROOT/scripts/cuda_tools.sh" || echo "== CUDA binary tools unavailable: the device-code check will be skipped"
# A virtual machine with what this machine's kernel lacks (kernel TLS, Soft-RoCE), for the
# kernel_vm tests (scripts/kernel_vm.sh): qemu, busybox and kmod from Debian's packages and
# Debian's kernel image, unpacked outside the clone. In the background, beside the builds
# below; waited for before CTest.
vm_log="$BUILD_DIR/kernel-vm-prepare.log"
bash "$ROOT/scripts/kernel_vm.sh" prepare > "$vm_log" 2>&1 &
vm_pid=$!
# Tests at a time in each CTest run below. Three on two cores: many tests spend most of
# their time waiting (for a timeout to expire, a lease to lapse, a stopped rank to be
# noticed), and two at a time left a core idle for a quarter of the run.
export CTEST_JOBS="${CTEST_JOBS:-3}"
# Every decoder of outside bytes under libFuzzer, ASan and UBSan for a few seconds each
# (scripts/fuzz.sh); FUZZ_SECONDS=0 skips it. With the ASan build below and clang, the fuzz
# targets are built in that build, with libFuzzer's coverage in the decoders' sources alone
# (FUZZ_TARGETS=1), and run after its tests: the library is built once under the sanitizers,
# not twice (a fuzz build of its own added about 190 s to CI on 2 cores). Otherwise they get
# a clang build of their own (build-fuzz/) in the background.
fuzz_seconds="${FUZZ_SECONDS:-5}"
fuzz_in_asan=0
if [ "$fuzz_seconds" != 0 ] && [ "${ASAN:-1}" != 0 ] && command -v clang++ >/dev/null; then
  fuzz_in_asan=1
fi
fuzz_status=0
fuzz_pid=""
fuzz_log="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}/fuzz.log"
if [ "$fuzz_seconds" != 0 ] && [ "$fuzz_in_asan" = 0 ]; then
  mkdir -p "$(dirname "$fuzz_log")"
  FUZZ_SECONDS="$fuzz_seconds" bash "$ROOT/scripts/fuzz.sh" > "$fuzz_log" 2>&1 &
  fuzz_pid=$!
fi
# The unit, world and transport tests under ASan and UBSan, in a clang build of their own
# (build-asan/, scripts/test_sanitizers.sh); ASAN=0 skips it. The transport tests (shm, tcp,
# the plugin ABI, UCX with its ranks as threads and as processes) take about 20 s there on
# 2 cores. Left out here, to keep CI's
# time: the planner's 64-host search (arithmetic alone, five minutes under ASan on 2 cores;
# its smaller siblings run the same code), the world tests' largest rank counts (7-9 and
# 6-17 ranks; the same algorithms run at 1-6 and 1-5) and the chain broadcast's sweep of 1-9
# ranks (the broadcast runs at 2-4 in the UCX world test). scripts/test_sanitizers.sh runs them.
asan_status=0
if [ "${ASAN:-1}" != 0 ]; then
  FUZZ_TARGETS="$fuzz_in_asan" SANITIZE=address SANITIZE_DIRS="unit;world;transport" \
    SANITIZE_EXCLUDE="simulator.s best at 64 hosts|with 7-9 ranks|with 6-17 ranks|chain broadcast with 1-9 ranks" \
    bash "$ROOT/scripts/test_sanitizers.sh" || asan_status=$?
fi
if [ "$fuzz_in_asan" = 1 ]; then
  FUZZ_SECONDS="$fuzz_seconds" FUZZ_BUILD_DIR="$ROOT/build-asan" FUZZ_PREBUILT=1 bash "$ROOT/scripts/fuzz.sh" ||
    fuzz_status=$?
elif [ -n "$fuzz_pid" ]; then
  wait "$fuzz_pid" || fuzz_status=$?
  cat "$fuzz_log"
fi
wait "$vm_pid" || { cat "$vm_log"; echo "== no kernel VM: the kernel_vm tests will be skipped"; }
cd "$BUILD_DIR"
echo "== ctest"
# A test that passed under ASan and UBSan above is not run again here: each test runs once,
# the unit, world and transport tests in the sanitizer build, the rest (and those left out
# there or not passed there) in this one. RERUN_ALL=1 runs every test here too.
select=()
if [ "${ASAN:-1}" != 0 ] && [ -z "${RERUN_ALL:-}" ] && ls "$ROOT"/build-asan/junit-*.xml > /dev/null 2>&1; then
  sel_status=0
  python3 "$ROOT/scripts/ctest_select.py" "$BUILD_DIR" "$BUILD_DIR/ctest-select.txt" "$ROOT"/build-asan/junit-*.xml ||
    sel_status=$?
  case "$sel_status" in
    0) select=(-I "$BUILD_DIR/ctest-select.txt") ;;
    3) select=(-R '^$') ;;
    *) echo "== could not tell which tests passed under ASan: running them all" ;;
  esac
fi
ctest_status=0
ctest --output-on-failure -j "$CTEST_JOBS" --timeout 900 "${select[@]}" "$@" || ctest_status=$?
if [ "$fuzz_status" != 0 ]; then
  echo "== fuzzing FAILED (scripts/fuzz.sh output above)"
  exit 1
fi
if [ "$asan_status" != 0 ]; then
  echo "== ASan+UBSan tests FAILED (scripts/test_sanitizers.sh output above)"
  exit 1
fi
exit "$ctest_status"

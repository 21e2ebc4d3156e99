#pragma once
// Test-only controls of the reduce dispatcher, so that one test binary can check every
// instruction-set build the CPU can run. Production code must not call these.

namespace braid::reduce::testing {

// Makes every later call (from any thread) use the kernels for `level` ("scalar", "avx2",
// "avx512"), or the automatic choice again when `level` is nullptr. Returns false and
// changes nothing when `level` is unknown or this CPU cannot run it. A call already running
// finishes on the kernels it started with.
bool setSimdLevelForTest(const char* level);

// The level the dispatcher would choose on this CPU if BRAID_SIMD were `envValue` (nullptr:
// unset). Pure: does not change the active level and logs nothing.
const char* chooseSimdLevelForTest(const char* envValue);

}  // namespace braid::reduce::testing

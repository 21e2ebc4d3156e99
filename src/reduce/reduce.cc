#include "reduce/reduce.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/copy.h"
#include "common/log.h"
#include "reduce/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include "reduce/reduce_testing.h"

// This file is built with baseline flags only: it must run on any CPU, because it is what
// decides whether the AVX kernels may run at all.

namespace braid::reduce {
namespace {

// Below this size a copy's destination is usually read again soon (a slot the peer is about
// to consume, a chunk the next step reduces), so it should land in cache: plain memcpy.
// Above it the buffer outgrows L2 anyway, and streaming stores save the read for ownership.
constexpr size_t kStreamingCopyBytes = size_t{1} << 20;

struct Level {
  const char* name;
  const KernelTable* table;
  bool (*supported)();
};

bool alwaysSupported() { return true; }

#if defined(BRAID_REDUCE_X86)
// F16C (CPUID leaf 1, ECX bit 29): gcc's __builtin_cpu_supports knows it, clang's before
// version 15 does not (the fuzzing build is clang's), so it is asked of CPUID directly.
bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}
// __builtin_cpu_supports also checks (via XGETBV) that the OS saves the wider registers.
bool cpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && cpuHasF16c() && __builtin_cpu_supports("fma");
}
bool cpuHasAvx512() {
  __builtin_cpu_init();
  return cpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
}
#endif

// From least to most capable; the dispatcher takes the last one the CPU supports.
const Level kLevels[] = {
    {"scalar", &scalar::kKernels, alwaysSupported},
#if defined(BRAID_REDUCE_X86)
    {"avx2", &avx2::kKernels, cpuHasAvx2},
    {"avx512", &avx512::kKernels, cpuHasAvx512},
#endif
};
constexpr int kNumLevels = sizeof(kLevels) / sizeof(kLevels[0]);

int findLevel(const char* name) {
  for (int i = 0; i < kNumLevels; ++i) {
    if (std::strcmp(kLevels[i].name, name) == 0) return i;
  }
  return -1;
}

// The most capable level the CPU supports, no higher than the one `cap` names. An unknown
// `cap` is ignored (with a warning when `warn`), so a typo cannot disable the fast paths
// silently: the INFO line at first use names the level actually chosen.
const KernelTable* chooseTable(const char* cap, bool warn) {
  int top = kNumLevels - 1;
  if (cap != nullptr && cap[0] != '\0') {
    const int idx = findLevel(cap);
    if (idx >= 0) {
      top = idx;
    } else if (warn) {
      BRAID_WARN("BRAID_SIMD=%s is not one of scalar, avx2, avx512; ignoring it", cap);
    }
  }
  for (int i = top; i > 0; --i) {
    if (kLevels[i].supported()) return kLevels[i].table;
  }
  return kLevels[0].table;
}

// The automatic choice, made once. BRAID_SIMD is read here rather than through the
// communicator's config table because kernels may run before any communicator exists.
const KernelTable* autoTable() {
  static const KernelTable* const chosen = [] {
    const KernelTable* t = chooseTable(std::getenv("BRAID_SIMD"), /*warn=*/true);
    BRAID_INFO("reduce: using %s kernels", t->name);
    return t;
  }();
  return chosen;
}

// The active table. Null until first use; the tests may swap it. Tables are constant data,
// so publishing a pointer is all a thread needs to see.
std::atomic<const KernelTable*> gActive{nullptr};

const KernelTable* resolveActive() {
  const KernelTable* expected = nullptr;
  const KernelTable* chosen = autoTable();
  // A test may have installed a level meanwhile; keep it.
  if (gActive.compare_exchange_strong(expected, chosen, std::memory_order_acq_rel)) return chosen;
  return expected;
}

// One load and a predictable branch per call; the first call resolves.
inline const KernelTable& kernels() {
  const KernelTable* t = gActive.load(std::memory_order_acquire);
  if (__builtin_expect(t == nullptr, 0)) t = resolveActive();
  return *t;
}

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

void reduce2(DataType dt, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  assert(validDataType(static_cast<int>(dt)) && validReduceOp(static_cast<int>(op)));
  if (count == 0) return;
  kernels().reduce2[static_cast<int>(dt)][static_cast<int>(op)](dst, a, b, count);
}

void reduceN(DataType dt, ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  assert(validDataType(static_cast<int>(dt)) && validReduceOp(static_cast<int>(op)));
  if (count == 0 || nsrc < 1) return;
  if (nsrc == 1) {
    // A bit-exact copy, so even signaling NaNs come through unchanged.
    if (dst != srcs[0]) copyBytes(dst, srcs[0], count * dataTypeSize(dt));
    return;
  }
  kernels().reduceN[static_cast<int>(dt)][static_cast<int>(op)](dst, srcs, nsrc, count);
}

void divideInPlace(DataType dt, void* dst, size_t count, int divisor) {
  assert(validDataType(static_cast<int>(dt)));
  if (count == 0 || divisor <= 1) return;
  kernels().divide[static_cast<int>(dt)](dst, count, divisor);
}

void scale(DataType dt, void* dst, const void* src, double scalar, size_t count) {
  assert(validDataType(static_cast<int>(dt)));
  if (count == 0) return;
  kernels().scale[static_cast<int>(dt)](dst, src, scalar, count);
}

void copyStreaming(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  kernels().copyStreaming(dst, src, bytes);
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (bytes < kStreamingCopyBytes) {
    copyBytes(dst, src, bytes);
    return;
  }
  kernels().copyStreaming(dst, src, bytes);
}

const char* simdLevel() { return kernels().name; }

// The scalar conversions below are written independently of the vector ones in
// kernels_impl.h (branches instead of masks); both match the F16C instructions bit for bit,
// NaN payloads included, and the tests hold them to that.

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {
    // Infinity, or a NaN made quiet with its payload kept.
    return bitsFloat(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u));
  }
  if (exp != 0) return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bitsFloat(sign);
  // Subnormal: mant * 2^-24, normalized for fp32 (always normal there).
  uint32_t e = 113;  // biased fp32 exponent of 2^-14
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bitsFloat(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t floatToHalf(float f) {
  const uint32_t u = floatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {
    // Normal half (|f| >= 2^-14): rebias 127 -> 15, then round the 13 dropped bits to even.
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: ties to even zero
  // Subnormal half: |f| in (2^-25, 2^-14), an fp32 normal. Count in units of 2^-24.
  const uint32_t e = a >> 23;                          // 102..112
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;      // 24-bit significand
  const uint32_t shift = 126 - e;                      // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // may carry into 0x400: min normal
  return static_cast<uint16_t>(sign | q);
}

float bfloat16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t floatToBfloat16(float f) {
  const uint32_t u = floatBits(f);
  // NaN: keep sign and top payload, force quiet so truncation cannot leave an infinity.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// fp8, written with branches and exact double arithmetic rather than the vector code's bit
// tricks; the tests hold both to the same bits.
float fp8e4m3ToFloat(uint8_t x) {
  const uint32_t sign = static_cast<uint32_t>(x & 0x80u) << 24;
  const uint32_t e = (x >> 3) & 0xfu, m = x & 0x7u;
  if (e == 0xf && m == 0x7) return bitsFloat(sign | 0x7fc00000u);  // the one NaN code
  if (e == 0) return bitsFloat(sign | floatBits(static_cast<float>(m) * 0x1p-9f));
  return bitsFloat(sign | ((e + 120u) << 23) | (m << 20));
}

float fp8e5m2ToFloat(uint8_t x) { return halfToFloat(static_cast<uint16_t>(x << 8)); }

namespace {

// Round |f| to the format's grid (kMant mantissa bits, exponent bias kBias) with the FPU's
// round-to-nearest-even, then saturate at the largest finite code.
template <int kMant, int kBias, uint32_t kMaxCode>
uint8_t encodeFp8(float f, uint8_t nanCode) {
  const uint32_t sign = (floatBits(f) >> 24) & 0x80u;
  const double a = std::fabs(static_cast<double>(f));
  if (a != a) return static_cast<uint8_t>(sign | nanCode);
  if (a > 1e6) return static_cast<uint8_t>(sign | kMaxCode);  // infinity and far beyond
  if (a == 0) return static_cast<uint8_t>(sign);
  constexpr int kMinExp = 1 - kBias;
  int exp = 0;
  (void)std::frexp(a, &exp);              // a = fr * 2^exp, fr in [0.5, 1)
  const int e = std::max(exp - 1, kMinExp);  // below the normal range: the subnormal step
  const double q = std::nearbyint(std::ldexp(a, kMant - e));  // in units of the step at e
  uint32_t code;
  if (e == kMinExp && q < (1u << kMant)) {
    code = static_cast<uint32_t>(q);  // subnormal (or zero)
  } else {
    // q in [2^kMant, 2^(kMant+1)]; the top end carries into the next exponent by itself.
    code = (static_cast<uint32_t>(e + kBias) << kMant) + static_cast<uint32_t>(q) - (1u << kMant);
  }
  return static_cast<uint8_t>(sign | std::min(code, kMaxCode));
}

}  // namespace

uint8_t floatToFp8e4m3(float f) { return encodeFp8<3, 7, 0x7eu>(f, 0x7f); }

uint8_t floatToFp8e5m2(float f) {
  // NaN keeps the fp32's top payload bit below the quiet one, as the GPU kernels do.
  return encodeFp8<2, 15, 0x7bu>(f, static_cast<uint8_t>(0x7eu | ((floatBits(f) >> 21) & 1u)));
}

namespace testing {

bool setSimdLevelForTest(const char* level) {
  if (level == nullptr) {
    gActive.store(autoTable(), std::memory_order_release);
    return true;
  }
  const int idx = findLevel(level);
  if (idx < 0 || !kLevels[idx].supported()) return false;
  gActive.store(kLevels[idx].table, std::memory_order_release);
  return true;
}

const char* chooseSimdLevelForTest(const char* envValue) {
  return chooseTable(envValue, /*warn=*/false)->name;
}

}  // namespace testing

}  // namespace braid::reduce

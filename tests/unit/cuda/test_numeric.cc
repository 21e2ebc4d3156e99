// Element conversions of the CUDA kernels (cuda/numeric.cuh, host build): fp16 and bf16
// against src/reduce's conversions bit for bit (every 16-bit code one way, ~17 million
// fp32 patterns covering every exponent the other way); fp8 exhaustively (all 256 codes)
// against the OCP definitions and against known values; and one-rounding-per-step sums of
// fp16/bf16/fp8 against the exactly rounded fp64 sum. Where the CUDA toolkit's headers are
// found, fp16, bf16 and fp8 against the toolkit's own conversions, which the kernels use on
// the device.

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/host_kernels.h"
#include "cuda/numeric.cuh"
#include "reduce/reduce.h"
#include "support/catch.h"
#include "unit/cuda/cuda_test_util.h"
#if defined(BRAID_TEST_TOOLKIT_CONVERSIONS)
#include "unit/cuda/toolkit_conversions.h"
#endif

namespace bc = braid::cuda;
namespace hb = braid::cuda::host_build;
using bc::DeviceDataType;
using namespace braid::cuda::test;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("fp16 and bf16 conversions match src/reduce bit for bit", "[cuda]") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t c = static_cast<uint16_t>(h);
    INFO("code " << h);
    REQUIRE(bits(hb::halfToFloat(c)) == bits(braid::reduce::halfToFloat(c)));
    REQUIRE(bits(hb::bf16ToFloat(c)) == bits(braid::reduce::bfloat16ToFloat(c)));
  }
  // Every 251st fp32 pattern: every exponent, sign and (by the odd stride) low-bit pattern,
  // so every rounding case of both conversions is hit many times.
  uint64_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 251) {
    const float f = fromBits(static_cast<uint32_t>(u));
    if (hb::floatToHalf(f) != braid::reduce::floatToHalf(f) || hb::floatToBf16(f) != braid::reduce::floatToBfloat16(f)) {
      FAIL("fp32 pattern " << u << ": half " << hb::floatToHalf(f) << " vs " << braid::reduce::floatToHalf(f)
                           << ", bf16 " << hb::floatToBf16(f) << " vs " << braid::reduce::floatToBfloat16(f));
    }
    ++checked;
  }
  REQUIRE(checked > 17000000);
}

#if defined(BRAID_TEST_TOOLKIT_CONVERSIONS)
// On the device, fp16, bf16 (from sm_80 on) and fp8 (from sm_89 on) are converted by the
// hardware, whose results the toolkit's headers define in software for the host: this is
// what makes the kernels on a GPU agree with the same kernels under the CPU executor.
// NaNs are left out (the hardware's come out canonical; both sides keep them NaN, which
// test_cuda_gpu checks on a device). Every 31st fp32 pattern by default (every exponent,
// sign and, by the odd stride, every low-bit pattern); BRAID_TEST_EVERY_FLOAT=1 checks all
// 2^32 (about 75 s).
TEST_CASE("fp16, bf16 and fp8 conversions give the CUDA toolkit's bits for every non-NaN value", "[cuda]") {
  namespace tk = braid::cuda::test::toolkit;
  for (uint32_t c = 0; c <= 0xffff; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    const float want = tk::halfToFloat(h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(hb::halfToFloat(h)));
      continue;
    }
    INFO("fp16 code " << c);
    REQUIRE(bits(hb::halfToFloat(h)) == bits(want));
  }
  for (uint32_t c = 0; c <= 0xff; ++c) {
    const uint8_t x = static_cast<uint8_t>(c);
    for (bool e4m3 : {true, false}) {
      const float want = tk::fp8ToFloat(x, e4m3);
      const float got = e4m3 ? hb::fp8e4m3ToFloat(x) : hb::fp8e5m2ToFloat(x);
      INFO((e4m3 ? "e4m3 " : "e5m2 ") << "code " << c);
      REQUIRE(std::isnan(got) == std::isnan(want));
      if (!std::isnan(want)) REQUIRE(bits(got) == bits(want));
    }
  }
  const char* every = std::getenv("BRAID_TEST_EVERY_FLOAT");
  const uint64_t stride = every != nullptr && std::strcmp(every, "1") == 0 ? 1 : 31;
  uint64_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += stride) {
    const float f = fromBits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const uint16_t h = hb::floatToHalf(f);
    const uint16_t b = hb::floatToBf16(f);
    const uint8_t e4 = hb::floatToFp8e4m3(f);
    const uint8_t e5 = hb::floatToFp8e5m2(f);
    if (h != tk::floatToHalf(f) || b != tk::floatToBf16(f) || e4 != tk::floatToFp8(f, true) ||
        e5 != tk::floatToFp8(f, false)) {
      FAIL("fp32 pattern " << u << ": half " << h << " vs " << tk::floatToHalf(f) << ", bf16 " << b << " vs "
                           << tk::floatToBf16(f) << ", e4m3 " << int{e4} << " vs " << int{tk::floatToFp8(f, true)}
                           << ", e5m2 " << int{e5} << " vs " << int{tk::floatToFp8(f, false)});
    }
    ++checked;
  }
  REQUIRE(checked > (stride == 1 ? 4000000000ull : 130000000ull));
}
#endif

TEST_CASE("fp8 decode: all 256 codes of both formats match the OCP definitions", "[cuda]") {
  for (int c = 0; c < 256; ++c) {
    const uint8_t x = static_cast<uint8_t>(c);
    for (bool e4m3 : {true, false}) {
      const double want = fp8RefDecode(x, e4m3);
      const float got = e4m3 ? hb::fp8e4m3ToFloat(x) : hb::fp8e5m2ToFloat(x);
      INFO((e4m3 ? "e4m3 " : "e5m2 ") << "code " << c);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
        REQUIRE(std::signbit(got) == ((c & 0x80) != 0));
      } else {
        REQUIRE(static_cast<double>(got) == want);
        REQUIRE(std::signbit(got) == std::signbit(want));  // -0 stays -0
      }
    }
  }
}

TEST_CASE("fp8 encode: every code round-trips, every midpoint rounds to even", "[cuda]") {
  for (bool e4m3 : {true, false}) {
    auto enc = [&](float f) { return e4m3 ? hb::floatToFp8e4m3(f) : hb::floatToFp8e5m2(f); };
    const int maxCode = e4m3 ? 0x7e : 0x7b;
    for (int c = 0; c < 256; ++c) {
      const uint8_t x = static_cast<uint8_t>(c);
      const double v = fp8RefDecode(x, e4m3);
      INFO((e4m3 ? "e4m3 " : "e5m2 ") << "code " << c);
      if (std::isnan(v)) {
        const uint8_t n = enc(static_cast<float>(v));
        REQUIRE(std::isnan(e4m3 ? hb::fp8e4m3ToFloat(n) : hb::fp8e5m2ToFloat(n)));
        continue;
      }
      if (std::isinf(v)) {
        REQUIRE(enc(static_cast<float>(v)) == ((c & 0x80) | maxCode));  // saturating mode
        continue;
      }
      REQUIRE(enc(static_cast<float>(v)) == x);
      // The midpoint to the next code up (in magnitude), and points just off it.
      if ((c & 0x7f) < maxCode) {
        const double next = fp8RefDecode(static_cast<uint8_t>(c + 1), e4m3);
        const double mid = (v + next) / 2;
        const uint8_t even = (c & 1) == 0 ? x : static_cast<uint8_t>(c + 1);
        REQUIRE(enc(static_cast<float>(mid)) == even);
        REQUIRE(enc(std::nextafter(static_cast<float>(mid), static_cast<float>(v))) == x);
        REQUIRE(enc(std::nextafter(static_cast<float>(mid), static_cast<float>(next))) == c + 1);
        REQUIRE(fp8RefEncode(mid, e4m3) == even);
      }
    }
  }
}

TEST_CASE("fp8 encode agrees with the search-based reference on random and special floats", "[cuda]") {
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f, -0.0f, 1e-30f, -1e-30f, std::numeric_limits<float>::denorm_min(),
                               448.0f, 464.0f, 465.0f, 480.0f, 1e6f, 57344.0f, 61439.0f, 61440.0f, 1e30f,
                               std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::max()};
  for (int i = 0; i < 200000; ++i) {
    // Exponents from 2^-20 to 2^18: underflow, subnormals, normals, saturation.
    const float m = std::uniform_real_distribution<float>(1.0f, 2.0f)(rng);
    const int e = static_cast<int>(rng() % 39) - 20;
    values.push_back((rng() & 1 ? -1.0f : 1.0f) * std::ldexp(m, e));
  }
  for (float f : values) {
    INFO("value " << f);
    REQUIRE(hb::floatToFp8e4m3(f) == fp8RefEncode(f, true));
    REQUIRE(hb::floatToFp8e5m2(f) == fp8RefEncode(f, false));
  }
}

TEST_CASE("fp8 known values", "[cuda]") {
  // E4M3 (OCP E4M3FN): no infinity, NaN S.1111.111, max 448.
  CHECK(hb::floatToFp8e4m3(1.0f) == 0x38);
  CHECK(hb::floatToFp8e4m3(-2.0f) == 0xc0);
  CHECK(hb::floatToFp8e4m3(448.0f) == 0x7e);
  CHECK(hb::floatToFp8e4m3(-1000.0f) == 0xfe);
  CHECK(hb::floatToFp8e4m3(std::ldexp(1.0f, -9)) == 0x01);   // smallest subnormal
  CHECK(hb::floatToFp8e4m3(std::ldexp(1.0f, -10)) == 0x00);  // half of it: ties to even zero
  CHECK(hb::floatToFp8e4m3(std::ldexp(1.0f, -6)) == 0x08);   // smallest normal
  CHECK(hb::floatToFp8e4m3(1.0625f) == 0x38);                // 1 + 1/16: tie, to even (1.0)
  CHECK(hb::floatToFp8e4m3(1.1875f) == 0x3a);                // tie between 1.125 and 1.25: 1.25
  CHECK(hb::floatToFp8e4m3(-0.0f) == 0x80);
  CHECK((hb::floatToFp8e4m3(std::nanf("")) & 0x7f) == 0x7f);
  CHECK(hb::fp8e4m3ToFloat(0x7e) == 448.0f);
  CHECK(hb::fp8e4m3ToFloat(0x01) == std::ldexp(1.0f, -9));
  CHECK(std::isnan(hb::fp8e4m3ToFloat(0xff)));
  // E5M2: IEEE-style, max 57344, infinity 0x7c.
  CHECK(hb::floatToFp8e5m2(1.0f) == 0x3c);
  CHECK(hb::floatToFp8e5m2(57344.0f) == 0x7b);
  CHECK(hb::floatToFp8e5m2(61440.0f) == 0x7b);  // would round to inf: saturates
  CHECK(hb::floatToFp8e5m2(-std::numeric_limits<float>::infinity()) == 0xfb);
  CHECK(hb::floatToFp8e5m2(std::ldexp(1.0f, -16)) == 0x01);
  CHECK(hb::floatToFp8e5m2(std::ldexp(1.0f, -14)) == 0x04);
  CHECK(hb::floatToFp8e5m2(1.125f) == 0x3c);  // tie between 1.0 and 1.25: 1.0
  CHECK(hb::floatToFp8e5m2(1.375f) == 0x3e);  // tie between 1.25 and 1.5: 1.5
  CHECK(std::isinf(hb::fp8e5m2ToFloat(0x7c)));
  CHECK(std::isnan(hb::fp8e5m2ToFloat(0x7d)));
  CHECK(hb::fp8e5m2ToFloat(0x7b) == 57344.0f);
}

namespace {

// Sources of `count` random values whose fp32 sum is exact (few binades), so the kernel's
// one rounding must equal rounding the exact fp64 sum.
void checkSumRoundsOnce(DeviceDataType t, int nsrcs) {
  const size_t count = 1029;
  const size_t es = bc::deviceDataTypeSize(t);
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 31 + nsrcs);
  std::vector<std::vector<unsigned char>> srcs(nsrcs, std::vector<unsigned char>(count * es));
  std::vector<unsigned char> out(count * es);
  auto decode = [&](const unsigned char* p) -> double {
    uint16_t h = 0;
    std::memcpy(&h, p, es);
    switch (t) {
      case DeviceDataType::kFloat16: return braid::reduce::halfToFloat(h);
      case DeviceDataType::kBFloat16: return braid::reduce::bfloat16ToFloat(h);
      case DeviceDataType::kFloat8E4M3: return fp8RefDecode(static_cast<uint8_t>(h), true);
      default: return fp8RefDecode(static_cast<uint8_t>(h), false);
    }
  };
  for (auto& s : srcs) {
    for (size_t i = 0; i < count; ++i) {
      uint64_t b = rng();
      const int spread = static_cast<int>(rng() % 7) - 3;
      switch (t) {
        case DeviceDataType::kFloat16: b = (b & 0x83ff) | static_cast<uint64_t>(15 + spread) << 10; break;
        case DeviceDataType::kBFloat16: b = (b & 0x807f) | static_cast<uint64_t>(127 + spread) << 7; break;
        case DeviceDataType::kFloat8E4M3: b = (b & 0x87) | static_cast<uint64_t>(7 + spread) << 3; break;
        default: b = (b & 0x83) | static_cast<uint64_t>(15 + spread) << 2; break;
      }
      std::memcpy(s.data() + i * es, &b, es);
    }
  }
  bc::ReduceCopyArgs a;
  for (int s = 0; s < nsrcs; ++s) a.srcs[s] = srcs[s].data();
  a.nsrcs = nsrcs;
  a.dsts[0] = out.data();
  a.ndsts = 1;
  a.count = count;
  REQUIRE(bc::sim::runReduceCopy(a, t, braid::ReduceOp::kSum).isOk());
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int s = 0; s < nsrcs; ++s) exact += decode(srcs[s].data() + i * es);
    double want;
    switch (t) {
      case DeviceDataType::kFloat16: want = refRound(exact, 10, -14); break;
      case DeviceDataType::kBFloat16: want = refRound(exact, 7, -126); break;
      case DeviceDataType::kFloat8E4M3: want = fp8RefDecode(fp8RefEncode(exact, true), true); break;
      default: want = fp8RefDecode(fp8RefEncode(exact, false), false); break;
    }
    const double got = decode(out.data() + i * es);
    INFO(bc::deviceDataTypeName(t) << " nsrcs=" << nsrcs << " element " << i << " exact " << exact);
    REQUIRE(got == want);
  }
}

}  // namespace

TEST_CASE("fp16, bf16 and fp8 sums round once, to the nearest of the exact fp64 sum", "[cuda]") {
  for (DeviceDataType t : {DeviceDataType::kFloat16, DeviceDataType::kBFloat16, DeviceDataType::kFloat8E4M3,
                           DeviceDataType::kFloat8E5M2}) {
    for (int n : {2, 3, 8}) checkSumRoundsOnce(t, n);
  }
}

#pragma once
// Helpers shared by the cuda/ tests: typed random data, independent references for the
// 8-bit floats, and comparison that treats any two NaNs as equal (which NaN payload an
// arithmetic result carries is the hardware's choice, and differs between CPU and GPU).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/reduce_copy.h"
#include "support/fp8_reference.h"

namespace braid::cuda::test {

using braid::testing::fp8RefDecode;
using braid::testing::fp8RefEncode;

// All element types the kernels take, braid's and the device-only fp8 ones.
inline std::vector<DeviceDataType> allDeviceTypes() {
  std::vector<DeviceDataType> v;
  for (int t = 0; t < kNumDeviceDataTypes; ++t) v.push_back(static_cast<DeviceDataType>(t));
  return v;
}

inline bool isFp8(DeviceDataType t) {
  return t == DeviceDataType::kFloat8E4M3 || t == DeviceDataType::kFloat8E5M2;
}

// Round a double to nearest even with `mant` explicit mantissa bits and minimum normal
// exponent `minExp` (fp16: 10, -14; bf16: 7, -126), by scaling to an integer and rint().
inline double refRound(double v, int mant, int minExp) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);  // v = f * 2^e, 0.5 <= |f| < 1, so the leading bit is 2^(e-1)
  const int lead = std::max(e - 1, minExp);
  const double ulp = std::ldexp(1.0, lead - mant);
  return std::nearbyint(v / ulp) * ulp;  // default rounding mode: to nearest even
}

// ---- buffers ---------------------------------------------------------------------------

// A buffer whose data starts `offset` bytes past a 64-byte boundary, with guard bytes on
// both sides that must survive every kernel.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xE7;

  GuardedBuffer(size_t bytes, size_t offset)
      : bytes_(bytes), raw_(bytes + offset + 2 * kGuard + 64, kGuardByte) {
    const auto base = reinterpret_cast<uintptr_t>(raw_.data());
    start_ = (64 - base % 64) % 64 + kGuard + offset;
  }
  unsigned char* data() { return raw_.data() + start_; }
  const unsigned char* data() const { return raw_.data() + start_; }
  size_t bytes() const { return bytes_; }
  bool guardsIntact() const {
    for (size_t i = 0; i < raw_.size(); ++i) {
      if ((i < start_ || i >= start_ + bytes_) && raw_[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<unsigned char> raw_;
  size_t start_ = 0;
};

// Random elements: integers take random bits; float types mostly take codes of moderate
// magnitude (so sums and products round rather than overflow), with a sprinkling of
// arbitrary codes: zeros, subnormals, huge values, infinities and NaNs.
inline void fillRandom(unsigned char* p, size_t count, DeviceDataType t, std::mt19937_64& rng) {
  const size_t es = deviceDataTypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    if (isDeviceFloatType(t) && rng() % 16 != 0) {
      // Keep the sign and mantissa, put the exponent within a few binades of 1.
      const int spread = static_cast<int>(rng() % 9) - 4;
      switch (t) {
        case DeviceDataType::kFloat16: bits = (bits & 0x83ff) | static_cast<uint64_t>(15 + spread) << 10; break;
        case DeviceDataType::kBFloat16: bits = (bits & 0x807f) | static_cast<uint64_t>(127 + spread) << 7; break;
        case DeviceDataType::kFloat32: bits = (bits & 0x807fffffull) | static_cast<uint64_t>(127 + spread) << 23; break;
        case DeviceDataType::kFloat64:
          bits = (bits & 0x800fffffffffffffull) | static_cast<uint64_t>(1023 + spread) << 52;
          break;
        case DeviceDataType::kFloat8E4M3: bits = (bits & 0x87) | static_cast<uint64_t>(7 + spread / 2) << 3; break;
        case DeviceDataType::kFloat8E5M2: bits = (bits & 0x83) | static_cast<uint64_t>(15 + spread) << 2; break;
        default: break;
      }
    }
    std::memcpy(p + i * es, &bits, es);  // little-endian: the low bytes
  }
}

inline bool isNanCode(const unsigned char* p, DeviceDataType t) {
  uint64_t b = 0;
  std::memcpy(&b, p, deviceDataTypeSize(t));
  switch (t) {
    case DeviceDataType::kFloat16: return (b & 0x7fff) > 0x7c00;
    case DeviceDataType::kBFloat16: return (b & 0x7fff) > 0x7f80;
    case DeviceDataType::kFloat32: return (b & 0x7fffffffull) > 0x7f800000ull;
    case DeviceDataType::kFloat64: return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    case DeviceDataType::kFloat8E4M3: return (b & 0x7f) == 0x7f;
    case DeviceDataType::kFloat8E5M2: return (b & 0x7f) > 0x7c;
    default: return false;
  }
}

// Index of the first element that differs (both NaN counts as equal), or -1.
inline long firstMismatch(const unsigned char* got, const unsigned char* want, size_t count, DeviceDataType t) {
  const size_t es = deviceDataTypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) == 0) continue;
    if (isNanCode(got + i * es, t) && isNanCode(want + i * es, t)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

inline std::string hexElem(const unsigned char* p, size_t es) {
  static const char* kDigits = "0123456789abcdef";
  std::string s = "0x";
  for (size_t b = es; b-- > 0;) {
    s += kDigits[p[b] >> 4];
    s += kDigits[p[b] & 15];
  }
  return s;
}

}  // namespace braid::cuda::test

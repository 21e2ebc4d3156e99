#pragma once
// References for the OCP 8-bit floats (OFP8 v1.0: E4M3 and E5M2), from the format's
// definition (ldexp and a search over every code, no bit tricks), for the tests of the CPU
// kernels (src/reduce) and of the GPU kernels (cuda/).

#include <cmath>
#include <cstdint>
#include <limits>

namespace braid::testing {

// The value of an fp8 code as a double; NaN for NaN codes, +-inf for E5M2's infinities.
inline double fp8RefDecode(uint8_t x, bool e4m3) {
  const double sign = (x & 0x80) ? -1.0 : 1.0;
  if (e4m3) {
    const int e = (x >> 3) & 15, m = x & 7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    if (e == 0) return sign * std::ldexp(m, -9);
    return sign * std::ldexp(8 + m, e - 7 - 3);
  }
  const int e = (x >> 2) & 31, m = x & 3;
  if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m, -16);
  return sign * std::ldexp(4 + m, e - 15 - 2);
}

// Round `v` to fp8 by searching every finite code for the nearest (ties to the even code),
// saturating beyond the largest finite value (OCP saturating mode); NaN -> a NaN code with
// v's sign (tests compare NaNs by NaN-ness, so which NaN code does not matter).
inline uint8_t fp8RefEncode(double v, bool e4m3) {
  const uint8_t maxCode = e4m3 ? 0x7e : 0x7b;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return static_cast<uint8_t>(sign | 0x7f);
  const double a = std::fabs(v);
  uint8_t best = 0;
  double bestErr = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= maxCode; ++c) {
    const double err = std::fabs(fp8RefDecode(static_cast<uint8_t>(c), e4m3) - a);
    if (err < bestErr || (err == bestErr && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      bestErr = err;
    }
  }
  if (a >= fp8RefDecode(maxCode, e4m3)) best = maxCode;
  return static_cast<uint8_t>(sign | best);
}

}  // namespace braid::testing

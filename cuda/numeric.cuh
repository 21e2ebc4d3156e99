#pragma once
// Element conversions and arithmetic for the reduce-copy kernels, written once for both the
// device (nvcc) and the host (the CPU executor, g++).
//
// fp16 and bf16 give exactly the bits of src/reduce's conversions (which match the x86 F16C
// instructions): round to nearest even, subnormals exact, signaling NaNs made quiet with
// their payload kept. On the host (the CPU executor) that is integer bit manipulation plus
// one float add for the subnormal range. On the device fp16, bf16 (from sm_80 on) and fp8
// (from sm_89 on) round with the hardware conversions instead (cvt.rn.f16.f32,
// cvt.rn.bf16.f32, cvt.rn.satfinite.e4m3x2.f32; ptxas packs two of a kind into one F2FP)
// and fp16 and fp8 widen with it (cvt.f32.f16): the same bits for every value but a NaN,
// which comes out canonical, as GPU arithmetic makes every NaN anyway. test_numeric checks
// the integer code against the toolkit's own definitions of those conversions for every
// fp32 input. bf16 widens by a shift everywhere: that is all the conversion is.

// fp8 follows the OCP 8-bit floating point specification (OFP8, v1.0):
//  - E4M3 ("E4M3FN"): bias 7, no infinities, NaN is S.1111.111, largest finite 448;
//  - E5M2: bias 15, IEEE-style infinities S.11111.00 and NaNs S.11111.{01,10,11}, largest
//    finite 57344.
// Decoding is exact (NaNs become quiet fp32 NaNs with the sign kept). Encoding from fp32
// rounds to nearest even and uses OCP's saturating mode: anything that would round beyond
// the largest finite magnitude, infinities included, becomes +-largest finite; NaN stays NaN
// (E4M3: S.1111111; E5M2: S.11111.1x, the top payload bit of the fp32 NaN kept). These are
// the bits of CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...), so data converted by
// either agrees. Saturation is what low-precision training wants: a reduction that
// overflows keeps a large finite gradient instead of poisoning the step with inf/NaN.
//
// Float arithmetic goes through addRn/mulRn/divRn: on the device the _rn intrinsics, which
// the compiler never contracts into an FMA, so a pre-multiplied sum rounds the product
// before adding whatever -fmad says, as the CPU kernels (built with -ffp-contract=off) do.

#include <cstdint>
#include <cstring>

#include "cuda/cuda_compat.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

// Hardware conversions for fp16 on every device build, for bf16 and fp8 where the ISA has
// them.
#if defined(__CUDA_ARCH__)
#define BRAID_CUDA_HW_FP16 1
#if __CUDA_ARCH__ >= 800
#define BRAID_CUDA_HW_BF16 1
#endif
#if __CUDA_ARCH__ >= 890
#define BRAID_CUDA_HW_FP8 1
#endif
#endif

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

BRAID_HD uint32_t floatBits(float f) {
#if BRAID_CUDA_DEVICE_BUILD && defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

BRAID_HD float bitsFloat(uint32_t u) {
#if BRAID_CUDA_DEVICE_BUILD && defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

BRAID_HD float addRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
BRAID_HD double addRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
BRAID_HD float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BRAID_HD double mulRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
BRAID_HD float divRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
BRAID_HD double divRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// ---- fp16 -----------------------------------------------------------------------------

BRAID_HD float halfToFloat(uint16_t h) {
#if defined(BRAID_CUDA_HW_FP16)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  uint32_t r;
  if (em >= 0x7c00u) {
    // Exponent 31 -> 255; a NaN keeps its payload and becomes quiet.
    r = ((em << 13) + 0x70000000u) | (em > 0x7c00u ? 0x00400000u : 0u);
  } else if (em < 0x400u) {
    // Zero or subnormal: em * 2^-24, exact in fp32 and never an fp32 subnormal.
    r = floatBits(mulRn(static_cast<float>(em), 0x1p-24f));
  } else {
    r = (em << 13) + 0x38000000u;  // rebias 15 -> 127
  }
  return bitsFloat(r | sign);
#endif
}

BRAID_HD uint16_t floatToHalf(float f) {
#if defined(BRAID_CUDA_HW_FP16)
  return __half_as_ushort(__float2half_rn(f));
#else
  const uint32_t u = floatBits(f);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u ^ sign;
  uint32_t r;
  if (a > 0x7f800000u) {
    r = ((a >> 13) & 0x3ffu) | 0x7e00u;  // NaN: top payload kept, made quiet
  } else if (a >= 0x47800000u) {
    r = 0x7c00u;  // >= 65536; [65520, 65536) carries into infinity in the normal branch
  } else if (a < 0x38800000u) {
    // Below 2^-14: adding 0.5f, whose ulp is 2^-24 (the fp16 subnormal step), lets the FPU
    // round to nearest even; the low bits are then the result in units of 2^-24.
    r = floatBits(addRn(bitsFloat(a), 0.5f)) - 0x3f000000u;
  } else {
    // Rebias (0xc8000000 == -(112 << 23)) and round the 13 dropped bits to even.
    r = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  }
  return static_cast<uint16_t>(r | (sign >> 16));
#endif
}

// ---- bf16 -----------------------------------------------------------------------------

BRAID_HD float bf16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

BRAID_HD uint16_t floatToBf16(float f) {
#if defined(BRAID_CUDA_HW_BF16)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  const uint32_t u = floatBits(f);
  // A NaN is kept NaN (and quiet) instead of rounded, which could carry it into infinity.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}

// ---- fp8 ------------------------------------------------------------------------------

BRAID_HD float fp8e4m3ToFloat(uint8_t x) {
#if defined(BRAID_CUDA_HW_FP8)
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3)));
#else
  const uint32_t sign = static_cast<uint32_t>(x & 0x80u) << 24;
  const uint32_t em = x & 0x7fu;
  if (em == 0x7fu) return bitsFloat(sign | 0x7fc00000u);
  // Subnormals (exponent field 0) are em * 2^-9; normals rebias 7 -> 127 (120 << 23).
  if (em < 0x08u) return bitsFloat(sign | floatBits(mulRn(static_cast<float>(em), 0x1p-9f)));
  return bitsFloat(sign | ((em << 20) + (120u << 23)));
#endif
}

// E5M2 is the top byte of an fp16 with the same value.
BRAID_HD float fp8e5m2ToFloat(uint8_t x) { return halfToFloat(static_cast<uint16_t>(x << 8)); }

// Shared encoder. kMant: mantissa bits; kBias: exponent bias; kMaxCode: largest finite
// magnitude code; kMinNormal: fp32 bits of the smallest normal; kMagic: a float whose ulp
// is the subnormal step, so adding it rounds a subnormal to nearest even in the FPU.
template <int kMant, int kBias, uint32_t kMaxCode, uint32_t kMinNormal>
BRAID_HD uint8_t floatToFp8(float f, float magic) {
  const uint32_t u = floatBits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  uint32_t r;
  if (a > 0x7f800000u) {
    // NaN. E4M3 has one NaN code; E5M2 keeps the top payload bit (quiet NaNs stay quiet).
    r = kMant == 3 ? 0x7fu : (0x7eu | ((a >> 21) & 3u));
  } else if (a < kMinNormal) {
    r = floatBits(addRn(bitsFloat(a), magic)) - floatBits(magic);
  } else {
    constexpr int kDrop = 23 - kMant;
    const uint32_t rebased = a - (static_cast<uint32_t>(127 - kBias) << 23);
    r = (rebased + ((1u << (kDrop - 1)) - 1u) + ((rebased >> kDrop) & 1u)) >> kDrop;
    // Beyond the largest finite value (including infinity, and E5M2's halfway case that
    // rounds to infinity): saturate.
    if (r > kMaxCode) r = kMaxCode;
  }
  return static_cast<uint8_t>(r | sign);
}

BRAID_HD uint8_t floatToFp8e4m3(float f) {
#if defined(BRAID_CUDA_HW_FP8)
  return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
#else
  return floatToFp8<3, 7, 0x7eu, 0x3c800000u>(f, 16384.0f);  // min normal 2^-6; step 2^-9
#endif
}
BRAID_HD uint8_t floatToFp8e5m2(float f) {
#if defined(BRAID_CUDA_HW_FP8)
  return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
#else
  return floatToFp8<2, 15, 0x7bu, 0x38800000u>(f, 128.0f);  // min normal 2^-14; step 2^-16
#endif
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

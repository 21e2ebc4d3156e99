#pragma once
// The CUDA toolkit's definitions of the fp16, bf16 and fp8 conversions the kernels use on the
// device (see toolkit_conversions.cc). Built only where the toolkit's headers are found
// (BRAID_TEST_TOOLKIT_CONVERSIONS).

#include <cstdint>

namespace braid::cuda::test::toolkit {

uint16_t floatToHalf(float f);              // __float2half_rn
float halfToFloat(uint16_t h);              // __half2float
uint16_t floatToBf16(float f);              // __float2bfloat16_rn
uint8_t floatToFp8(float f, bool e4m3);     // __nv_cvt_float_to_fp8(f, __NV_SATFINITE, ...)
float fp8ToFloat(uint8_t x, bool e4m3);     // __nv_cvt_fp8_to_halfraw, then __half2float

}  // namespace braid::cuda::test::toolkit

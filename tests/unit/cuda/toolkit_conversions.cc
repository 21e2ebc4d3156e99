// The CUDA toolkit's own fp16, bf16 and fp8 conversions (cuda_fp16.h, cuda_bf16.h,
// cuda_fp8.h), built for the host, where the headers define them in software. On the
// device the kernels use the hardware conversions behind these functions
// (cuda/numeric.cuh); test_numeric checks that braid's host conversions give the same bits,
// so the kernels run by the CPU executor and the kernels on a GPU agree for every value but
// NaNs.
//
// A file of its own: the toolkit's headers and cuda/cuda_compat.h both define __device__
// and friends, so they cannot share a translation unit.

#include "unit/cuda/toolkit_conversions.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace braid::cuda::test::toolkit {

uint16_t floatToHalf(float f) { return __half_raw(__float2half_rn(f)).x; }

uint16_t floatToBf16(float f) { return __nv_bfloat16_raw(__float2bfloat16_rn(f)).x; }

float halfToFloat(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}

uint8_t floatToFp8(float f, bool e4m3) {
  return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, e4m3 ? __NV_E4M3 : __NV_E5M2);
}

float fp8ToFloat(uint8_t x, bool e4m3) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, e4m3 ? __NV_E4M3 : __NV_E5M2)));
}

}  // namespace braid::cuda::test::toolkit

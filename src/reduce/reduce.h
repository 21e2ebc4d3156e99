#pragma once
// CPU reduction and copy kernels for every DataType x ReduceOp, dispatched at run time to
// the best instruction set the CPU has (AVX-512, AVX2+F16C, or portable scalar code).
//
// Contracts shared by every function here:
//  - `count` is in elements; buffers need no particular alignment.
//  - `dst` may alias any source exactly (in-place), but must not partially overlap one.
//  - float16, bfloat16 and fp8 are widened to float32, combined, and rounded back once
//    (round-to-nearest-even; fp8 saturates at its largest finite value), so a multi-source
//    reduce rounds once per call, not once per source.
//  - kAvg is treated as kSum here; the caller divides once at the end (see divideInPlace).
//  - Integer sum and prod wrap around (two's complement), for signed types too.
//  - Float max/min are `a > b ? a : b` / `a < b ? a : b` (what maxps/minps do), folded left
//    over the sources: a NaN in a later source wins over an earlier value, a NaN in an
//    earlier one is replaced by the later value. NaN results are quiet NaNs.
//  - kBand/kBor/kBxor combine the bits, for integer types (signedness is irrelevant). The
//    API rejects them for float types; should one get here anyway, the float's bits are
//    combined as an unsigned integer of the same width (in bounds, no crash, no NaN rules).
//  - Thread-safe and non-blocking; no allocation.

#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace braid::reduce {

// dst[i] = a[i] (op) b[i].
void reduce2(DataType dt, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... (op) srcs[nsrc-1][i]; nsrc >= 1.
// With nsrc == 1 this is a bit-exact copy (nothing is widened or rounded).
void reduceN(DataType dt, ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count);

// dst[i] = dst[i] / divisor, for kAvg's final step. Integer types divide with truncation
// toward zero; float types divide in their own precision (fp16/bf16 via float32, rounded once).
// `divisor` is a rank count, >= 1; with 1 (or an invalid value <= 0) `dst` is left unchanged.
void divideInPlace(DataType dt, void* dst, size_t count, int divisor);

// dst[i] = src[i] * scalar, for pre-multiplied sums (each rank scales its input, then sums;
// NCCL's ncclRedOpCreatePreMulSum). `dst` may equal `src`. Floats multiply in their own
// precision: float64 by `scalar`, float32 by (float)scalar, fp16/bf16 widened to float32,
// multiplied by (float)scalar and rounded once. Integer types multiply by `scalar` converted
// to the element type: truncated toward zero, as a C conversion; beyond the type's range
// it saturates to the type's min or max, and NaN converts to 0 (where C's conversion would
// be undefined). The integer product wraps around like kProd, so 2.9 scales by 2 and -1.5
// scales a uint8 by 0.
void scale(DataType dt, void* dst, const void* src, double scalar, size_t count);

// memcpy-like copy tuned for large buffers (non-temporal stores above a threshold).
// Buffers must not overlap unless identical (then nothing is copied). The streaming stores
// are fenced before returning, so the data is visible to whoever sees the caller's next store.
void copy(void* dst, const void* src, size_t bytes);

// Copy with non-temporal (streaming) stores whatever the size: for writing results that will
// not be read again soon, such as the output of a collective larger than the caches. Saves
// the read-for-ownership of every destination line. Same overlap rule as copy().
void copyStreaming(void* dst, const void* src, size_t bytes);

// Name of the instruction set the dispatcher chose: "avx512", "avx2" or "scalar".
// BRAID_SIMD=scalar|avx2|avx512 caps the choice (useful for tests and comparisons); it is
// read once, at the first call of any function here.
const char* simdLevel();

// Scalar conversions, exposed for tests and for other layers. They give the same bits as
// the F16C instructions, which quiet signaling NaNs and keep the rest of a NaN's payload.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);        // round to nearest even, handles inf/nan/subnormals
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);    // round to nearest even, NaN stays NaN (made quiet)
// OCP fp8: decoding is exact (NaNs become quiet fp32 NaNs with the sign kept); encoding
// rounds to nearest even and saturates (beyond the largest finite value, infinity included:
// that value; NaN stays NaN). The bits of CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)
// and of braid's GPU kernels (cuda/numeric.cuh).
float fp8e4m3ToFloat(uint8_t x);
float fp8e5m2ToFloat(uint8_t x);
uint8_t floatToFp8e4m3(float f);
uint8_t floatToFp8e5m2(float f);

}  // namespace braid::reduce

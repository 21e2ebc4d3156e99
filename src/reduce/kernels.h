#pragma once
// Private to src/reduce: the function-pointer table each instruction-set build of the kernels
// exports, and the dispatcher (reduce.cc) picks from.
//
// This header is included by the baseline translation units as well as by the AVX ones, so
// it declares only types and data: an inline function defined here and compiled in an AVX
// translation unit could be the copy the linker keeps for everyone, and then run on a CPU
// without AVX before dispatch had a say.

#include <cstddef>

#include "common/types.h"

namespace braid::reduce {

// dst[i] = a[i] (op) b[i]; the reduce2() contract.
using Reduce2Fn = void (*)(void* dst, const void* a, const void* b, size_t count);
// dst[i] = srcs[0][i] (op) ... (op) srcs[nsrc-1][i] with nsrc >= 2; the reduceN() contract.
using ReduceNFn = void (*)(void* dst, const void* const* srcs, int nsrc, size_t count);
// dst[i] /= divisor with divisor >= 1; the divideInPlace() contract.
using DivideFn = void (*)(void* dst, size_t count, int divisor);
// dst[i] = src[i] * scalar, dst == src allowed; the scale() contract.
using ScaleFn = void (*)(void* dst, const void* src, double scalar, size_t count);
// memcpy with non-temporal stores for the bulk; non-overlapping buffers; fenced on return.
using CopyFn = void (*)(void* dst, const void* src, size_t bytes);

// One complete set of kernels built for one instruction set. Every entry is non-null;
// kAvg's column holds the kSum kernels. The kBand/kBor/kBxor entries of the float rows
// combine the bits as unsigned integers of the element's width: the API never sends float
// bitwise ops here, but a stray call must stay in bounds, never jump through null. Constant-initialized, so no code of an AVX
// translation unit runs at program start.
struct KernelTable {
  const char* name;  // "scalar", "avx2" or "avx512", as simdLevel() reports it
  Reduce2Fn reduce2[kNumDataTypes][kNumReduceOps];
  ReduceNFn reduceN[kNumDataTypes][kNumReduceOps];
  DivideFn divide[kNumDataTypes];
  ScaleFn scale[kNumDataTypes];
  CopyFn copyStreaming;
};

// Baseline instruction set only (SSE2 on x86-64); runs everywhere.
namespace scalar {
extern const KernelTable kKernels;
}

#if defined(BRAID_REDUCE_X86)
// AVX2 + F16C + FMA (Haswell, Zen 1 and later).
namespace avx2 {
extern const KernelTable kKernels;
}
// AVX-512 F/BW/VL/DQ + F16C (Skylake-SP, Zen 4 and later).
namespace avx512 {
extern const KernelTable kKernels;
}
#endif

}  // namespace braid::reduce

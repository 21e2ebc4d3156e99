#pragma once
// The fused reduce-copy kernel, written once for nvcc and for the CPU executor.
//
// One pass reads every source once and writes every destination once:
//   dsts[d][i] = post(pre(srcs[0][i]) op srcs[1][i] op ... op srcs[nsrcs-1][i])
// which is what makes a ring step memory-bound rather than copy-bound (the Schedule's
// recvReduceSend / recvReduceCopySend primitives). Semantics are in reduce_copy.h.
//
// Data layout: when every pointer has the same address modulo 16 and that offset is a
// whole number of elements, a few head elements bring all of them to a 16-byte boundary,
// the body runs in 16-byte packs and the tail element by element. Each warp takes chunks
// of 32 x kUnroll packs, lane l loading packs l, l+32, ...: each load instruction is one
// coalesced 512-byte access, and kUnroll loads per source are in flight per thread. When
// the pointers disagree modulo 16 the whole range runs element by element (natural-width
// accesses when every pointer is element-aligned, byte accesses otherwise) - correct for
// any pointers, fast for the aligned ones a transport hands out.
//
// Arguments are staged in shared memory by thread 0, so the per-source pointer reads in
// the loops are shared-memory loads rather than indexed kernel-parameter accesses (which
// nvcc may copy to local memory).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/cuda_compat.h"
#include "cuda/memory_ops.cuh"
#include "cuda/numeric.cuh"
#include "cuda/reduce_copy.h"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

// ---- element traits ---------------------------------------------------------------------
// S: unsigned storage of one element; C: compute type; widen/narrow between them (narrow
// is the one rounding of a step); mul/div/add for the pre- and post-operations and kSum.
// kUnroll: packs per thread per iteration, smaller where one pack widens to many registers.

// Integers compute in their own type; sum and prod go through the unsigned twin so they wrap.
// Types narrower than unsigned int compute in unsigned int (C++ would promote them to int,
// and 65535 * 65535 overflows int), then wrap to their width.
template <class T, class U>
struct IntTraits {
  using S = U;
  using C = T;
  using Mult = T;
  using P = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
  static constexpr int kUnroll = sizeof(T) >= 4 ? 4 : 2;
  __device__ static C widen(S s) { return static_cast<C>(s); }
  __device__ static S narrow(C c) { return static_cast<S>(c); }
  __device__ static C add(C a, C b) {
    return static_cast<C>(static_cast<U>(static_cast<P>(static_cast<U>(a)) + static_cast<P>(static_cast<U>(b))));
  }
  __device__ static C mul(C a, C b) {
    return static_cast<C>(static_cast<U>(static_cast<P>(static_cast<U>(a)) * static_cast<P>(static_cast<U>(b))));
  }
  // The pre-multiplier as T, as reduce::scale converts it: truncated toward zero,
  // saturated beyond T's range, NaN as 0.
  __device__ static Mult makeMult(double s) {
    constexpr bool kSigned = T(-1) < T(0);
    constexpr T kMax = kSigned ? static_cast<T>(static_cast<U>(~U(0)) >> 1) : static_cast<T>(~U(0));
    constexpr T kMin = kSigned ? static_cast<T>(-kMax - 1) : T(0);
    if (!(s == s)) return 0;
    const double limit = static_cast<double>(kMax / 2 + 1) * 2.0;  // 2^bits or 2^(bits-1), exact
    if (s >= limit) return kMax;
    if (s <= static_cast<double>(kMin)) return kMin;
    return static_cast<T>(s);
  }
  // Truncation toward zero in 64 bits of T's signedness, so the divisor is never narrowed.
  __device__ static S divide(S s, int d) {
    using W = std::conditional_t<(T(-1) < T(0)), int64_t, uint64_t>;
    return static_cast<S>(static_cast<T>(static_cast<W>(static_cast<T>(s)) / static_cast<W>(d)));
  }
  __device__ static S divideValue(C v, int d) { return divide(narrow(v), d); }
};

// Floats that compute in their own precision.
template <class F, class U>
struct NativeFloatTraits {
  using S = U;
  using C = F;
  using Mult = F;
  static constexpr int kUnroll = 4;
  __device__ static C widen(S s) {
    if constexpr (sizeof(F) == 4) {
      return bitsFloat(s);
    } else {
      F f;
#if defined(__CUDA_ARCH__)
      f = __longlong_as_double(static_cast<long long>(s));
#else
      std::memcpy(&f, &s, sizeof(f));
#endif
      return f;
    }
  }
  __device__ static S narrow(C c) {
    if constexpr (sizeof(F) == 4) {
      return floatBits(c);
    } else {
#if defined(__CUDA_ARCH__)
      return static_cast<S>(__double_as_longlong(c));
#else
      S s;
      std::memcpy(&s, &c, sizeof(s));
      return s;
#endif
    }
  }
  __device__ static C add(C a, C b) { return addRn(a, b); }
  __device__ static C mul(C a, C b) { return mulRn(a, b); }
  __device__ static Mult makeMult(double s) { return static_cast<F>(s); }
  __device__ static S divide(S s, int d) { return narrow(divRn(widen(s), static_cast<F>(d))); }
  __device__ static S divideValue(C v, int d) { return narrow(divRn(v, static_cast<F>(d))); }
};

// 16- and 8-bit floats compute in fp32 and round once, when narrowed.
template <class U, float (*kToFloat)(U), U (*kFromFloat)(float), int kUnrollPacks>
struct WideningTraits {
  using S = U;
  using C = float;
  using Mult = float;
  static constexpr int kUnroll = kUnrollPacks;
  __device__ static C widen(S s) { return kToFloat(s); }
  __device__ static S narrow(C c) { return kFromFloat(c); }
  __device__ static C add(C a, C b) { return addRn(a, b); }
  __device__ static C mul(C a, C b) { return mulRn(a, b); }
  __device__ static Mult makeMult(double s) { return static_cast<float>(s); }
  __device__ static S divide(S s, int d) { return narrow(divRn(widen(s), static_cast<float>(d))); }
  __device__ static S divideValue(C v, int d) { return narrow(divRn(v, static_cast<float>(d))); }
};

using Int8Traits = IntTraits<int8_t, uint8_t>;
using Uint8Traits = IntTraits<uint8_t, uint8_t>;
using Int16Traits = IntTraits<int16_t, uint16_t>;
using Uint16Traits = IntTraits<uint16_t, uint16_t>;
using Int32Traits = IntTraits<int32_t, uint32_t>;
using Uint32Traits = IntTraits<uint32_t, uint32_t>;
using Int64Traits = IntTraits<int64_t, uint64_t>;
using Uint64Traits = IntTraits<uint64_t, uint64_t>;
using Float32Traits = NativeFloatTraits<float, uint32_t>;
using Float64Traits = NativeFloatTraits<double, uint64_t>;
using Float16Traits = WideningTraits<uint16_t, halfToFloat, floatToHalf, 4>;
using BFloat16Traits = WideningTraits<uint16_t, bf16ToFloat, floatToBf16, 4>;
using Fp8E4M3Traits = WideningTraits<uint8_t, fp8e4m3ToFloat, floatToFp8e4m3, 2>;
using Fp8E5M2Traits = WideningTraits<uint8_t, fp8e5m2ToFloat, floatToFp8e5m2, 2>;

// Raw bytes, for copies and bitwise ops: packs combine as whole 32-bit words, since those
// ops act on each bit alike whatever the element type.
struct BytesTraits {
  using S = uint8_t;
  using C = uint8_t;
  using Mult = uint8_t;
  static constexpr int kUnroll = 4;
  __device__ static C widen(S s) { return s; }
  __device__ static S narrow(C c) { return c; }
  __device__ static C add(C a, C) { return a; }  // never called: planReduceCopy sends no arithmetic here
  __device__ static C mul(C a, C) { return a; }
  __device__ static Mult makeMult(double) { return 1; }
  __device__ static S divide(S s, int) { return s; }
  __device__ static S divideValue(C v, int) { return v; }
};

// ---- operators --------------------------------------------------------------------------
// `apply` combines two compute values; kWordwise ops may also combine raw 32-bit words.

struct SumOp {
  static constexpr bool kWordwise = false;
  template <class Tr, class C>
  __device__ static C apply(C a, C b) { return Tr::add(a, b); }
};
struct ProdOp {
  static constexpr bool kWordwise = false;
  template <class Tr, class C>
  __device__ static C apply(C a, C b) { return Tr::mul(a, b); }
};
// The CPU kernels' (and maxps/minps') comparisons: with a NaN the later operand wins.
struct MaxOp {
  static constexpr bool kWordwise = false;
  template <class Tr, class C>
  __device__ static C apply(C a, C b) { return a > b ? a : b; }
};
struct MinOp {
  static constexpr bool kWordwise = false;
  template <class Tr, class C>
  __device__ static C apply(C a, C b) { return a < b ? a : b; }
};
struct AndOp {
  static constexpr bool kWordwise = true;
  template <class Tr, class C>
  __device__ static C apply(C a, C b) { return static_cast<C>(a & b); }
};
struct OrOp {
  static constexpr bool kWordwise = true;
  template <class Tr, class C>
  __device__ static C apply(C a, C b) { return static_cast<C>(a | b); }
};
struct XorOp {
  static constexpr bool kWordwise = true;
  template <class Tr, class C>
  __device__ static C apply(C a, C b) { return static_cast<C>(a ^ b); }
};
// One source only: the value passes through untouched (the byte kernel's copy).
struct CopyOp {
  static constexpr bool kWordwise = true;
  template <class Tr, class C>
  __device__ static C apply(C a, C) { return a; }
};

// ---- per-element and per-pack steps -----------------------------------------------------

// What every thread needs, read once from shared memory.
template <class Tr>
struct Ctx {
  const ReduceCopyArgs* a;
  typename Tr::Mult mult;
};

// The first source's value, pre-multiplied (and rounded to the element type) when asked.
template <class Tr>
__device__ __forceinline__ typename Tr::C firstValue(const Ctx<Tr>& c, typename Tr::S s) {
  if (c.a->preMul) s = Tr::narrow(Tr::mul(Tr::widen(s), c.mult));
  return Tr::widen(s);
}

// The stored value: rounded once, then divided (rounded again) for an average's last step.
// One source without a pre-multiply is the element's own value, divided as it is: as
// reduce::reduceN copies a single source before reduce::divideInPlace (rounding first would
// turn an E5M2 infinity into the largest finite value before dividing it).
template <class Tr>
__device__ __forceinline__ typename Tr::S finalValue(const Ctx<Tr>& c, typename Tr::C v) {
  if (c.a->divisor > 1 && c.a->nsrcs == 1 && !c.a->preMul) return Tr::divideValue(v, c.a->divisor);
  typename Tr::S s = Tr::narrow(v);
  if (c.a->divisor > 1) s = Tr::divide(s, c.a->divisor);
  return s;
}

// Elements [begin, end), one per thread in turn.
template <class Tr, class Op, bool kBytewise>
__device__ __forceinline__ void reduceElements(const Ctx<Tr>& c, size_t begin, size_t end, size_t tid,
                                               size_t nthreads) {
  using S = typename Tr::S;
  const ReduceCopyArgs& a = *c.a;
  for (size_t i = begin + tid; i < end; i += nthreads) {
    const size_t off = i * sizeof(S);
    typename Tr::C acc = firstValue(c, loadElem<S, kBytewise>(static_cast<const char*>(a.srcs[0]) + off));
    for (int s = 1; s < a.nsrcs; ++s) {
      acc = Op::template apply<Tr>(acc, Tr::widen(loadElem<S, kBytewise>(static_cast<const char*>(a.srcs[s]) + off)));
    }
    const S out = finalValue(c, acc);
    for (int d = 0; d < a.ndsts; ++d) storeElem<S, kBytewise>(static_cast<char*>(a.dsts[d]) + off, out);
  }
}

// kU packs per thread: pack u at byte `off + u * stride` of every buffer. All kU loads of a
// source are issued before any is used.
template <class Tr, class Op, int kU>
__device__ __forceinline__ void reducePacks(const Ctx<Tr>& c, size_t off, size_t stride) {
  using S = typename Tr::S;
  using C = typename Tr::C;
  constexpr int kE = static_cast<int>(kPackBytes / sizeof(S));
  const ReduceCopyArgs& a = *c.a;
  Pack raw[kU];
  Pack out[kU];
BRAID_UNROLL
  for (int u = 0; u < kU; ++u) raw[u] = loadPack(static_cast<const char*>(a.srcs[0]) + off + u * stride);

  if constexpr (Op::kWordwise) {
    // Bitwise ops and copies: whole words, no unpacking (never pre- or post-processed).
BRAID_UNROLL
    for (int u = 0; u < kU; ++u) out[u] = raw[u];
    for (int s = 1; s < a.nsrcs; ++s) {
BRAID_UNROLL
      for (int u = 0; u < kU; ++u) raw[u] = loadPack(static_cast<const char*>(a.srcs[s]) + off + u * stride);
BRAID_UNROLL
      for (int u = 0; u < kU; ++u) {
BRAID_UNROLL
        for (int w = 0; w < 4; ++w) out[u].w[w] = Op::template apply<Tr>(out[u].w[w], raw[u].w[w]);
      }
    }
  } else {
    C acc[kU][kE];
BRAID_UNROLL
    for (int u = 0; u < kU; ++u) {
BRAID_UNROLL
      for (int e = 0; e < kE; ++e) acc[u][e] = firstValue(c, packElem<S>(raw[u], e));
    }
    for (int s = 1; s < a.nsrcs; ++s) {
BRAID_UNROLL
      for (int u = 0; u < kU; ++u) raw[u] = loadPack(static_cast<const char*>(a.srcs[s]) + off + u * stride);
BRAID_UNROLL
      for (int u = 0; u < kU; ++u) {
BRAID_UNROLL
        for (int e = 0; e < kE; ++e) acc[u][e] = Op::template apply<Tr>(acc[u][e], Tr::widen(packElem<S>(raw[u], e)));
      }
    }
BRAID_UNROLL
    for (int u = 0; u < kU; ++u) {
      out[u] = Pack{};
BRAID_UNROLL
      for (int e = 0; e < kE; ++e) setPackElem<S>(out[u], e, finalValue(c, acc[u][e]));
    }
  }
  for (int d = 0; d < a.ndsts; ++d) {
BRAID_UNROLL
    for (int u = 0; u < kU; ++u) storePack(static_cast<char*>(a.dsts[d]) + off + u * stride, out[u]);
  }
}

// `npacks` packs starting at byte `base` of every buffer.
template <class Tr, class Op>
__device__ __forceinline__ void reducePackRange(const Ctx<Tr>& c, size_t base, size_t npacks, size_t tid,
                                                size_t nthreads) {
  constexpr size_t kWarp = 32;
  constexpr int kU = Tr::kUnroll;
  constexpr size_t kChunk = kWarp * kU;  // packs per warp iteration
  const size_t warp = tid / kWarp;
  const size_t lane = tid % kWarp;
  const size_t nwarps = nthreads / kWarp;  // a partial last warp only helps with the rest
  const size_t chunks = npacks / kChunk;
  if (warp < nwarps) {
    for (size_t ch = warp; ch < chunks; ch += nwarps) {
      reducePacks<Tr, Op, kU>(c, base + (ch * kChunk + lane) * kPackBytes, kWarp * kPackBytes);
    }
  }
  for (size_t p = chunks * kChunk + tid; p < npacks; p += nthreads) {
    reducePacks<Tr, Op, 1>(c, base + p * kPackBytes, 0);
  }
}

template <class Tr, class Op>
__device__ __forceinline__ void reduceCopyBody(const ReduceCopyArgs& a) {
  using S = typename Tr::S;
  Ctx<Tr> c{&a, Tr::makeMult(a.preMulScalar)};
  const size_t tid = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const size_t nthreads = size_t{gridDim.x} * blockDim.x;
  const size_t count = a.count;

  // Alignment of every pointer modulo 16, and modulo the element size.
  const uintptr_t mis = reinterpret_cast<uintptr_t>(a.srcs[0]) & (kPackBytes - 1);
  bool samePhase = true;
  uintptr_t any = 0;
  for (int s = 0; s < a.nsrcs; ++s) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(a.srcs[s]);
    samePhase &= (p & (kPackBytes - 1)) == mis;
    any |= p;
  }
  for (int d = 0; d < a.ndsts; ++d) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(a.dsts[d]);
    samePhase &= (p & (kPackBytes - 1)) == mis;
    any |= p;
  }
  const bool elemAligned = (any & (sizeof(S) - 1)) == 0;

  if (samePhase && elemAligned) {
    const size_t headBytes = (kPackBytes - mis) & (kPackBytes - 1);
    const size_t head = headBytes / sizeof(S) < count ? headBytes / sizeof(S) : count;
    const size_t npacks = (count - head) * sizeof(S) / kPackBytes;
    const size_t bodyEnd = head + npacks * (kPackBytes / sizeof(S));
    // Head and tail go to the last threads, whose warps are least likely to have packs.
    const size_t rtid = nthreads - 1 - tid;
    reduceElements<Tr, Op, false>(c, 0, head, rtid, nthreads);
    reducePackRange<Tr, Op>(c, head * sizeof(S), npacks, tid, nthreads);
    reduceElements<Tr, Op, false>(c, bodyEnd, count, rtid, nthreads);
  } else if (elemAligned) {
    reduceElements<Tr, Op, false>(c, 0, count, tid, nthreads);
  } else {
    reduceElements<Tr, Op, true>(c, 0, count, tid, nthreads);
  }
}

// Raw shared storage for the arguments: a __shared__ object may not have a constructor,
// and ReduceCopyArgs has default member initializers.
struct alignas(alignof(ReduceCopyArgs)) StagedArgs {
  unsigned char bytes[sizeof(ReduceCopyArgs)];
};

// A kernel's whole work: thread 0 stages the arguments in shared memory for the block.
template <class Tr, class Op>
__device__ __forceinline__ void reduceCopyStaged(const ReduceCopyArgs& args) {
  BRAID_SHARED(StagedArgs, staged);
  if (threadIdx.x == 0) std::memcpy(staged.bytes, &args, sizeof(args));
  __syncthreads();
  reduceCopyBody<Tr, Op>(*reinterpret_cast<const ReduceCopyArgs*>(staged.bytes));
}

// The kernel.
template <class Tr, class Op>
__global__ void reduceCopyKernel(ReduceCopyArgs args) {
  reduceCopyStaged<Tr, Op>(args);
}

// Two 512-thread blocks share an SM only at 64 registers a thread or fewer (65,536 of
// them). fp16 and bf16 widen every element, and left to ptxas their kernels took 63-66
// on sm_80 and sm_90: at 65 or 66 the SM holds 28 warps instead of 32, and for these
// kernels the warps resident are what hides the loads (bf16 on an H200 at 256 MiB: 0.66x
// of memcpy with one 512-thread block per SM, 0.90x with two; docs/cuda.md). So there
// they are built for two blocks per SM, which ptxas meets at 63-64 registers with no
// spill (the `cuda` device-code test fails on a spill, and on one of them above 64). Not
// on sm_100, where they take 61 unbounded and the bound made bf16 spill; nor for the
// other types, which ptxas would then let grow into the room (float from 42 to 56-60,
// three blocks per SM to two).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 1000
#define BRAID_TWO_BLOCKS_PER_SM __launch_bounds__(512, 2)
#else
#define BRAID_TWO_BLOCKS_PER_SM
#endif
template <class Tr>
inline constexpr bool kTwoBlocksPerSm = false;
template <>
inline constexpr bool kTwoBlocksPerSm<Float16Traits> = true;
template <>
inline constexpr bool kTwoBlocksPerSm<BFloat16Traits> = true;

// The same kernel, bounded as above.
template <class Tr, class Op>
__global__ void BRAID_TWO_BLOCKS_PER_SM reduceCopyKernelTwoBlocks(ReduceCopyArgs args) {
  reduceCopyStaged<Tr, Op>(args);
}

using KernelFn = void (*)(ReduceCopyArgs);

template <class Tr, class Op>
KernelFn kernelFor() {
  if constexpr (kTwoBlocksPerSm<Tr>) {
    return &reduceCopyKernelTwoBlocks<Tr, Op>;
  } else {
    return &reduceCopyKernel<Tr, Op>;
  }
}

// The kernel for an arithmetic op (kAvg already mapped to kSum by planReduceCopy).
template <class Tr>
KernelFn arithmeticKernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return kernelFor<Tr, SumOp>();
    case ReduceOp::kProd: return kernelFor<Tr, ProdOp>();
    case ReduceOp::kMax: return kernelFor<Tr, MaxOp>();
    case ReduceOp::kMin: return kernelFor<Tr, MinOp>();
    default: return nullptr;
  }
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

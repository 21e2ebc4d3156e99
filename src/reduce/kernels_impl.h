// Kernel bodies for every DataType x ReduceOp (and scale, divide, copy), written once against GCC/Clang generic vectors
// and compiled once per instruction set: kernels_scalar.cc (baseline flags), kernels_avx2.cc
// and kernels_avx512.cc (their -m flags come from CMakeLists.txt). The vector width follows
// the flags the including file was built with, so one source gives 16-, 32- and 64-byte
// kernels.
//
// Include only from a kernels_<isa>.cc, after defining BRAID_REDUCE_ISA to that file's
// namespace name; never from a header and never twice in one translation unit (hence no
// #pragma once: a second inclusion must fail loudly on the redefinitions).
//
// Linkage rules that keep AVX code from running before dispatch:
//  - everything here sits in an anonymous namespace inside braid::reduce::<isa>, so no
//    function compiled with AVX flags is an inline (COMDAT) symbol that the linker could
//    merge with, and then hand to, baseline code;
//  - for the same reason nothing here calls an inline function of a shared header
//    (std:: algorithms, the helpers in common/types.h): only compiler builtins, intrinsics
//    (static always-inline) and this file's own code;
//  - the only external symbol is the constant-initialized table kKernels, so loading the
//    library runs no code from this translation unit.

#ifndef BRAID_REDUCE_ISA
#error "define BRAID_REDUCE_ISA (scalar, avx2 or avx512) before including kernels_impl.h"
#endif

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "reduce/kernels.h"

#define BRAID_REDUCE_STR_INNER(x) #x
#define BRAID_REDUCE_STR(x) BRAID_REDUCE_STR_INNER(x)

namespace braid::reduce::BRAID_REDUCE_ISA {
namespace {

// Bytes per vector register. AVX-512 needs BW as well as F for 8- and 16-bit lanes to stay
// in zmm registers; CMakeLists.txt passes both.
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define BRAID_REDUCE_W512 1
constexpr int kVecBytes = 64;
#elif defined(__AVX2__)
#define BRAID_REDUCE_W256 1
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif

template <class T, int N>
struct VecOf {
  typedef T type __attribute__((vector_size(N * sizeof(T))));
};
template <class T, int N>
using Vec = typename VecOf<T, N>::type;

// Unaligned vector load/store: the contract allows any alignment, and on every target we
// build for an unaligned vector access costs the same as an aligned one when the data
// happens to be aligned.
template <class V>
inline V loadVec(const char* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
inline void storeVec(char* p, V v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

constexpr int kF32Lanes = kVecBytes / 4;
using F32V = Vec<float, kF32Lanes>;
using U32V = Vec<uint32_t, kF32Lanes>;
using I32V = Vec<int32_t, kF32Lanes>;
using U16W = Vec<uint16_t, 2 * kF32Lanes>;  // a full register of 16-bit lanes
using U16H = Vec<uint16_t, kF32Lanes>;      // half a register: the 16-bit image of one F32V

// fp16 and bf16 compute as two fp32 registers per register of 16-bit elements, so that
// widening and narrowing can use whole-register unpacks and packs.
struct F32Pair {
  F32V lo, hi;
};

// ---- operators ------------------------------------------------------------------------
// Max and min are the plain comparisons `a > b ? a : b` and `a < b ? a : b`, which is what
// maxps/minps compute. With a NaN the comparison is false, so the result is `b`: a NaN in
// the later operand propagates, a NaN in the earlier one is dropped. reduceN folds left
// (acc = acc op src[k]), so a NaN survives only while no later source replaces it.

struct SumOp {
  template <class V>
  static V apply(V a, V b) { return a + b; }
};
struct ProdOp {
  template <class V>
  static V apply(V a, V b) { return a * b; }
};
struct MaxOp {
  template <class V>
  static V apply(V a, V b) { return a > b ? a : b; }
};
struct MinOp {
  template <class V>
  static V apply(V a, V b) { return a < b ? a : b; }
};

// Bitwise operators combine the raw bits, so signedness does not matter: every integer type
// uses its unsigned twin, and float types (for which the API rejects these ops) use the
// unsigned integer of their width; see setBitwiseRow.
struct AndOp {
  template <class V>
  static V apply(V a, V b) { return a & b; }
};
struct OrOp {
  template <class V>
  static V apply(V a, V b) { return a | b; }
};
struct XorOp {
  template <class V>
  static V apply(V a, V b) { return a ^ b; }
};

template <class Op, class V>
inline V combine(V a, V b) {
  return Op::apply(a, b);
}
template <class Op>
inline F32Pair combine(F32Pair a, F32Pair b) {
  return {Op::apply(a.lo, b.lo), Op::apply(a.hi, b.hi)};
}

template <class V, class L>
inline V multiplyBy(V v, L m) {
  return v * m;
}
template <class L>
inline F32Pair multiplyBy(F32Pair v, L m) {
  return {v.lo * m, v.hi * m};
}

template <class V, class L>
inline V divideBy(V v, L d) {
  return v / d;
}
template <class L>
inline F32Pair divideBy(F32Pair v, L d) {
  return {v.lo / d, v.hi / d};
}

// ---- 16-bit <-> 32-bit lanes -----------------------------------------------------------

// Splits a register of 16-bit lanes into two registers of 32-bit lanes, each value in the
// low half of its lane (kHigh false: zero extension) or the high half (kHigh true: which
// widens bf16 to fp32 outright). On x86 this unpacks within 128-bit blocks, so the lanes
// come out permuted; pack16 undoes exactly that permutation, and element-wise arithmetic
// does not care.
template <bool kHigh>
inline void split16(U16W w, U32V* lo, U32V* hi) {
#if defined(BRAID_REDUCE_W512)
  const __m512i z = _mm512_setzero_si512();
  const __m512i v = (__m512i)w;
  *lo = (U32V)(kHigh ? _mm512_unpacklo_epi16(z, v) : _mm512_unpacklo_epi16(v, z));
  *hi = (U32V)(kHigh ? _mm512_unpackhi_epi16(z, v) : _mm512_unpackhi_epi16(v, z));
#elif defined(BRAID_REDUCE_W256)
  const __m256i z = _mm256_setzero_si256();
  const __m256i v = (__m256i)w;
  *lo = (U32V)(kHigh ? _mm256_unpacklo_epi16(z, v) : _mm256_unpacklo_epi16(v, z));
  *hi = (U32V)(kHigh ? _mm256_unpackhi_epi16(z, v) : _mm256_unpackhi_epi16(v, z));
#elif defined(__SSE2__)
  const __m128i z = _mm_setzero_si128();
  const __m128i v = (__m128i)w;
  *lo = (U32V)(kHigh ? _mm_unpacklo_epi16(z, v) : _mm_unpacklo_epi16(v, z));
  *hi = (U32V)(kHigh ? _mm_unpackhi_epi16(z, v) : _mm_unpackhi_epi16(v, z));
#else
  for (int i = 0; i < kF32Lanes; ++i) {
    (*lo)[i] = w[i];
    (*hi)[i] = w[i + kF32Lanes];
  }
  if (kHigh) {
    *lo <<= 16;
    *hi <<= 16;
  }
#endif
}

// The inverse of split16<false>, for lanes holding values <= 0xffff.
inline U16W pack16(U32V lo, U32V hi) {
#if defined(BRAID_REDUCE_W512)
  return (U16W)_mm512_packus_epi32((__m512i)lo, (__m512i)hi);
#elif defined(BRAID_REDUCE_W256)
  return (U16W)_mm256_packus_epi32((__m256i)lo, (__m256i)hi);
#elif defined(__SSE2__)
  // SSE2 has only the signed saturating pack: shift the range to signed and back.
  const __m128i bias32 = _mm_set1_epi32(0x8000);
  const __m128i p = _mm_packs_epi32(_mm_sub_epi32((__m128i)lo, bias32),
                                    _mm_sub_epi32((__m128i)hi, bias32));
  return (U16W)_mm_xor_si128(p, _mm_set1_epi16(static_cast<short>(0x8000)));
#else
  U16W w;
  for (int i = 0; i < kF32Lanes; ++i) {
    w[i] = static_cast<uint16_t>(lo[i]);
    w[i + kF32Lanes] = static_cast<uint16_t>(hi[i]);
  }
  return w;
#endif
}

// ---- fp16 / bf16 <-> fp32 --------------------------------------------------------------
// Both directions match the F16C instructions bit for bit, NaNs included (signaling NaNs are
// quieted), so results do not depend on which instruction set ran them.

// fp32 -> bf16 bits in the low half of each lane. Round to nearest even by adding 0x7fff
// plus the lowest kept bit; a carry out of the mantissa correctly bumps the exponent, and up
// to infinity. NaNs are kept NaN (and quiet) by setting the top mantissa bit instead of
// rounding, which could carry them into infinity.
inline U32V floatToBf16Bits(F32V f) {
  const U32V u = (U32V)f;
  const U32V top = u >> 16;
  const U32V rounded = (u + 0x7fffu + (top & 1u)) >> 16;
  const I32V isNan = (I32V)(f != f);  // one compare; CMakeLists.txt forbids -ffast-math here
  return isNan ? (top | 0x40u) : rounded;
}

#if !defined(__F16C__)

// fp16 bits (low half of each lane) -> fp32. Normal halves rebias the exponent (15 -> 127);
// subnormals are m * 2^-24, which int->float conversion and one multiply compute exactly
// without ever producing an fp32 subnormal (so DAZ/FTZ settings cannot change the answer);
// exponent 31 maps to 255, and NaNs are made quiet as vcvtph2ps does.
inline F32V halfBitsToFloat(U32V h) {
  const U32V sign = (h & 0x8000u) << 16;
  const U32V em = h & 0x7fffu;
  const I32V emi = (I32V)em;
  const U32V normal = (em << 13) + 0x38000000u;
  U32V infNan = (em << 13) + 0x70000000u;
  infNan |= (U32V)(emi > 0x7c00) & 0x00400000u;
  const U32V sub = (U32V)(__builtin_convertvector(emi, F32V) * 0x1p-24f);
  U32V r = emi >= 0x7c00 ? infNan : normal;
  r = emi < 0x400 ? sub : r;
  return (F32V)(r | sign);
}

// fp32 -> fp16 bits in the low half of each lane, round to nearest even (after F. Giesen's
// float_to_half_fast3_rtne): in the normal range, rebias and add 0xfff plus the lowest kept
// bit; results in the half subnormal range come from adding 0.5f, whose ulp is exactly the
// half subnormal step, so the FPU does the rounding; NaNs keep their top payload bits and
// become quiet, as vcvtps2ph does.
inline U32V floatToHalfBits(F32V f) {
  const U32V u = (U32V)f;
  const U32V sign = u & 0x80000000u;
  const U32V a = u ^ sign;
  const I32V ai = (I32V)a;  // a <= 0x7fffffff, so signed compares are exact
  const U32V normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;  // 0xc8000000 == -(112 << 23)
  const U32V sub = (U32V)((F32V)a + 0.5f) - 0x3f000000u;
  const U32V nan = ((a >> 13) & 0x3ffu) | 0x7e00u;
  const U32V inf = a - a + 0x7c00u;
  U32V r = ai < 0x38800000 ? sub : normal;  // below 2^-14: subnormal or zero
  r = ai >= 0x47800000 ? inf : r;           // >= 65536 (65520 rounds up via `normal`)
  r = ai > 0x7f800000 ? nan : r;
  return r | (sign >> 16);
}

#endif  // !__F16C__

// ---- element storage ------------------------------------------------------------------
// A Storage says how `kLanes` elements are loaded from memory into a compute value V and
// stored back, and how many V to keep in flight per loop iteration. Elements live at any
// byte address.

// Memory type T computed as C, a same-size type: signed integers add and multiply as their
// unsigned twins so that overflow wraps instead of being undefined.
template <class T, class C>
struct NativeStorage {
  static_assert(sizeof(T) == sizeof(C), "compute type must have the memory type's size");
  static constexpr int kLanes = kVecBytes / static_cast<int>(sizeof(C));
  static constexpr size_t kElemBytes = sizeof(T);
  // Enough independent accumulators to hide the latency of integer multiplies, few enough
  // to stay in registers.
  static constexpr int kUnroll = 4;
  using Lane = C;
  using V = Vec<C, kLanes>;
  static V load(const char* p) { return loadVec<V>(p); }
  static void store(char* p, V v) { storeVec(p, v); }
};

// fp16 and bf16 compute in fp32; the store is the single rounding of a call.
struct HalfStorage {
  static constexpr int kLanes = 2 * kF32Lanes;
  static constexpr size_t kElemBytes = 2;
  static constexpr int kUnroll = 2;
  using Lane = float;
  using V = F32Pair;
#if defined(__F16C__)
  // The conversion instructions take and give half a register of fp16 directly.
  static V load(const char* p) {
    const U16H lo = loadVec<U16H>(p);
    const U16H hi = loadVec<U16H>(p + sizeof(U16H));
#if defined(BRAID_REDUCE_W512)
    // The maskz forms with a full mask are the plain instructions; the unmasked intrinsics
    // trip GCC 12's -Wmaybe-uninitialized on their internal undefined source operand.
    return {(F32V)_mm512_maskz_cvtph_ps(0xffff, (__m256i)lo),
            (F32V)_mm512_maskz_cvtph_ps(0xffff, (__m256i)hi)};
#else
    return {(F32V)_mm256_cvtph_ps((__m128i)lo), (F32V)_mm256_cvtph_ps((__m128i)hi)};
#endif
  }
  static void store(char* p, V v) {
#if defined(BRAID_REDUCE_W512)
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    storeVec(p, (U16H)_mm512_maskz_cvtps_ph(0xffff, (__m512)v.lo, kRound));
    storeVec(p + sizeof(U16H), (U16H)_mm512_maskz_cvtps_ph(0xffff, (__m512)v.hi, kRound));
#else
    storeVec(p, (U16H)_mm256_cvtps_ph((__m256)v.lo, _MM_FROUND_TO_NEAREST_INT));
    storeVec(p + sizeof(U16H), (U16H)_mm256_cvtps_ph((__m256)v.hi, _MM_FROUND_TO_NEAREST_INT));
#endif
  }
#else
  static V load(const char* p) {
    U32V lo, hi;
    split16<false>(loadVec<U16W>(p), &lo, &hi);
    return {halfBitsToFloat(lo), halfBitsToFloat(hi)};
  }
  static void store(char* p, V v) {
    storeVec(p, pack16(floatToHalfBits(v.lo), floatToHalfBits(v.hi)));
  }
#endif
};

struct Bf16Storage {
  static constexpr int kLanes = 2 * kF32Lanes;
  static constexpr size_t kElemBytes = 2;
  static constexpr int kUnroll = 2;
  using Lane = float;
  using V = F32Pair;
  static V load(const char* p) {
    U32V lo, hi;
    split16<true>(loadVec<U16W>(p), &lo, &hi);
    return {(F32V)lo, (F32V)hi};
  }
  static void store(char* p, V v) {
    storeVec(p, pack16(floatToBf16Bits(v.lo), floatToBf16Bits(v.hi)));
  }
};

// OCP fp8 computes in fp32 as well: one fp32 register per kF32Lanes bytes. Decoding is exact;
// encoding rounds to nearest even and saturates (beyond the largest finite value, infinities
// included: that value; NaN stays NaN), the bits of reduce.cc's scalar conversions and of
// the GPU kernels (cuda/numeric.cuh). E4M3: bias 7, no infinity, NaN S.1111.111, largest 448.
// E5M2: bias 15, IEEE-style, largest 57344; it is the top byte of an fp16 of the same value.
using U8Q = Vec<uint8_t, kF32Lanes>;  // a quarter register: the 8-bit image of one F32V

template <bool kE4M3>
inline F32V fp8BitsToFloat(U32V x) {
  const U32V sign = (x & 0x80u) << 24;
  const U32V em = x & 0x7fu;
  const I32V emi = (I32V)em;
  if (kE4M3) {
    const U32V normal = (em << 20) + (120u << 23);
    const U32V sub = (U32V)(__builtin_convertvector(emi, F32V) * 0x1p-9f);  // em * 2^-9, exact
    U32V r = emi < 0x08 ? sub : normal;
    r = emi == 0x7f ? (U32V)(em - em + 0x7fc00000u) : r;
    return (F32V)(r | sign);
  }
  const U32V normal = (em << 21) + (112u << 23);
  U32V infNan = (em << 21) + (224u << 23);
  infNan |= (U32V)(emi > 0x7c) & 0x00400000u;  // NaNs come out quiet
  const U32V sub = (U32V)(__builtin_convertvector(emi, F32V) * 0x1p-16f);  // em * 2^-16, exact
  U32V r = emi >= 0x7c ? infNan : normal;
  r = emi < 0x04 ? sub : r;
  return (F32V)(r | sign);
}

template <bool kE4M3>
inline U32V floatToFp8Bits(F32V f) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  constexpr uint32_t kBias = kE4M3 ? 7 : 15;
  constexpr int32_t kMaxCode = kE4M3 ? 0x7e : 0x7b;
  constexpr int32_t kMinNormal = kE4M3 ? 0x3c800000 : 0x38800000;  // 2^-6, 2^-14
  // A float whose ulp is the subnormal step (2^-9, 2^-16): adding it rounds to nearest even.
  const float magic = kE4M3 ? 16384.0f : 128.0f;
  constexpr int kDrop = 23 - kMant;
  const U32V u = (U32V)f;
  const U32V sign = (u >> 24) & 0x80u;
  const U32V a = u & 0x7fffffffu;
  const I32V ai = (I32V)a;
  const U32V sub = (U32V)((F32V)a + magic) - (U32V)(f - f + magic);
  const U32V rebased = a - ((127u - kBias) << 23);
  U32V normal = (rebased + ((1u << (kDrop - 1)) - 1u) + ((rebased >> kDrop) & 1u)) >> kDrop;
  normal = (I32V)normal > kMaxCode ? (U32V)(a - a + kMaxCode) : normal;
  const U32V nan = kE4M3 ? (U32V)(a - a + 0x7fu) : (U32V)(0x7eu | ((a >> 21) & 1u));
  U32V r = ai < kMinNormal ? sub : normal;
  r = ai > 0x7f800000 ? nan : r;
  return r | sign;
}

// The low byte of every 32-bit lane, in order: one byte shuffle (a per-lane conversion would
// be a scalar loop below AVX-512).
inline U8Q lowBytes(U32V x) {
  using B = Vec<uint8_t, 4 * kF32Lanes>;
  const B b = (B)x;
#if defined(BRAID_REDUCE_W512)
  return __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
#elif defined(BRAID_REDUCE_W256)
  return __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28);
#else
  return __builtin_shufflevector(b, b, 0, 4, 8, 12);
#endif
}

// kF32Lanes bytes from memory, each zero-extended into a 32-bit lane: one byte shuffle (GCC
// turns a per-lane conversion into a scalar loop).
inline U32V loadBytesWidened(const char* p) {
  using B = Vec<uint8_t, 4 * kF32Lanes>;
  // Straight into the low lanes of a register (a zeroed stack copy would stall the load).
#if defined(BRAID_REDUCE_W512)
  uint64_t lo, hi;
  __builtin_memcpy(&lo, p, 8);
  __builtin_memcpy(&hi, p + 8, 8);
  const B b = (B)(Vec<uint64_t, 8>){lo, hi, 0, 0, 0, 0, 0, 0};
#elif defined(BRAID_REDUCE_W256)
  uint64_t q;
  __builtin_memcpy(&q, p, 8);
  const B b = (B)(Vec<uint64_t, 4>){q, 0, 0, 0};
#else
  uint32_t q;
  __builtin_memcpy(&q, p, 4);
  const B b = (B)(Vec<uint32_t, 4>){q, 0, 0, 0};
#endif
  const B z = {};
#if defined(BRAID_REDUCE_W512)
  return (U32V)__builtin_shufflevector(b, z, 0, 64, 64, 64, 1, 64, 64, 64, 2, 64, 64, 64, 3, 64, 64, 64, 4, 64, 64,
                                       64, 5, 64, 64, 64, 6, 64, 64, 64, 7, 64, 64, 64, 8, 64, 64, 64, 9, 64, 64, 64,
                                       10, 64, 64, 64, 11, 64, 64, 64, 12, 64, 64, 64, 13, 64, 64, 64, 14, 64, 64, 64,
                                       15, 64, 64, 64);
#elif defined(BRAID_REDUCE_W256)
  return (U32V)__builtin_shufflevector(b, z, 0, 32, 32, 32, 1, 32, 32, 32, 2, 32, 32, 32, 3, 32, 32, 32, 4, 32, 32,
                                       32, 5, 32, 32, 32, 6, 32, 32, 32, 7, 32, 32, 32);
#else
  return (U32V)__builtin_shufflevector(b, z, 0, 16, 16, 16, 1, 16, 16, 16, 2, 16, 16, 16, 3, 16, 16, 16);
#endif
}

template <bool kE4M3>
struct Fp8Storage {
  static constexpr int kLanes = kF32Lanes;
  static constexpr size_t kElemBytes = 1;
  static constexpr int kUnroll = 2;
  using Lane = float;
  using V = F32V;
  static V load(const char* p) { return fp8BitsToFloat<kE4M3>(loadBytesWidened(p)); }
  static void store(char* p, V v) { storeVec(p, lowBytes(floatToFp8Bits<kE4M3>(v))); }
};

// Copies the `n` bytes of a ragged end, n < kMax (a vector's bytes, a power of two), in
// fixed pieces of 32, 16, 8, 4, 2 and 1 bytes: a call to memcpy for a handful of bytes
// costs more than the reduction it serves (a scalar allreduce is all tail).
template <size_t kMax>
__attribute__((always_inline)) inline void copyTail(char* d, const char* s, size_t n) {
  static_assert(kMax <= 64 && (kMax & (kMax - 1)) == 0, "a vector of up to 64 bytes");
  size_t k = 0;
  auto piece = [&](auto word) {
    __builtin_memcpy(&word, s + k, sizeof word);
    __builtin_memcpy(d + k, &word, sizeof word);
    k += sizeof word;
  };
  struct Bytes32 { uint64_t w[4]; };
  struct Bytes16 { uint64_t w[2]; };
  if constexpr (kMax > 32) if (n & 32) piece(Bytes32{});
  if constexpr (kMax > 16) if (n & 16) piece(Bytes16{});
  if constexpr (kMax > 8) if (n & 8) piece(uint64_t{});
  if constexpr (kMax > 4) if (n & 4) piece(uint32_t{});
  if constexpr (kMax > 2) if (n & 2) piece(uint16_t{});
  if constexpr (kMax > 1) if (n & 1) piece(uint8_t{});
}

// ---- reduce ---------------------------------------------------------------------------

// Reduces `nsrc` sources into `dst`, `count` elements. kFixed > 0 is a compile-time source
// count (the common two-source case, fully unrolled); 0 means use `nsrc`.
//
// Each block loads every source before it stores, so `dst` may be any source exactly. The
// ragged end goes through a zero-padded vector on the stack, which runs the same operations
// (and roundings) as the body without touching memory past `count`.
template <class S, class Op, int kFixed>
inline void reduceLoop(void* dstv, const void* const* srcs, int nsrc, size_t count) {
  using V = typename S::V;
  constexpr int kUnroll = S::kUnroll;
  constexpr size_t kStep = S::kLanes * S::kElemBytes;  // bytes of memory per vector
  const int ns = kFixed > 0 ? kFixed : nsrc;
  char* dst = static_cast<char*>(dstv);
  const size_t bytes = count * S::kElemBytes;
  const char* src0 = static_cast<const char*>(srcs[0]);

  size_t i = 0;
  for (; i + kUnroll * kStep <= bytes; i += kUnroll * kStep) {
    V acc[kUnroll];
#pragma GCC unroll 4
    for (int u = 0; u < kUnroll; ++u) acc[u] = S::load(src0 + i + u * kStep);
    for (int s = 1; s < ns; ++s) {
      const char* p = static_cast<const char*>(srcs[s]) + i;
#pragma GCC unroll 4
      for (int u = 0; u < kUnroll; ++u) acc[u] = combine<Op>(acc[u], S::load(p + u * kStep));
    }
#pragma GCC unroll 4
    for (int u = 0; u < kUnroll; ++u) S::store(dst + i + u * kStep, acc[u]);
  }
  for (; i + kStep <= bytes; i += kStep) {
    V acc = S::load(src0 + i);
    for (int s = 1; s < ns; ++s) {
      acc = combine<Op>(acc, S::load(static_cast<const char*>(srcs[s]) + i));
    }
    S::store(dst + i, acc);
  }
  if (i < bytes) {
    const size_t rem = bytes - i;
    alignas(64) char buf[kStep];
    __builtin_memset(buf, 0, kStep);
    copyTail<kStep>(buf, src0 + i, rem);
    V acc = S::load(buf);
    for (int s = 1; s < ns; ++s) {
      copyTail<kStep>(buf, static_cast<const char*>(srcs[s]) + i, rem);
      acc = combine<Op>(acc, S::load(buf));
    }
    S::store(buf, acc);
    copyTail<kStep>(dst + i, buf, rem);
  }
}

template <class S, class Op>
void reduce2Kernel(void* dst, const void* a, const void* b, size_t count) {
  const void* srcs[2] = {a, b};
  reduceLoop<S, Op, 2>(dst, srcs, 2, count);
}

template <class S, class Op>
void reduceNKernel(void* dst, const void* const* srcs, int nsrc, size_t count) {
  if (nsrc == 2) {
    reduceLoop<S, Op, 2>(dst, srcs, 2, count);
  } else {
    reduceLoop<S, Op, 0>(dst, srcs, nsrc, count);
  }
}

// ---- divide ---------------------------------------------------------------------------

// Floats divide (not multiply by a reciprocal) so the quotient is correctly rounded; fp16
// and bf16 divide in fp32 and round once, which equals a correctly rounded fp16/bf16
// division because fp32 carries more than twice their precision plus two bits.
template <class S>
void divideFloatKernel(void* dstv, size_t count, int divisor) {
  using Lane = typename S::Lane;
  constexpr size_t kStep = S::kLanes * S::kElemBytes;
  const Lane d = static_cast<Lane>(divisor);
  char* dst = static_cast<char*>(dstv);
  const size_t bytes = count * S::kElemBytes;
  size_t i = 0;
  for (; i + kStep <= bytes; i += kStep) S::store(dst + i, divideBy(S::load(dst + i), d));
  if (i < bytes) {
    const size_t rem = bytes - i;
    alignas(64) char buf[kStep];
    __builtin_memset(buf, 0, kStep);
    copyTail<kStep>(buf, dst + i, rem);
    S::store(buf, divideBy(S::load(buf), d));
    copyTail<kStep>(dst + i, buf, rem);
  }
}

// Integer division truncates toward zero, done in a 64-bit type W of T's signedness so that
// the divisor is never narrowed (uint8 / 300 is 0, not uint8 / 44). Scalar: x86 has no
// vector integer divide, and integer kAvg is rare enough not to merit a reciprocal trick.
template <class T, class W>
void divideIntKernel(void* dstv, size_t count, int divisor) {
  char* dst = static_cast<char*>(dstv);
  const W d = static_cast<W>(divisor);
  for (size_t i = 0; i < count; ++i) {
    T x;
    __builtin_memcpy(&x, dst + i * sizeof(T), sizeof(T));
    x = static_cast<T>(static_cast<W>(x) / d);
    __builtin_memcpy(dst + i * sizeof(T), &x, sizeof(T));
  }
}

// ---- scale ----------------------------------------------------------------------------

// Applies `fn` (a vector -> vector function) to `count` elements of `src` into `dst`, with the
// ragged end through a zero-padded stack vector like reduceLoop. Each vector is loaded
// before it is stored, so `dst` may equal `src`.
template <class S, class Fn>
inline void mapLoop(void* dstv, const void* srcv, size_t count, Fn fn) {
  constexpr size_t kStep = S::kLanes * S::kElemBytes;
  char* dst = static_cast<char*>(dstv);
  const char* src = static_cast<const char*>(srcv);
  const size_t bytes = count * S::kElemBytes;
  size_t i = 0;
  for (; i + 2 * kStep <= bytes; i += 2 * kStep) {
    const typename S::V a = S::load(src + i);
    const typename S::V b = S::load(src + i + kStep);
    S::store(dst + i, fn(a));
    S::store(dst + i + kStep, fn(b));
  }
  for (; i + kStep <= bytes; i += kStep) S::store(dst + i, fn(S::load(src + i)));
  if (i < bytes) {
    const size_t rem = bytes - i;
    alignas(64) char buf[kStep];
    __builtin_memset(buf, 0, kStep);
    copyTail<kStep>(buf, src + i, rem);
    S::store(buf, fn(S::load(buf)));
    copyTail<kStep>(dst + i, buf, rem);
  }
}

// Floats multiply in their compute precision: fp32 (also for fp16/bf16, rounded once by the
// store) by (float)scalar, fp64 by scalar.
template <class S>
void scaleFloatKernel(void* dst, const void* src, double scalar, size_t count) {
  using Lane = typename S::Lane;
  const Lane m = static_cast<Lane>(scalar);
  mapLoop<S>(dst, src, count, [m](typename S::V v) { return multiplyBy(v, m); });
}

// `scalar` as the integer type T: truncated toward zero, as a C conversion does where that
// is defined; beyond T's range it saturates to T's min or max, and NaN gives 0 (a C
// conversion would be undefined there). Written out here rather than taken from a shared
// header; see the linkage rules at the top.
template <class T, T kMin, T kMax>
inline T scalarToInt(double s) {
  if (!(s == s)) return 0;
  // 2^(bits-1) for signed T, 2^bits for unsigned: exact in double, unlike kMax itself.
  const double limit = static_cast<double>(kMax / 2 + 1) * 2.0;
  if (s >= limit) return kMax;
  if (s <= static_cast<double>(kMin)) return kMin;
  return static_cast<T>(s);  // in (kMin - 1, limit): defined, truncates toward zero
}

// Integers multiply by the converted scalar in S's unsigned compute type, so the product
// wraps around as integer kProd does.
template <class S, class T, T kMin, T kMax>
void scaleIntKernel(void* dst, const void* src, double scalar, size_t count) {
  using Lane = typename S::Lane;
  const Lane m = static_cast<Lane>(scalarToInt<T, kMin, kMax>(scalar));
  mapLoop<S>(dst, src, count, [m](typename S::V v) { return multiplyBy(v, m); });
}

// ---- copy -----------------------------------------------------------------------------

// Copies with non-temporal stores: for buffers larger than the caches they skip the read
// for ownership of every destination line and do not evict the working set. The sfence
// orders the weakly ordered streaming stores before whatever the caller stores next (a
// FIFO tail, a flag), so another core that sees that store also sees the data.
void copyStreamingKernel(void* dstv, const void* srcv, size_t bytes) {
#if defined(__SSE2__)
  char* d = static_cast<char*>(dstv);
  const char* s = static_cast<const char*>(srcv);
  size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
  if (head > bytes) head = bytes;
  __builtin_memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t body = bytes & ~static_cast<size_t>(255);
  for (size_t i = 0; i < body; i += 256) {
#if defined(BRAID_REDUCE_W512)
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 64 * k),
                          _mm512_loadu_si512(s + i + 64 * k));
    }
#elif defined(BRAID_REDUCE_W256)
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32 * k),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32 * k)));
    }
#else
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16 * k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16 * k)));
    }
#endif
  }
  _mm_sfence();
  __builtin_memcpy(d + body, s + body, bytes - body);
#else
  __builtin_memcpy(dstv, srcv, bytes);
#endif
}

// ---- table ----------------------------------------------------------------------------

// Sum and prod use `SP` (unsigned compute for signed integers); max and min use `MM` (the
// type's own ordering); avg is sum. The bitwise ops have their own row setter below.
template <class SP, class MM>
constexpr void setRow(KernelTable& t, DataType dt) {
  const int r = static_cast<int>(dt);
  t.reduce2[r][static_cast<int>(ReduceOp::kSum)] = &reduce2Kernel<SP, SumOp>;
  t.reduce2[r][static_cast<int>(ReduceOp::kProd)] = &reduce2Kernel<SP, ProdOp>;
  t.reduce2[r][static_cast<int>(ReduceOp::kMax)] = &reduce2Kernel<MM, MaxOp>;
  t.reduce2[r][static_cast<int>(ReduceOp::kMin)] = &reduce2Kernel<MM, MinOp>;
  t.reduce2[r][static_cast<int>(ReduceOp::kAvg)] = &reduce2Kernel<SP, SumOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kSum)] = &reduceNKernel<SP, SumOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kProd)] = &reduceNKernel<SP, ProdOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kMax)] = &reduceNKernel<MM, MaxOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kMin)] = &reduceNKernel<MM, MinOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kAvg)] = &reduceNKernel<SP, SumOp>;
}

// Band, bor and bxor on `B`, an unsigned integer storage of the type's width. For integer
// types that is their own bits; for float types, where the API rejects these ops before
// they get here, it makes the entries harmless: the bits are combined as unsigned integers
// of the same width, reading and writing exactly `count` elements like every other kernel.
template <class B>
constexpr void setBitwiseRow(KernelTable& t, DataType dt) {
  const int r = static_cast<int>(dt);
  t.reduce2[r][static_cast<int>(ReduceOp::kBand)] = &reduce2Kernel<B, AndOp>;
  t.reduce2[r][static_cast<int>(ReduceOp::kBor)] = &reduce2Kernel<B, OrOp>;
  t.reduce2[r][static_cast<int>(ReduceOp::kBxor)] = &reduce2Kernel<B, XorOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kBand)] = &reduceNKernel<B, AndOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kBor)] = &reduceNKernel<B, OrOp>;
  t.reduceN[r][static_cast<int>(ReduceOp::kBxor)] = &reduceNKernel<B, XorOp>;
}

constexpr KernelTable makeTable() {
  KernelTable t{};
  t.name = BRAID_REDUCE_STR(BRAID_REDUCE_ISA);
  setRow<NativeStorage<int8_t, uint8_t>, NativeStorage<int8_t, int8_t>>(t, DataType::kInt8);
  setRow<NativeStorage<uint8_t, uint8_t>, NativeStorage<uint8_t, uint8_t>>(t, DataType::kUint8);
  setRow<NativeStorage<int32_t, uint32_t>, NativeStorage<int32_t, int32_t>>(t, DataType::kInt32);
  setRow<NativeStorage<uint32_t, uint32_t>, NativeStorage<uint32_t, uint32_t>>(t, DataType::kUint32);
  setRow<NativeStorage<int64_t, uint64_t>, NativeStorage<int64_t, int64_t>>(t, DataType::kInt64);
  setRow<NativeStorage<uint64_t, uint64_t>, NativeStorage<uint64_t, uint64_t>>(t, DataType::kUint64);
  setRow<HalfStorage, HalfStorage>(t, DataType::kFloat16);
  setRow<Bf16Storage, Bf16Storage>(t, DataType::kBFloat16);
  setRow<NativeStorage<float, float>, NativeStorage<float, float>>(t, DataType::kFloat32);
  setRow<NativeStorage<double, double>, NativeStorage<double, double>>(t, DataType::kFloat64);
  setRow<Fp8Storage<true>, Fp8Storage<true>>(t, DataType::kFloat8E4M3);
  setRow<Fp8Storage<false>, Fp8Storage<false>>(t, DataType::kFloat8E5M2);
  setRow<NativeStorage<int16_t, uint16_t>, NativeStorage<int16_t, int16_t>>(t, DataType::kInt16);
  setRow<NativeStorage<uint16_t, uint16_t>, NativeStorage<uint16_t, uint16_t>>(t, DataType::kUint16);

  using U8 = NativeStorage<uint8_t, uint8_t>;
  using U16 = NativeStorage<uint16_t, uint16_t>;
  using U32 = NativeStorage<uint32_t, uint32_t>;
  using U64 = NativeStorage<uint64_t, uint64_t>;
  setBitwiseRow<U8>(t, DataType::kInt8);
  setBitwiseRow<U8>(t, DataType::kUint8);
  setBitwiseRow<U32>(t, DataType::kInt32);
  setBitwiseRow<U32>(t, DataType::kUint32);
  setBitwiseRow<U64>(t, DataType::kInt64);
  setBitwiseRow<U64>(t, DataType::kUint64);
  setBitwiseRow<U16>(t, DataType::kFloat16);
  setBitwiseRow<U16>(t, DataType::kBFloat16);
  setBitwiseRow<U32>(t, DataType::kFloat32);
  setBitwiseRow<U64>(t, DataType::kFloat64);
  setBitwiseRow<U8>(t, DataType::kFloat8E4M3);
  setBitwiseRow<U8>(t, DataType::kFloat8E5M2);
  setBitwiseRow<U16>(t, DataType::kInt16);
  setBitwiseRow<U16>(t, DataType::kUint16);

  t.divide[static_cast<int>(DataType::kInt8)] = &divideIntKernel<int8_t, int64_t>;
  t.divide[static_cast<int>(DataType::kUint8)] = &divideIntKernel<uint8_t, uint64_t>;
  t.divide[static_cast<int>(DataType::kInt32)] = &divideIntKernel<int32_t, int64_t>;
  t.divide[static_cast<int>(DataType::kUint32)] = &divideIntKernel<uint32_t, uint64_t>;
  t.divide[static_cast<int>(DataType::kInt64)] = &divideIntKernel<int64_t, int64_t>;
  t.divide[static_cast<int>(DataType::kUint64)] = &divideIntKernel<uint64_t, uint64_t>;
  t.divide[static_cast<int>(DataType::kFloat16)] = &divideFloatKernel<HalfStorage>;
  t.divide[static_cast<int>(DataType::kBFloat16)] = &divideFloatKernel<Bf16Storage>;
  t.divide[static_cast<int>(DataType::kFloat32)] = &divideFloatKernel<NativeStorage<float, float>>;
  t.divide[static_cast<int>(DataType::kFloat64)] = &divideFloatKernel<NativeStorage<double, double>>;
  t.divide[static_cast<int>(DataType::kFloat8E4M3)] = &divideFloatKernel<Fp8Storage<true>>;
  t.divide[static_cast<int>(DataType::kFloat8E5M2)] = &divideFloatKernel<Fp8Storage<false>>;
  t.divide[static_cast<int>(DataType::kInt16)] = &divideIntKernel<int16_t, int64_t>;
  t.divide[static_cast<int>(DataType::kUint16)] = &divideIntKernel<uint16_t, uint64_t>;

  t.scale[static_cast<int>(DataType::kInt8)] =
      &scaleIntKernel<NativeStorage<int8_t, uint8_t>, int8_t, INT8_MIN, INT8_MAX>;
  t.scale[static_cast<int>(DataType::kUint8)] = &scaleIntKernel<U8, uint8_t, 0, UINT8_MAX>;
  t.scale[static_cast<int>(DataType::kInt32)] =
      &scaleIntKernel<NativeStorage<int32_t, uint32_t>, int32_t, INT32_MIN, INT32_MAX>;
  t.scale[static_cast<int>(DataType::kUint32)] = &scaleIntKernel<U32, uint32_t, 0, UINT32_MAX>;
  t.scale[static_cast<int>(DataType::kInt64)] =
      &scaleIntKernel<NativeStorage<int64_t, uint64_t>, int64_t, INT64_MIN, INT64_MAX>;
  t.scale[static_cast<int>(DataType::kUint64)] = &scaleIntKernel<U64, uint64_t, 0, UINT64_MAX>;
  t.scale[static_cast<int>(DataType::kFloat16)] = &scaleFloatKernel<HalfStorage>;
  t.scale[static_cast<int>(DataType::kBFloat16)] = &scaleFloatKernel<Bf16Storage>;
  t.scale[static_cast<int>(DataType::kFloat32)] = &scaleFloatKernel<NativeStorage<float, float>>;
  t.scale[static_cast<int>(DataType::kFloat64)] = &scaleFloatKernel<NativeStorage<double, double>>;
  t.scale[static_cast<int>(DataType::kFloat8E4M3)] = &scaleFloatKernel<Fp8Storage<true>>;
  t.scale[static_cast<int>(DataType::kFloat8E5M2)] = &scaleFloatKernel<Fp8Storage<false>>;
  t.scale[static_cast<int>(DataType::kInt16)] =
      &scaleIntKernel<NativeStorage<int16_t, uint16_t>, int16_t, INT16_MIN, INT16_MAX>;
  t.scale[static_cast<int>(DataType::kUint16)] = &scaleIntKernel<U16, uint16_t, 0, UINT16_MAX>;

  t.copyStreaming = &copyStreamingKernel;
  return t;
}

}  // namespace

// constexpr guarantees constant initialization: a dynamic initializer here would be AVX
// code running at load time on any CPU.
constexpr KernelTable kKernels = makeTable();

}  // namespace braid::reduce::BRAID_REDUCE_ISA

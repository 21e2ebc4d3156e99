#pragma once
// The only places where the kernels touch global memory. On the device these are 128-bit
// `ld.global` / `st.global` in inline PTX (one LDG.E.128 / STG.E.128 per pack, which the
// resource check in tests/unit/cuda verifies in the SASS) and natural-width element
// accesses; on the host (CPU executor) they are memcpy, which is also what makes misaligned
// host accesses well-defined. Kernel bodies call these and nothing lower-level, so nothing
// the executor cannot run hides in them.

#include <cstdint>
#include <cstring>

#include "cuda/cuda_compat.h"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

// Sixteen bytes as four 32-bit words: the unit of the vector loops.
struct alignas(16) Pack {
  uint32_t w[4];
};

// Loads 16 bytes from a 16-byte-aligned global address.
__device__ __forceinline__ Pack loadPack(const void* p) {
  Pack v;
#if defined(__CUDA_ARCH__)
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(__cvta_generic_to_global(p)));
#else
  std::memcpy(&v, p, sizeof(v));
#endif
  return v;
}

// Stores 16 bytes to a 16-byte-aligned global address.
__device__ __forceinline__ void storePack(void* p, const Pack& v) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
               :
               : "l"(__cvta_generic_to_global(p)), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
               : "memory");
#else
  std::memcpy(p, &v, sizeof(v));
#endif
}

// One element (an unsigned integer of its width). kBytewise: the address may have any
// alignment, so the element is assembled from byte loads (little-endian, as every target
// is); otherwise it is aligned to its size and loaded in one access.
template <class S, bool kBytewise>
__device__ __forceinline__ S loadElem(const void* p) {
#if defined(__CUDA_ARCH__)
  if constexpr (kBytewise) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    S v = 0;
BRAID_UNROLL
    for (unsigned i = 0; i < sizeof(S); ++i) v |= static_cast<S>(static_cast<S>(b[i]) << (8 * i));
    return v;
  } else {
    return *static_cast<const S*>(p);
  }
#else
  S v;
  std::memcpy(&v, p, sizeof(S));
  return v;
#endif
}

template <class S, bool kBytewise>
__device__ __forceinline__ void storeElem(void* p, S v) {
#if defined(__CUDA_ARCH__)
  if constexpr (kBytewise) {
    unsigned char* b = static_cast<unsigned char*>(p);
BRAID_UNROLL
    for (unsigned i = 0; i < sizeof(S); ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  } else {
    *static_cast<S*>(p) = v;
  }
#else
  std::memcpy(p, &v, sizeof(S));
#endif
}

// Element `i` of a pack, and a pack with element `i` replaced; S is the element's unsigned
// storage type. With `i` a compile-time constant (the loops are unrolled) these are
// register shifts and masks, so a pack never goes through local memory.
template <class S>
__device__ __forceinline__ S packElem(const Pack& v, int i) {
  if constexpr (sizeof(S) == 8) {
    return static_cast<S>(v.w[2 * i]) | (static_cast<S>(v.w[2 * i + 1]) << 32);
  } else if constexpr (sizeof(S) == 4) {
    return static_cast<S>(v.w[i]);
  } else {
    constexpr int kPerWord = 4 / sizeof(S);
    constexpr uint32_t kMask = (sizeof(S) == 2) ? 0xffffu : 0xffu;
    return static_cast<S>((v.w[i / kPerWord] >> (8 * sizeof(S) * (i % kPerWord))) & kMask);
  }
}

template <class S>
__device__ __forceinline__ void setPackElem(Pack& v, int i, S x) {
  if constexpr (sizeof(S) == 8) {
    v.w[2 * i] = static_cast<uint32_t>(x);
    v.w[2 * i + 1] = static_cast<uint32_t>(static_cast<uint64_t>(x) >> 32);
  } else if constexpr (sizeof(S) == 4) {
    v.w[i] = static_cast<uint32_t>(x);
  } else {
    constexpr int kPerWord = 4 / sizeof(S);
    constexpr uint32_t kMask = (sizeof(S) == 2) ? 0xffffu : 0xffu;
    const int shift = 8 * sizeof(S) * (i % kPerWord);
    v.w[i / kPerWord] = (v.w[i / kPerWord] & ~(kMask << shift)) | ((static_cast<uint32_t>(x) & kMask) << shift);
  }
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

#pragma once
// Lets the kernel sources in cuda/ compile twice: for the device with nvcc, and for the
// host with an ordinary C++ compiler, where cpu_executor.h runs them with one host thread
// per CUDA thread. Kernel code uses only what this header provides on both sides:
//
//   __global__ __device__ __host__ __forceinline__   qualifiers (empty or `inline` on the host)
//   threadIdx blockIdx blockDim gridDim               per-thread values the executor sets
//   __syncthreads()                                   a barrier across the block's host threads
//   BRAID_SHARED(type, name)                          one `type` per block, shared by its threads
//                                                     (`type` not an array: wrap one in a struct)
//
// Plain `__shared__` is made a compile error on the host: silently turning it into a
// per-thread local would give each host thread its own copy and hide real bugs.
//
// Nothing here includes a CUDA header, so this file (and every kernel header built on it)
// compiles with g++ on a machine without the toolkit.

#include <cstddef>

#if defined(__CUDACC__)

#define BRAID_CUDA_DEVICE_BUILD 1
#define BRAID_HD __host__ __device__ __forceinline__
#define BRAID_SHARED(type, name) __shared__ type name

#else  // host compiler: the CPU executor provides the CUDA built-ins

#define BRAID_CUDA_DEVICE_BUILD 0
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static_assert(false, "use BRAID_SHARED(type, name) in kernels built for the CPU executor");
#define BRAID_HD inline

namespace braid::cuda::sim {

// The vector types CUDA kernels see, reduced to what launch geometry needs.
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3() = default;
  constexpr dim3(unsigned vx, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}  // NOLINT
};

// Set by the executor for each host thread before it enters a kernel.
inline thread_local uint3 tlsThreadIdx;
inline thread_local uint3 tlsBlockIdx;
inline thread_local dim3 tlsBlockDim;
inline thread_local dim3 tlsGridDim;

// Implemented in cpu_executor.cc; valid only on a thread the executor is running a kernel on.
void syncBlock();
void* sharedStorage(const void* site, size_t bytes, size_t align);

}  // namespace braid::cuda::sim

using braid::cuda::sim::dim3;
using braid::cuda::sim::uint3;

// Macros rather than variables so kernel code reads exactly as CUDA code does.
#define threadIdx (::braid::cuda::sim::tlsThreadIdx)
#define blockIdx (::braid::cuda::sim::tlsBlockIdx)
#define blockDim (::braid::cuda::sim::tlsBlockDim)
#define gridDim (::braid::cuda::sim::tlsGridDim)

inline void __syncthreads() { ::braid::cuda::sim::syncBlock(); }

// Every evaluation at one source location names the same per-block object: the address of
// a function-local static identifies the site, and the block's arena maps it to storage.
#define BRAID_SHARED(type, name)                                                      \
  static const char name##_braid_site = 0;                                             \
  (void)name##_braid_site;                                                             \
  type& name = *static_cast<type*>(                                                    \
      ::braid::cuda::sim::sharedStorage(&name##_braid_site, sizeof(type), alignof(type)))

#endif  // __CUDACC__

// Full unrolling of a loop with a compile-time trip count, for nvcc. The host build runs the
// kernels to check them, not for speed: unrolled there, every dtype x op instantiation cost
// three to four times the compile time (the host kernels were the slowest files to build,
// above all under the sanitizers) for no difference in what the loops compute.
#if defined(__CUDACC__)
#define BRAID_UNROLL _Pragma("unroll")
#else
#define BRAID_UNROLL
#endif

// The kernels of the device build and of the host build live in different namespaces, so
// one program (the gpu test) can link both without two definitions of one template.
#if BRAID_CUDA_DEVICE_BUILD
#define BRAID_CUDA_KERNEL_NS device_build
#else
#define BRAID_CUDA_KERNEL_NS host_build
#endif

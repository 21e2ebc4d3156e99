#pragma once
// A one-thread kernel that holds its stream until a 32-bit flag in host memory (mapped into
// the device's address space) reaches a value: one of the staged device path's ways of
// making a stream wait for the host (src/device/cuda_runtime.cc, BRAID_CUDA_STREAM_WAIT),
// and the one used where the driver has no stream memory operations (cuStreamWaitValue32).
// It costs one resident block while it waits; on an H200 the stream resumed 12-26 us after
// the host set the flag.
//
// The comparison is cyclic, as device::reachedValue's: the flag has reached `value` when
// (int32_t)(flag - value) >= 0. Built by nvcc for the device and by the host compiler for
// the CPU executor's test; the flag's load is the only device-specific line.

#include <cstdint>

#include "cuda/cuda_compat.h"

#if !defined(__CUDA_ARCH__)
#include <thread>
#endif

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

// Loads the flag with acquire semantics at system scope: the host's stores before its
// store of the flag are visible to what the stream runs after this kernel.
__device__ __forceinline__ uint32_t loadFlagAcquire(const uint32_t* flag) {
#if defined(__CUDA_ARCH__)
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(__cvta_generic_to_global(flag)) : "memory");
  return v;
#else
  return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
#endif
}

__device__ __forceinline__ void pollPause() {
#if defined(__CUDA_ARCH__)
  __nanosleep(200);
#else
  std::this_thread::yield();
#endif
}

__global__ void waitFlagKernel(const uint32_t* flag, uint32_t value) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  while (static_cast<int32_t>(loadFlagAcquire(flag) - value) < 0) pollPause();
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

#pragma once
// Enqueues cuda/stream_wait.cuh's kernel (braid_cuda_wait, built only when nvcc is found).
// No CUDA header: the stream travels as `void*` (a cudaStream_t, nullptr for the legacy
// default stream).

#include <cstdint>

#include "common/status.h"

namespace braid::cuda {

// Work enqueued on `stream` after this call runs once the 32-bit flag at `deviceFlag` (a
// device address of mapped host memory) has reached `value` (cyclic comparison). Errors:
// kSystemError with the CUDA error of the launch.
Status launchWaitFlag(const void* deviceFlag, uint32_t value, void* stream);

// Loads the kernel into the current device's context now, rather than at its first launch
// (cuda/device_launch.h, preloadKernels, says why).
Status preloadWaitFlag();

}  // namespace braid::cuda

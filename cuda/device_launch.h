#pragma once
// Launches the reduce-copy kernels on a CUDA device (braid_cuda_kernels, built only when
// nvcc is found). No CUDA header is included: streams travel as `void*` (a cudaStream_t,
// nullptr for the legacy default stream), so callers compile with any C++ compiler.

#include <cstddef>

#include "common/status.h"
#include "cuda/reduce_copy.h"

namespace braid::cuda {

// Devices the CUDA runtime sees. A runtime error (no driver, no device node) is a
// kSystemError naming the CUDA error, so a caller can report why no GPU is usable.
StatusOr<int> visibleDeviceCount();

// Launch limits for the current device: maxBlocks = the SM count, or BRAID_CUDA_MAX_BLOCKS
// (a number in [1, 65535]; anything else is a kInvalidArgument naming it), and
// maxThreadsPerBlock = 512. Without BRAID_CUDA_MAX_BLOCKS a launch goes further: up to as
// many blocks as the SMs hold of its kernel at once, of the size CUDA's occupancy
// calculator gives the most resident threads (at most 512).
StatusOr<LaunchLimits> currentDeviceLaunchLimits();
bool maxBlocksOverridden();  // BRAID_CUDA_MAX_BLOCKS is set

// Loads every reduce-copy kernel into the current device's context now. CUDA loads a
// kernel at its first launch by default (lazy loading, CUDA 12.2 and later), and loading
// may wait until the context is idle: a first launch from braid's proxy while the caller's
// stream waits for that proxy's flag waits forever (it did on an H200). Code that launches
// kernels while a stream waits for it calls this first, before any such wait is queued.
Status preloadKernels();

// Checks and enqueues one reduce-copy (reduce_copy.h has the semantics) on `stream` of the
// current device; does not wait for it. Pointers must be device-accessible (device
// memory, or mapped/managed host memory). `cfg` overrides the geometry that
// chooseLaunchConfig picks from currentDeviceLaunchLimits(). Errors: planReduceCopy's, or
// kSystemError with the CUDA error of the launch.
Status launchReduceCopy(const ReduceCopyArgs& args, DeviceDataType type, ReduceOp op, void* stream,
                        const LaunchConfig* cfg = nullptr);

// Enqueues a copy of `bytes` bytes from `src` to `dst0` and, when non-null, `dst1`.
Status launchCopy(void* dst0, void* dst1, const void* src, size_t bytes, void* stream,
                  const LaunchConfig* cfg = nullptr);

}  // namespace braid::cuda

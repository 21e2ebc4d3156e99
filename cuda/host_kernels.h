#pragma once
// Runs the reduce-copy kernels on the host through the CPU executor: the same kernel
// source as the device build, for tests and for checking a GPU's results on machines
// without one. Not a fast path: every CUDA thread is an OS thread.

#include <cstddef>

#include "common/status.h"
#include "cuda/reduce_copy.h"

// Deliberately no cpu_executor.h here: it defines the CUDA built-ins for the host compiler,
// and this header must also be usable next to the real CUDA headers (the gpu test).
namespace braid::cuda::sim {

class CpuExecutor;

// Limits for the host: small blocks and few of them, since each CUDA thread is an OS
// thread. Enough threads (up to 4 x 128) to exercise the multi-warp and multi-block paths.
constexpr LaunchLimits kHostLaunchLimits{4, 128};

// Checks and runs one reduce-copy (reduce_copy.h has the semantics) and returns when it is
// done. `cfg` overrides the geometry chooseLaunchConfig(bytes, kHostLaunchLimits) picks;
// `exec` defaults to CpuExecutor::shared(). Errors: whatever planReduceCopy reports, or the
// executor's kInvalidArgument for a bad geometry. Thread-safe: concurrent calls on one
// executor take turns.
Status runReduceCopy(const ReduceCopyArgs& args, DeviceDataType type, ReduceOp op,
                     const LaunchConfig* cfg = nullptr, CpuExecutor* exec = nullptr);

// Copies `bytes` bytes from `src` to `dst0` and, when non-null, `dst1`.
Status runCopy(void* dst0, void* dst1, const void* src, size_t bytes, const LaunchConfig* cfg = nullptr,
               CpuExecutor* exec = nullptr);

}  // namespace braid::cuda::sim

#include "cuda/device_launch.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <cuda_runtime.h>

#include "cuda/kernel_table.cuh"

namespace braid::cuda {
namespace {

Status cudaFailure(const char* call, cudaError_t err) {
  return Status(Code::kSystemError, std::string(call) + ": " + cudaGetErrorName(err) + " (" +
                                        cudaGetErrorString(err) + ")");
}

Status launchPlan(const KernelPlan& plan, DeviceDataType type, void* stream, const LaunchConfig* cfg) {
  if (plan.args.count == 0) return Status::ok();
  device_build::KernelFn fn = device_build::selectKernel(plan);
  if (fn == nullptr) return internalError("reduce-copy: no device kernel for this type and op");
  LaunchConfig geometry;
  if (cfg != nullptr) {
    geometry = *cfg;
  } else {
    StatusOr<LaunchLimits> limits = currentDeviceLaunchLimits();
    if (!limits.isOk()) return limits.status();
    const size_t bytes = plan.kind == KernelKind::kBytes ? plan.args.count
                                                         : plan.args.count * deviceDataTypeSize(type);
    geometry = chooseLaunchConfig(bytes, limits.value());
  }
  ReduceCopyArgs args = plan.args;
  void* params[] = {&args};
  const cudaError_t err = cudaLaunchKernel(reinterpret_cast<const void*>(fn), dim3(geometry.grid),
                                           dim3(geometry.block), params, 0,
                                           static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return cudaFailure("cudaLaunchKernel", err);
  return Status::ok();
}

}  // namespace

StatusOr<int> visibleDeviceCount() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return cudaFailure("cudaGetDeviceCount", err);
  return n;
}

StatusOr<LaunchLimits> currentDeviceLaunchLimits() {
  // BRAID_CUDA_MAX_BLOCKS, read once: 0 = not set, -1 = not a positive number.
  static const long maxBlocksEnv = [] {
    const char* v = std::getenv("BRAID_CUDA_MAX_BLOCKS");
    if (!v || !*v) return 0L;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return *end == '\0' && n > 0 && n <= 65535 ? n : -1L;
  }();
  if (maxBlocksEnv < 0)
    return Status(Code::kInvalidArgument, std::string("BRAID_CUDA_MAX_BLOCKS=") + std::getenv("BRAID_CUDA_MAX_BLOCKS") +
                                              ": expected a number of blocks in [1, 65535]");
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return cudaFailure("cudaGetDevice", err);
  int sms = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return cudaFailure("cudaDeviceGetAttribute", err);
  LaunchLimits limits;
  // One block per SM: a 512-thread block within the register budget (96 per thread, 49,152
  // per block) takes most of an SM's 65,536 registers, so one block per SM is what runs at
  // once, and a large slice gets every SM. The earlier cap of 64 blocks left half of an
  // H200's 132 SMs idle (the reduce at 256 MiB reached 0.67x of memcpy, docs/cuda.md).
  limits.maxBlocks = static_cast<unsigned>(maxBlocksEnv > 0 ? maxBlocksEnv : std::max(sms, 1));
  limits.maxThreadsPerBlock = 512;
  return limits;
}

Status launchReduceCopy(const ReduceCopyArgs& args, DeviceDataType type, ReduceOp op, void* stream,
                        const LaunchConfig* cfg) {
  StatusOr<KernelPlan> plan = planReduceCopy(args, type, op);
  if (!plan.isOk()) return plan.status();
  return launchPlan(plan.value(), type, stream, cfg);
}

Status launchCopy(void* dst0, void* dst1, const void* src, size_t bytes, void* stream, const LaunchConfig* cfg) {
  StatusOr<KernelPlan> plan = planCopy(dst0, dst1, src, bytes);
  if (!plan.isOk()) return plan.status();
  return launchPlan(plan.value(), DeviceDataType::kUint8, stream, cfg);
}

}  // namespace braid::cuda

#include "cuda/device_launch.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "cuda/kernel_table.cuh"

namespace braid::cuda {
namespace {

Status cudaFailure(const char* call, cudaError_t err) {
  return Status(Code::kSystemError, std::string(call) + ": " + cudaGetErrorName(err) + " (" +
                                        cudaGetErrorString(err) + ")");
}

// Every compiled kernel, each once (the families return nullptr outside their types and ops).
template <class Fn>
void forEachKernel(Fn&& fn) {
  for (int op = 0; op < kNumReduceOps; ++op) {
    const auto o = static_cast<ReduceOp>(op);
    if (device_build::KernelFn k = device_build::bytesKernel(o)) fn(k);
    for (int t = 0; t < kNumDeviceDataTypes; ++t) {
      const auto type = static_cast<DeviceDataType>(t);
      for (device_build::KernelFn k : {device_build::integerKernel(type, o), device_build::halfKernel(type, o),
                                       device_build::floatKernel(type, o), device_build::fp8Kernel(type, o)})
        if (k) fn(k);
    }
  }
}

// The most threads of `fn` the SMs hold at once, as blocks of up to `maxBlock` threads:
// CUDA's occupancy answer for the kernel's registers and shared memory, per device and
// kernel, asked once. One 512-thread block per SM held 16 warps, too few loads in flight
// for the kernels that widen every element (bf16 reached 0.66x of memcpy on an H200 at
// 256 MiB, 0.90x with two blocks per SM; float 0.90x and 0.95x).
struct Residency {
  unsigned block = 0;     // threads per block
  unsigned perGpu = 0;    // blocks the whole GPU holds at once
};

StatusOr<Residency> residency(device_build::KernelFn fn, unsigned maxBlock) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return cudaFailure("cudaGetDevice", err);
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<int, const void*>, Residency>();  // used up to exit
  const std::pair<int, const void*> key{dev, reinterpret_cast<const void*>(fn)};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  int minGrid = 0, block = 0;
  err = cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, fn, 0, static_cast<int>(maxBlock));
  if (err != cudaSuccess) return cudaFailure("cudaOccupancyMaxPotentialBlockSize", err);
  Residency r;
  r.block = static_cast<unsigned>(std::max(block, 32));
  r.perGpu = static_cast<unsigned>(std::max(minGrid, 1));
  (*cache)[key] = r;
  return r;
}

Status launchPlan(const KernelPlan& plan, DeviceDataType type, void* stream, const LaunchConfig* cfg) {
  if (plan.args.count == 0) return Status::ok();
  device_build::KernelFn fn = device_build::selectKernel(plan);
  if (fn == nullptr) return internalError("reduce-copy: no device kernel for this type and op");
  LaunchConfig geometry;
  if (cfg != nullptr) {
    geometry = *cfg;
  } else {
    LaunchLimits l;
    if (maxBlocksOverridden()) {
      BRAID_ASSIGN_OR_RETURN(l, currentDeviceLaunchLimits());
    } else {
      BRAID_ASSIGN_OR_RETURN(Residency r, residency(fn, l.maxThreadsPerBlock));
      l.maxThreadsPerBlock = r.block;
      l.maxBlocks = r.perGpu;
    }
    const size_t bytes = plan.kind == KernelKind::kBytes ? plan.args.count
                                                         : plan.args.count * deviceDataTypeSize(type);
    geometry = chooseLaunchConfig(bytes, l);
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

namespace {

// BRAID_CUDA_MAX_BLOCKS, read once: 0 = not set, -1 = not a positive number.
long maxBlocksEnv() {
  static const long v = [] {
    const char* e = std::getenv("BRAID_CUDA_MAX_BLOCKS");
    if (!e || !*e) return 0L;
    char* end = nullptr;
    const long n = std::strtol(e, &end, 10);
    return *end == '\0' && n > 0 && n <= 65535 ? n : -1L;
  }();
  return v;
}

}  // namespace

bool maxBlocksOverridden() { return maxBlocksEnv() != 0; }

StatusOr<LaunchLimits> currentDeviceLaunchLimits() {
  if (maxBlocksEnv() < 0)
    return Status(Code::kInvalidArgument, std::string("BRAID_CUDA_MAX_BLOCKS=") + std::getenv("BRAID_CUDA_MAX_BLOCKS") +
                                              ": expected a number of blocks in [1, 65535]");
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return cudaFailure("cudaGetDevice", err);
  int sms = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return cudaFailure("cudaDeviceGetAttribute", err);
  LaunchLimits limits;
  // One block per SM unless BRAID_CUDA_MAX_BLOCKS says otherwise. A launch replaces this with
  // what the SMs hold of its kernel at once (residency(), above) when the variable is unset.
  limits.maxBlocks = static_cast<unsigned>(maxBlocksEnv() > 0 ? maxBlocksEnv() : std::max(sms, 1));
  limits.maxThreadsPerBlock = 512;
  return limits;
}

Status preloadKernels() {
  cudaError_t first = cudaSuccess;
  forEachKernel([&](device_build::KernelFn k) {
    cudaFuncAttributes attr{};
    if (first == cudaSuccess) first = cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(k));
  });
  if (first != cudaSuccess) return cudaFailure("cudaFuncGetAttributes (loading the reduce-copy kernels)", first);
  return Status::ok();
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

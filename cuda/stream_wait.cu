#include "cuda/stream_wait.h"

#include <string>

#include <cuda_runtime.h>

#include "cuda/stream_wait.cuh"

namespace braid::cuda {

Status launchWaitFlag(const void* deviceFlag, uint32_t value, void* stream) {
  device_build::waitFlagKernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint32_t*>(deviceFlag), value);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return Status(Code::kSystemError, std::string("CUDA: launching the stream-wait kernel: ") + cudaGetErrorName(err) +
                                          " (" + cudaGetErrorString(err) + ")");
  return Status::ok();
}

Status preloadWaitFlag() {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, device_build::waitFlagKernel);
  if (err != cudaSuccess)
    return Status(Code::kSystemError, std::string("CUDA: loading the stream-wait kernel: ") + cudaGetErrorName(err) +
                                          " (" + cudaGetErrorString(err) + ")");
  return Status::ok();
}

}  // namespace braid::cuda

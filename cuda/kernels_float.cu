// Reduce-copy kernels for fp32 and fp64. Built by nvcc for the device and, included from
// host_kernels_float.cc, for the CPU executor.
#include "cuda/kernel_table.cuh"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

KernelFn floatKernel(DeviceDataType type, ReduceOp op) {
  switch (type) {
    case DeviceDataType::kFloat32: return arithmeticKernel<Float32Traits>(op);
    case DeviceDataType::kFloat64: return arithmeticKernel<Float64Traits>(op);
    default: return nullptr;
  }
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

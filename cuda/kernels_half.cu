// Reduce-copy kernels for fp16 and bf16 (fp32 compute, one rounding per step). Built by
// nvcc for the device and, included from host_kernels_float.cc, for the CPU executor.
#include "cuda/kernel_table.cuh"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

KernelFn halfKernel(DeviceDataType type, ReduceOp op) {
  switch (type) {
    case DeviceDataType::kFloat16: return arithmeticKernel<Float16Traits>(op);
    case DeviceDataType::kBFloat16: return arithmeticKernel<BFloat16Traits>(op);
    default: return nullptr;
  }
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

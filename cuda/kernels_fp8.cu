// Reduce-copy kernels for OCP fp8 E4M3 and E5M2 (fp32 compute, one saturating rounding
// per step). Built by nvcc for the device and, included from host_kernels_int.cc, for the
// CPU executor.
#include "cuda/kernel_table.cuh"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

KernelFn fp8Kernel(DeviceDataType type, ReduceOp op) {
  switch (type) {
    case DeviceDataType::kFloat8E4M3: return arithmeticKernel<Fp8E4M3Traits>(op);
    case DeviceDataType::kFloat8E5M2: return arithmeticKernel<Fp8E5M2Traits>(op);
    default: return nullptr;
  }
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

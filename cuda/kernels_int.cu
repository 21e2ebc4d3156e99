// Reduce-copy kernels for the integer types. Built by nvcc for the device and, included
// from host_kernels_int.cc, by the host compiler for the CPU executor.
#include "cuda/kernel_table.cuh"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

KernelFn integerKernel(DeviceDataType type, ReduceOp op) {
  switch (type) {
    case DeviceDataType::kInt8: return arithmeticKernel<Int8Traits>(op);
    case DeviceDataType::kUint8: return arithmeticKernel<Uint8Traits>(op);
    case DeviceDataType::kInt16: return arithmeticKernel<Int16Traits>(op);
    case DeviceDataType::kUint16: return arithmeticKernel<Uint16Traits>(op);
    case DeviceDataType::kInt32: return arithmeticKernel<Int32Traits>(op);
    case DeviceDataType::kUint32: return arithmeticKernel<Uint32Traits>(op);
    case DeviceDataType::kInt64: return arithmeticKernel<Int64Traits>(op);
    case DeviceDataType::kUint64: return arithmeticKernel<Uint64Traits>(op);
    default: return nullptr;
  }
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

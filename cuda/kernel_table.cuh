#pragma once
// Which compiled kernel runs a KernelPlan. Each kernels_<family>.cu instantiates the
// reduce-copy template for its element types; the same files are built for the device by
// nvcc (braid_cuda_kernels) and for the host by g++ (braid_cuda_host, through
// host_kernels_*.cc), one family per translation unit so the builds run in parallel.

#include "cuda/reduce_copy.cuh"
#include "cuda/reduce_copy.h"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

// Each returns nullptr for a type or op outside its family.
KernelFn integerKernel(DeviceDataType type, ReduceOp op);  // kernels_int.cu
KernelFn halfKernel(DeviceDataType type, ReduceOp op);     // kernels_half.cu: fp16, bf16
KernelFn floatKernel(DeviceDataType type, ReduceOp op);    // kernels_float.cu: fp32, fp64
KernelFn fp8Kernel(DeviceDataType type, ReduceOp op);      // kernels_fp8.cu
KernelFn bytesKernel(ReduceOp op);                         // kernels_bytes.cu: copy, bitwise

inline KernelFn selectKernel(const KernelPlan& plan) {
  if (plan.kind == KernelKind::kBytes) return bytesKernel(plan.op);
  switch (plan.type) {
    case DeviceDataType::kInt8: case DeviceDataType::kUint8: case DeviceDataType::kInt16:
    case DeviceDataType::kUint16: case DeviceDataType::kInt32: case DeviceDataType::kUint32:
    case DeviceDataType::kInt64: case DeviceDataType::kUint64:
      return integerKernel(plan.type, plan.op);
    case DeviceDataType::kFloat16: case DeviceDataType::kBFloat16:
      return halfKernel(plan.type, plan.op);
    case DeviceDataType::kFloat32: case DeviceDataType::kFloat64:
      return floatKernel(plan.type, plan.op);
    case DeviceDataType::kFloat8E4M3: case DeviceDataType::kFloat8E5M2:
      return fp8Kernel(plan.type, plan.op);
  }
  return nullptr;
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

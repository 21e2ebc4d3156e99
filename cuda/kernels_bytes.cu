// The byte kernels: copies (one source, any type, bit for bit) and the bitwise ops (raw
// bits, any type), with `count` in bytes. Built by nvcc for the device and, included from
// host_kernels_int.cc, for the CPU executor.
#include "cuda/kernel_table.cuh"

namespace braid::cuda::BRAID_CUDA_KERNEL_NS {

KernelFn bytesKernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return &reduceCopyKernel<BytesTraits, CopyOp>;
    case ReduceOp::kBand: return &reduceCopyKernel<BytesTraits, AndOp>;
    case ReduceOp::kBor: return &reduceCopyKernel<BytesTraits, OrOp>;
    case ReduceOp::kBxor: return &reduceCopyKernel<BytesTraits, XorOp>;
    default: return nullptr;
  }
}

}  // namespace braid::cuda::BRAID_CUDA_KERNEL_NS

// The fp16/bf16 and fp32/fp64 kernel families compiled by the host compiler for the CPU
// executor: the very .cu sources nvcc builds for the device.
#include "cuda/kernels_float.cu"
#include "cuda/kernels_half.cu"

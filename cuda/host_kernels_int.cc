// The integer, fp8 and byte kernel families compiled by the host compiler for the CPU
// executor: the very .cu sources nvcc builds for the device.
#include "cuda/kernels_bytes.cu"
#include "cuda/kernels_fp8.cu"
#include "cuda/kernels_int.cu"

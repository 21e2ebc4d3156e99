// The kernels for AVX-512 F/BW/VL/DQ + F16C, built with those -m flags (CMakeLists.txt).
// Nothing in this file may run before the dispatcher has checked the CPU; see
// kernels_impl.h.
#define BRAID_REDUCE_ISA avx512
#include "reduce/kernels_impl.h"

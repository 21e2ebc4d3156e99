// The kernels for AVX2 + F16C + FMA, built with those -m flags (CMakeLists.txt). Nothing in
// this file may run before the dispatcher has checked the CPU; see kernels_impl.h.
#define BRAID_REDUCE_ISA avx2
#include "reduce/kernels_impl.h"

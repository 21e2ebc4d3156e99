// The kernels for the baseline instruction set (SSE2 on x86-64, whatever the target
// guarantees elsewhere), built without extra -m flags so that they run on every CPU; the
// dispatcher falls back to them when nothing better is available. See kernels_impl.h.
#define BRAID_REDUCE_ISA scalar
#include "reduce/kernels_impl.h"

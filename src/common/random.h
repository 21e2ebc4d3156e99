#pragma once
// 64 random bits from the kernel (getrandom), for values nobody outside the process should
// predict: session nonces, shared-memory segment names.

#include <cstdint>

namespace braid {

// getrandom(2); on a kernel without it, std::random_device mixed with the clock (distinct
// per process and call, not cryptographic). Thread-safe.
uint64_t randomU64();

}  // namespace braid

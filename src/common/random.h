#pragma once
// 64 random bits from the kernel (getrandom), for values nobody outside the process should
// predict: session nonces, shared-memory segment names, job keys and challenges.

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid {

// getrandom(2); on a kernel without it, std::random_device mixed with the clock (distinct
// per process and call, not cryptographic). Thread-safe.
uint64_t randomU64();

// `bytes` random bytes at `out` (randomU64 a word at a time). Thread-safe.
void randomBytes(void* out, size_t bytes);

// `bytes` random bytes as a string (challenges).
std::string randomString(size_t bytes);

}  // namespace braid

#include "common/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace braid {

#if defined(__x86_64__)
namespace {

// Distances (destination minus source, modulo 4 KiB) at which `rep movsb` may stall, and
// the size from which glibc may use it (its default threshold is 2 KiB; a tunable lowers
// it to 256 bytes).
constexpr uintptr_t kAliasedDistance = 64;
constexpr size_t kStringCopyMinBytes = 256;

// 64 bytes a turn with SSE2 (every x86-64 has it). The empty asm keeps the compiler from
// recognizing the loop as a copy and calling memcpy for it.
void copyVectors(char* d, const char* s, size_t bytes) {
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    asm volatile("" ::: "memory");
  }
  if (i < bytes) std::memcpy(d + i, s + i, bytes - i);  // under 64 bytes: no string instruction
}

}  // namespace
#endif

void copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
#if defined(__x86_64__)
  const uintptr_t distance = (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  if (bytes >= kStringCopyMinBytes && distance != 0 && distance < kAliasedDistance) {
    copyVectors(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace braid

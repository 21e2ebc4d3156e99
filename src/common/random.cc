#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

namespace braid {

uint64_t randomU64() {
  uint64_t v = 0;
  size_t got = 0;
  while (got < sizeof(v)) {
    ssize_t n = getrandom(reinterpret_cast<char*>(&v) + got, sizeof(v) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // ENOSYS (very old kernel): fall back below
    }
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(v)) {
    std::random_device rd;
    v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return v;
}

void randomBytes(void* out, size_t bytes) {
  auto* p = static_cast<char*>(out);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t v = randomU64();
    std::memcpy(p + i, &v, bytes - i < 8 ? bytes - i : 8);
  }
}

std::string randomString(size_t bytes) {
  std::string s(bytes, '\0');
  randomBytes(s.data(), bytes);
  return s;
}

}  // namespace braid

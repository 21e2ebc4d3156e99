#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <chrono>
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

}  // namespace braid

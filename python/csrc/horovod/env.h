#pragma once
// The numbers braid's Horovod core reads from the environment (HOROVOD_FUSION_THRESHOLD,
// HOROVOD_CYCLE_TIME, BRAID_HOROVOD_FUSE_BELOW, ...): unset or empty gives the default; a
// value that is not a non-negative number gives the default too, with one line on stderr
// naming it, as Horovod goes on with its defaults. 64 bits: byte thresholds may pass 2 GiB.

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace braid_hvd {

inline int64_t envInt(const char* name, int64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || errno == ERANGE || x < 0) {
    std::fprintf(stderr, "braid horovod: ignoring %s=%s (not a non-negative integer)\n", name, v);
    return dflt;
  }
  return static_cast<int64_t>(x);
}

inline double envDouble(const char* name, double dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(x) || x < 0) {
    std::fprintf(stderr, "braid horovod: ignoring %s=%s (not a non-negative number)\n", name, v);
    return dflt;
  }
  return x;
}

}  // namespace braid_hvd

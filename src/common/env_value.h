#pragma once
// Readings of environment values that libbraid's settings (core/config.cc) and the transport
// plugins, which read a few of their own, share, so that both take the same spellings.

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace braid {

// A switch: "1" or "true" is on, "0" or "false" off; false for anything else.
inline bool parseSwitch(const char* v, bool* on) {
  if (!std::strcmp(v, "1") || !std::strcmp(v, "true")) *on = true;
  else if (!std::strcmp(v, "0") || !std::strcmp(v, "false")) *on = false;
  else return false;
  return true;
}

// A count (bytes, say): decimal digits alone, no sign or space, within 64 bits.
inline bool parseCount(const char* v, uint64_t* n) {
  if (*v < '0' || *v > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*end || errno) return false;
  *n = x;
  return true;
}

}  // namespace braid

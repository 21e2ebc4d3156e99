#pragma once
// How stores keep counters: add() stores a decimal string, like PyTorch's c10d stores, so
// that get() on a counter returns readable text and foreign stores interoperate.

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace braid::bootstrap {

// Parses a whole string as a decimal int64; false for anything else (empty, spaces,
// trailing bytes, overflow).
inline bool parseCounter(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (i == 0 && c == '-' && s.size() > 1))) return false;
  }
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

}  // namespace braid::bootstrap

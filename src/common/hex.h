#pragma once
// Bytes as lowercase hex and back, for handles and secrets that travel inside text names.

#include <cstddef>
#include <string>

namespace braid {

inline std::string hex(const void* p, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<const unsigned char*>(p)[i];
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// Fills `n` bytes at `out` from `text`, exactly 2n lowercase hex digits; false (and `out`
// unspecified) otherwise.
inline bool unhex(const std::string& text, void* out, size_t n) {
  if (text.size() != 2 * n || text.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  const auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < n; ++i)
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(nib(text[2 * i]) << 4 | nib(text[2 * i + 1]));
  return true;
}

}  // namespace braid

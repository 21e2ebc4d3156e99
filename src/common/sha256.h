#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for braid's job authentication: a few
// short messages per connection, so a plain portable implementation is fast enough and keeps
// libbraid free of a crypto library dependency. Not for bulk data.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace braid {

using Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest finish();

 private:
  void block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;     // bytes in buf_
  uint64_t total_ = 0;  // bytes hashed so far
};

Digest sha256(std::string_view data);

// HMAC-SHA256 of the concatenation of `parts` under `key` (any length; longer than a
// block is hashed first, as RFC 2104 says).
Digest hmacSha256(std::string_view key, std::initializer_list<std::string_view> parts);

// Compares in time independent of where the inputs differ, so a forger learns nothing from
// how fast a wrong MAC is refused.
bool equalConstantTime(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace braid

// Pieces of the UCX plugin that need no UCX worker, built into a test of their own.
#include <cstdint>

#include "support/catch.h"
#include "transports/ucx/ucx_connection.h"

using braid::transport::ucx::eagerMaxUnder;

TEST_CASE("ucx: the largest eager message under a UCX_RNDV_THRESH value", "[ucx]") {
  constexpr size_t kUnknown = 12345;
  CHECK(eagerMaxUnder("131073", kUnknown) == 131072);  // what braid sets over tcp
  CHECK(eagerMaxUnder("262145", kUnknown) == 262144);
  CHECK(eagerMaxUnder("65537", kUnknown) == 65536);    // ... and with shared memory
  CHECK(eagerMaxUnder("64k", kUnknown) == 65535);
  CHECK(eagerMaxUnder("64K", kUnknown) == 65535);
  CHECK(eagerMaxUnder("1mb", kUnknown) == (size_t{1} << 20) - 1);
  CHECK(eagerMaxUnder("2G", kUnknown) == (size_t{2} << 30) - 1);
  CHECK(eagerMaxUnder("inf", kUnknown) == SIZE_MAX);
  CHECK(eagerMaxUnder("99999999999999999999", kUnknown) == SIZE_MAX);  // beyond any message
  CHECK(eagerMaxUnder("18446744073709551615g", kUnknown) == SIZE_MAX);
  CHECK(eagerMaxUnder("-1", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder(" 64k", kUnknown) == kUnknown);
  // UCX's own choice, and what does not parse: the caller's guess.
  CHECK(eagerMaxUnder("auto", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder(nullptr, kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("0", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("64x", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("k", kUnknown) == kUnknown);
}

// The numbers braid's Horovod core reads from the environment (python/csrc/horovod/env.h),
// tested here since the core itself builds only into the Python extension.

#include <cstdint>
#include <cstdlib>

#include "python/csrc/horovod/env.h"
#include "support/catch.h"

namespace {

constexpr const char* kVar = "BRAID_TEST_HVD_ENV";

struct Env {
  explicit Env(const char* v) {
    if (v) setenv(kVar, v, 1);
    else unsetenv(kVar);
  }
  ~Env() { unsetenv(kVar); }
};

}  // namespace

TEST_CASE("horovod env: integers of 64 bits, defaults for unset, empty and malformed values", "[unit]") {
  using braid_hvd::envInt;
  {
    Env e(nullptr);
    CHECK(envInt(kVar, 7) == 7);
  }
  {
    Env e("");
    CHECK(envInt(kVar, 7) == 7);
  }
  {
    Env e("134217728");
    CHECK(envInt(kVar, 7) == 134217728);
  }
  {
    // A fusion threshold of 4 GiB, which an int would have wrapped to 0 (no fusion at all).
    Env e("4294967296");
    CHECK(envInt(kVar, 7) == int64_t{4294967296});
  }
  for (const char* bad : {"abc", "12x", "-1", "99999999999999999999999"}) {
    Env e(bad);
    INFO(bad);
    CHECK(envInt(kVar, 7) == 7);
  }
}

TEST_CASE("horovod env: non-negative finite numbers, defaults otherwise", "[unit]") {
  using braid_hvd::envDouble;
  {
    Env e("2.5");
    CHECK(envDouble(kVar, 1.0) == 2.5);
  }
  {
    Env e("0");
    CHECK(envDouble(kVar, 1.0) == 0.0);
  }
  for (const char* bad : {"", "fast", "1.5ms", "-3", "inf", "nan", "1e999"}) {
    Env e(bad);
    INFO(bad);
    CHECK(envDouble(kVar, 1.0) == 1.0);
  }
}

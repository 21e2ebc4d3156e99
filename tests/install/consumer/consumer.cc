#include <braid/braid.hpp>

#include <cstdio>

int main() {
  try {
    braid::InvalidArgument e("probe");
    std::printf("consumer_cxx: %s (code %d)\n", e.what(), static_cast<int>(e.code()));
    return e.code() == braidInvalidArgument ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

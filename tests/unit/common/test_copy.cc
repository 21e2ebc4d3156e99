// copyBytes: memcpy, with a vector loop at the distances where `rep movsb` stalls.

#include "common/copy.h"

#include <cstdlib>
#include <cstring>
#include <random>

#include "support/catch.h"

using braid::copyBytes;

TEST_CASE("copyBytes is exact at every distance modulo 4 KiB, the loop's and memcpy's", "[unit]") {
  // Distances 1-63 (destination past the source, modulo a page) take the vector loop, the
  // rest memcpy; sizes around the loop's 64-byte turn and its 256-byte floor.
  const size_t kSizes[] = {0, 1, 63, 64, 65, 255, 256, 257, 4096 + 13, 70000};
  const size_t kRegion = 20 * 4096;  // a multiple of the alignment, as aligned_alloc asks
  std::mt19937_64 rng(7);
  auto* srcBase = static_cast<unsigned char*>(std::aligned_alloc(4096, kRegion));
  auto* dstBase = static_cast<unsigned char*>(std::aligned_alloc(4096, kRegion));
  REQUIRE(srcBase);
  REQUIRE(dstBase);
  for (size_t srcOff : {0, 16, 4000})
    for (size_t distance : {0, 1, 8, 16, 31, 32, 48, 63, 64, 65, 127, 2048, 4080, 4095}) {
      const size_t dstOff = (srcOff + distance) % 4096;
      for (size_t bytes : kSizes) {
        for (size_t i = 0; i < kRegion; ++i) srcBase[i] = static_cast<unsigned char>(rng());
        std::memset(dstBase, 0xA5, kRegion);
        copyBytes(dstBase + dstOff, srcBase + srcOff, bytes);
        INFO("bytes " << bytes << " src+" << srcOff << " dst+" << dstOff);
        CHECK(std::memcmp(dstBase + dstOff, srcBase + srcOff, bytes) == 0);
        // Nothing before or after the destination is touched.
        size_t outside = 0;
        for (size_t i = 0; i < dstOff; ++i) outside += dstBase[i] != 0xA5;
        for (size_t i = dstOff + bytes; i < kRegion; ++i) outside += dstBase[i] != 0xA5;
        CHECK(outside == 0);
      }
    }
  std::free(srcBase);
  std::free(dstBase);
}

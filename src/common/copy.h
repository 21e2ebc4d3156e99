#pragma once
// A memcpy that avoids one slow case of the string instruction, for the copies into and out
// of transport slots (every layer from the transports up uses it).

#include <cstddef>

namespace braid {

// memcpy, except where the destination starts 1-63 bytes after the source modulo 4 KiB:
// there a vector loop copies instead. glibc moves blocks above about 2 KiB with `rep movsb`,
// which at those distances runs at about 2 GB/s on AMD Zen 3 (EPYC, family 25) against
// 33 GB/s for the loop (64 KiB blocks in cache, distances 1-31; docs/performance.md). A
// buffer from malloc starts 16 bytes into a page and a slot at a page boundary, so a
// receiver copying a slot into such a buffer meets exactly that distance. Buffers must not
// overlap.
void copyBytes(void* dst, const void* src, size_t bytes);

}  // namespace braid

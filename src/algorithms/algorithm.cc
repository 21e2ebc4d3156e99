#include "algorithms/algorithm.h"

#include <algorithm>

namespace braid::algorithms {

RingPos ringPosition(const std::vector<int>& ring, int rank) {
  RingPos p;
  int n = static_cast<int>(ring.size());
  p.index = static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
  p.prev = ring[(p.index + n - 1) % n];
  p.next = ring[(p.index + 1) % n];
  return p;
}

int roundsFor(size_t maxStepBytes, size_t roundBytes) {
  if (roundBytes == 0 || maxStepBytes == 0) return 1;
  size_t r = (maxStepBytes + roundBytes - 1) / roundBytes;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(r, 1u << 30)));
}

}  // namespace braid::algorithms

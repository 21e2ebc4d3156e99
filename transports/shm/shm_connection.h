#pragma once
// A mapped shared-memory segment holding one SlotFifo.

#include <cstddef>
#include <functional>
#include <string>

#include "common/status.h"

namespace braid::transport::shm {

struct Segment {
  std::string name;
  void* mem = nullptr;
  size_t bytes = 0;
  ~Segment();
};

// Creates, sizes, binds and formats a new segment (receiver side), exclusively, under the
// first name from `nextName` that is free (up to 16 tries: a name someone else holds is
// skipped, never opened). The name used is in the Segment.
StatusOr<Segment*> createSegment(const std::function<std::string()>& nextName, int nslots, size_t slotBytes,
                                 uint64_t nonce, int numaNode);
// Maps an existing segment and validates its FIFO header (sender side).
StatusOr<Segment*> openSegment(const std::string& name, uint64_t nonce);

}  // namespace braid::transport::shm

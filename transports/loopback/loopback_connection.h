#pragma once
// Heap-backed FIFO regions shared by reference count between the two ends of a loopback
// connection, so that either communicator may be destroyed first.

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace braid::transport::loopback {

struct Region {
  void* mem = nullptr;
  size_t bytes = 0;
  ~Region();
};

// Allocates and formats a FIFO region and registers it under a process-unique handle.
std::shared_ptr<Region> createRegion(int nslots, size_t slotBytes, uint64_t nonce, std::string* handle);
// Resolves a handle published by createRegion in this process.
StatusOr<std::shared_ptr<Region>> lookupRegion(const std::string& handle, uint64_t nonce);
// Drops the handle; existing references stay valid.
void unregisterRegion(const std::string& handle);

}  // namespace braid::transport::loopback

#pragma once
// Tells a registration cache when memory under its regions is unmapped, so that a cached
// registration never outlives the pages it pinned: a buffer freed and another mapped at the
// same address would otherwise be sent from the old pages (the NIC reads through the
// registration, not through the process's page tables). The hooks are UCX's (libucm's
// UCM_EVENT_VM_UNMAPPED, which fires before munmap, mremap, madvise(DONTNEED), shmdt and a
// heap shrinking, as UCX's own registration cache uses it), opened at run time; without
// them the verbs transport sends through its slots only.

#include <memory>
#include <string>

#include "common/status.h"
#include "transports/ibverbs/registration_cache.h"

namespace braid::transport::ibverbs {

class UnmapWatch {
 public:
  // Starts passing every unmap to cache->noteUnmapped; fails, saying why, where the hooks
  // are not built in or cannot be installed (UCX_MEM_EVENTS=no, for one).
  static StatusOr<std::unique_ptr<UnmapWatch>> start(RegistrationCache* cache);
  // Stops; no call reaches the cache after this returns.
  ~UnmapWatch();
  UnmapWatch(const UnmapWatch&) = delete;
  UnmapWatch& operator=(const UnmapWatch&) = delete;

 private:
  explicit UnmapWatch(RegistrationCache* cache) : cache_(cache) {}
  RegistrationCache* cache_;
};

}  // namespace braid::transport::ibverbs

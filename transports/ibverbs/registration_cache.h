#pragma once
// A cache of memory registrations for user buffers, so that a zero-copy path (RDMA from
// and into the caller's tensors rather than through the slot slabs) pays for
// ibv_reg_mr once per buffer instead of once per operation. Registering pins pages and
// costs tens of microseconds per megabyte; collectives reuse the same buffers call after
// call, which is what makes caching pay.
//
// Regions are page-aligned (the unit the NIC translates and the kernel pins). A lookup
// reuses any cached region that covers the requested range; otherwise the union of the
// range and the unreferenced regions it overlaps is registered as one, and those are
// dropped, so a buffer that grows does not leave a trail of small registrations.
// Regions nobody holds are evicted least recently used first when the cache exceeds its
// entry or byte budget; held regions are never evicted (the budget may then be exceeded
// until they are released). invalidate() is for memory the caller frees or remaps: its
// regions leave the lookup at once and are deregistered when their last holder lets go.
// noteUnmapped() is the same for a memory hook (memory_hooks.h), which runs inside munmap,
// madvise or mremap on whatever thread calls them: it only queues the range, and the next
// acquire() invalidates it before it looks anything up.
//
// Thread-safe: the connections of one transport run on different threads and share it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>

#include "common/status.h"

namespace braid::transport::ibverbs {

// What registering produced: the keys the NIC knows the region by, and the registrar's
// own handle (the ibv_mr).
struct MemoryKey {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  void* handle = nullptr;
};

// Registers and deregisters regions: the protection domain in the plugin, a fake in tests.
class Registrar {
 public:
  virtual ~Registrar() = default;
  // Registers [addr, addr + bytes) (page-aligned). May fail (out of pinnable memory).
  virtual StatusOr<MemoryKey> registerRegion(void* addr, size_t bytes) = 0;
  virtual void deregisterRegion(const MemoryKey& key) = 0;
};

class RegistrationCache {
 public:
  struct Region {
    uintptr_t start = 0;  // page-aligned
    uintptr_t end = 0;    // page-aligned, exclusive
    MemoryKey key;
    int refs = 0;
    bool stale = false;   // invalidated while held: no longer found, freed on last release
    std::list<Region*>::iterator lru;  // position among the unreferenced (valid if refs == 0)
  };
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    uint64_t merges = 0;  // cached regions folded into a larger new one
  };

  // `pageBytes` must be a power of two; tests use small pages to keep numbers readable.
  RegistrationCache(Registrar* registrar, size_t maxEntries, size_t maxBytes, size_t pageBytes = 4096);
  // Deregisters everything; every region must have been released by then.
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A region covering [addr, addr + bytes), registered if need be, with one more holder.
  // The pointer stays valid until the matching release(). kInvalidArgument for an empty
  // or wrapping range; the registrar's error when registering fails.
  StatusOr<const Region*> acquire(const void* addr, size_t bytes);
  // Drops one holder of a region acquire() returned.
  void release(const Region* region);
  // The caller freed or remapped [addr, addr + bytes): its regions are never returned again.
  void invalidate(const void* addr, size_t bytes);
  // [addr, addr + bytes) is about to be unmapped (a memory hook, any thread). Takes no lock
  // that a caller of acquire() holds and allocates nothing: the range waits in a queue of
  // kPendingMax, and acquire() invalidates it first thing. A range outside every region
  // ever registered is ignored; when the queue is full, acquire() invalidates everything.
  void noteUnmapped(const void* addr, size_t bytes) noexcept;
  static constexpr int kPendingMax = 64;

  size_t entries() const;   // regions registered now (stale held ones included)
  size_t bytes() const;     // bytes registered now
  Stats stats() const;

 private:
  Region* findCovering(uintptr_t start, uintptr_t end);
  void evictLocked();
  void dropLocked(Region* r);  // deregisters and frees an unreferenced region
  void invalidateLocked(uintptr_t addr, size_t bytes);  // invalidate() under mu_
  void drainPendingLocked();   // applies what noteUnmapped queued

  Registrar* registrar_;
  const size_t maxEntries_;
  const size_t maxBytes_;
  const uintptr_t pageMask_;
  mutable std::mutex mu_;
  // Live regions by start address; regions may overlap when held ones are involved.
  std::multimap<uintptr_t, Region*> byStart_;
  std::list<Region*> unreferenced_;  // least recently used first
  size_t entries_ = 0;
  size_t bytes_ = 0;
  size_t largest_ = 0;  // the longest region ever cached: bounds the backward search
  Stats stats_;

  // noteUnmapped's queue, under a spin flag of its own (a hook may run while mu_ is held by
  // the same thread: ibv_dereg_mr or a free inside the cache can unmap memory).
  std::atomic_flag pendingBusy_ = ATOMIC_FLAG_INIT;
  std::atomic<bool> anyPending_{false};
  uintptr_t pending_[kPendingMax][2] = {};  // address, bytes
  int npending_ = 0;
  bool pendingOverflow_ = false;
  // The lowest start and highest end of any region ever registered: a hook ignores the
  // (many) unmaps of memory no region covers without touching the queue.
  std::atomic<uintptr_t> lowest_{~uintptr_t{0}};
  std::atomic<uintptr_t> highest_{0};
};

}  // namespace braid::transport::ibverbs

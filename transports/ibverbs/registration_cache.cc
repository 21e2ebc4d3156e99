#include "transports/ibverbs/registration_cache.h"

#include <algorithm>
#include <vector>

namespace braid::transport::ibverbs {

RegistrationCache::RegistrationCache(Registrar* registrar, size_t maxEntries, size_t maxBytes, size_t pageBytes)
    : registrar_(registrar), maxEntries_(maxEntries), maxBytes_(maxBytes), pageMask_(pageBytes - 1) {}

RegistrationCache::~RegistrationCache() {
  // Held regions at this point are a caller's bug; deregistering them anyway is still
  // better than leaving pinned memory behind the protection domain's destruction.
  for (auto& [start, r] : byStart_) {
    registrar_->deregisterRegion(r->key);
    delete r;
  }
}

RegistrationCache::Region* RegistrationCache::findCovering(uintptr_t start, uintptr_t end) {
  // Candidates start at or before `start` and no earlier than the longest region allows.
  auto it = byStart_.upper_bound(start);
  while (it != byStart_.begin()) {
    --it;
    Region* r = it->second;
    if (r->end >= end) return r;
    if (start - it->first >= largest_) break;
  }
  return nullptr;
}

StatusOr<const RegistrationCache::Region*> RegistrationCache::acquire(const void* addr, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (bytes == 0) return invalidArgument("ibverbs: registering an empty range");
  if (a + bytes < a || a + bytes + pageMask_ < a + bytes) {
    return invalidArgument("ibverbs: registering a range that wraps around the address space");
  }
  uintptr_t start = a & ~pageMask_;
  uintptr_t end = (a + bytes + pageMask_) & ~pageMask_;

  std::lock_guard<std::mutex> lock(mu_);
  drainPendingLocked();
  if (Region* r = findCovering(start, end)) {
    ++stats_.hits;
    if (r->refs++ == 0) unreferenced_.erase(r->lru);
    return static_cast<const Region*>(r);
  }
  ++stats_.misses;

  // Fold in the unreferenced regions this one overlaps (touching counts: registering one
  // region across both is cheaper than keeping two).
  std::vector<std::multimap<uintptr_t, Region*>::iterator> merged;
  const uintptr_t lo = start > largest_ ? start - largest_ : 0;
  for (auto it = byStart_.lower_bound(lo); it != byStart_.end() && it->first <= end; ++it) {
    Region* r = it->second;
    if (r->end < start || r->refs > 0) continue;
    start = std::min(start, r->start);
    end = std::max(end, r->end);
    merged.push_back(it);
  }
  StatusOr<MemoryKey> key = registrar_->registerRegion(reinterpret_cast<void*>(start), end - start);
  if (!key.isOk()) return key.status();
  for (auto it : merged) {
    Region* r = it->second;
    byStart_.erase(it);
    unreferenced_.erase(r->lru);
    dropLocked(r);
    ++stats_.merges;
  }
  auto* r = new Region;
  r->start = start;
  r->end = end;
  r->key = key.value();
  r->refs = 1;
  byStart_.emplace(start, r);
  if (start < lowest_.load(std::memory_order_relaxed)) lowest_.store(start, std::memory_order_relaxed);
  if (end > highest_.load(std::memory_order_relaxed)) highest_.store(end, std::memory_order_relaxed);
  ++entries_;
  bytes_ += end - start;
  largest_ = std::max<size_t>(largest_, end - start);
  evictLocked();
  return static_cast<const Region*>(r);
}

void RegistrationCache::release(const Region* region) {
  std::lock_guard<std::mutex> lock(mu_);
  Region* r = const_cast<Region*>(region);
  if (--r->refs > 0) return;
  if (r->stale) {
    dropLocked(r);
    return;
  }
  unreferenced_.push_back(r);
  r->lru = std::prev(unreferenced_.end());
  evictLocked();
}

void RegistrationCache::invalidate(const void* addr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  invalidateLocked(reinterpret_cast<uintptr_t>(addr), bytes);
}

void RegistrationCache::invalidateLocked(uintptr_t a, size_t bytes) {
  const uintptr_t start = a & ~pageMask_;
  const uintptr_t end = bytes > ~uintptr_t{0} - a - pageMask_ ? ~uintptr_t{0} : (a + bytes + pageMask_) & ~pageMask_;
  const uintptr_t lo = start > largest_ ? start - largest_ : 0;
  for (auto it = byStart_.lower_bound(lo); it != byStart_.end() && it->first < end;) {
    Region* r = it->second;
    if (r->end <= start) {
      ++it;
      continue;
    }
    it = byStart_.erase(it);
    if (r->refs == 0) {
      unreferenced_.erase(r->lru);
      dropLocked(r);
    } else {
      r->stale = true;
    }
  }
}

void RegistrationCache::noteUnmapped(const void* addr, size_t bytes) noexcept {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = bytes > ~uintptr_t{0} - a ? ~uintptr_t{0} : a + bytes;
  if (bytes == 0 || end <= lowest_.load(std::memory_order_relaxed) || a >= highest_.load(std::memory_order_relaxed))
    return;
  while (pendingBusy_.test_and_set(std::memory_order_acquire)) {
  }
  if (npending_ < kPendingMax) {
    pending_[npending_][0] = a;
    pending_[npending_][1] = bytes;
    ++npending_;
  } else {
    pendingOverflow_ = true;
  }
  anyPending_.store(true, std::memory_order_relaxed);
  pendingBusy_.clear(std::memory_order_release);
}

void RegistrationCache::drainPendingLocked() {
  if (!anyPending_.load(std::memory_order_acquire)) return;
  uintptr_t ranges[kPendingMax][2];
  while (pendingBusy_.test_and_set(std::memory_order_acquire)) {
  }
  const int n = npending_;
  const bool overflow = pendingOverflow_;
  std::copy(&pending_[0][0], &pending_[0][0] + 2 * n, &ranges[0][0]);
  npending_ = 0;
  pendingOverflow_ = false;
  anyPending_.store(false, std::memory_order_relaxed);
  pendingBusy_.clear(std::memory_order_release);
  if (overflow) {
    invalidateLocked(0, ~uintptr_t{0});
    return;
  }
  for (int i = 0; i < n; ++i) invalidateLocked(ranges[i][0], ranges[i][1]);
}

void RegistrationCache::evictLocked() {
  while ((entries_ > maxEntries_ || bytes_ > maxBytes_) && !unreferenced_.empty()) {
    Region* r = unreferenced_.front();
    unreferenced_.pop_front();
    auto range = byStart_.equal_range(r->start);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == r) {
        byStart_.erase(it);
        break;
      }
    }
    dropLocked(r);
    ++stats_.evictions;
  }
}

void RegistrationCache::dropLocked(Region* r) {
  registrar_->deregisterRegion(r->key);
  --entries_;
  bytes_ -= r->end - r->start;
  delete r;
}

size_t RegistrationCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

size_t RegistrationCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

RegistrationCache::Stats RegistrationCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace braid::transport::ibverbs

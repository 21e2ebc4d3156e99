#include "common/core_yield.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "common/clock.h"
#include "common/foreign_load.h"

namespace braid {
namespace {

// Process-wide: the threads of a rank share its cores.
std::atomic<int64_t> pausedUntil{0};
// The last yields, the newest in bit 0: 1 where one lost a slice.
std::atomic<uint32_t> recent{0};
// The current pause's length and end, set together when one starts.
std::mutex pauseMu;
int64_t pauseLen = 0;
int64_t pauseEnd = 0;
std::atomic<uint64_t> pausesStarted{0};

constexpr uint32_t kWindowMask = (1u << kYieldWindow) - 1;

}  // namespace

bool yieldsPaused(int64_t now) { return now < pausedUntil.load(std::memory_order_relaxed); }

bool noteYield(int64_t before, int64_t after) {
  const bool lost = after - before >= kLostSliceNs;
  uint32_t old = recent.load(std::memory_order_relaxed);
  // The usual yield: short, with no loss in the window to shift out. Nothing to write, and
  // the threads of every channel yielding at once need not take the line in turn.
  if (!lost && old == 0) return true;
  uint32_t next;
  do {
    next = ((old << 1) | (lost ? 1u : 0u)) & kWindowMask;
  } while (!recent.compare_exchange_weak(old, next, std::memory_order_relaxed));
  if (!lost) return true;
  if (__builtin_popcount(next) < kLostInWindow) return false;
  std::lock_guard<std::mutex> lock(pauseMu);
  if (after < pauseEnd) return false;  // another thread started one meanwhile
  pauseLen = pauseEnd != 0 && after - pauseEnd < pauseLen ? std::min(2 * pauseLen, kMaxYieldPauseNs)
                                                          : kYieldPauseNs;
  pauseEnd = after + pauseLen;
  recent.store(0, std::memory_order_relaxed);
  pausedUntil.store(pauseEnd, std::memory_order_relaxed);
  pausesStarted.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool yieldCore() {
  const int64_t before = nowNanos();
  sched_yield();
  return noteYield(before, nowNanos());
}

bool yieldShared() {
  const int64_t before = nowNanos();
  sched_yield();
  const int64_t after = nowNanos();
  if (after - before < kLostSliceNs) return true;
  if (foreignLoadLikely(after)) (void)noteYield(before, after);
  return false;
}

void yieldOrNap() {
  if (!yieldsPaused(nowNanos())) {
    yieldCore();
    return;
  }
  timespec nap{0, kNapNs};
  nanosleep(&nap, nullptr);
}

uint64_t yieldPausesStarted() { return pausesStarted.load(std::memory_order_relaxed); }

void resetYieldPause() {
  std::lock_guard<std::mutex> lock(pauseMu);
  pauseLen = 0;
  pauseEnd = 0;
  recent.store(0, std::memory_order_relaxed);
  pausedUntil.store(0, std::memory_order_relaxed);
}

}  // namespace braid

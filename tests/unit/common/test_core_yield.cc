// core_yield: a wait's yield that loses the core to a busy process for a time slice pauses
// yields, so that waits sleep (and are woken when their data comes) instead of giving the
// core away at every step.

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "common/clock.h"
#include "common/core_yield.h"
#include "support/busy_core.h"
#include "support/catch.h"

using namespace braid;

TEST_CASE("one lost slice leaves yields on, two among the last eight pause them", "[common]") {
  resetYieldPause();
  const int64_t t = 1'000'000'000'000;
  CHECK(noteYield(t, t + 2'000));
  CHECK(noteYield(t, t + kLostSliceNs - 1));
  CHECK_FALSE(noteYield(t, t + kLostSliceNs));  // lost: this wait sleeps now
  CHECK_FALSE(yieldsPaused(t + kLostSliceNs));   // but one loss pauses nothing
  for (int i = 0; i < kYieldWindow - 1; ++i) CHECK(noteYield(t, t + 1'000));
  CHECK_FALSE(noteYield(t, t + kLostSliceNs));   // the first one has left the window
  CHECK_FALSE(yieldsPaused(t + kLostSliceNs));
  const int64_t u = t + 10'000'000;
  CHECK(noteYield(u, u + 1'000));
  CHECK_FALSE(noteYield(u, u + 3'000'000));      // two of the last eight
  const int64_t end1 = u + 3'000'000 + kYieldPauseNs;
  CHECK(yieldsPaused(u + 3'000'000));
  CHECK(yieldsPaused(end1 - 1));
  CHECK_FALSE(yieldsPaused(end1));
}

TEST_CASE("a pause that starts again soon after the last one ends is twice as long, up to a bound",
          "[common]") {
  resetYieldPause();
  int64_t t = 1'000'000'000'000;
  auto lose2 = [&](int64_t at) {
    noteYield(at, at + kLostSliceNs);
    return noteYield(at, at + kLostSliceNs);
  };
  CHECK_FALSE(lose2(t));
  int64_t end = t + kLostSliceNs + kYieldPauseNs;
  CHECK(yieldsPaused(end - 1));
  CHECK_FALSE(yieldsPaused(end));
  // Losses while paused (a thread that was yielding as it began) start nothing.
  lose2(t + 1'000'000);
  CHECK_FALSE(yieldsPaused(end));
  int64_t len = kYieldPauseNs;
  for (int i = 0; i < 8; ++i) {
    const int64_t at = end + 1'000'000;  // the busy neighbour is still there
    lose2(at);
    len = std::min(2 * len, kMaxYieldPauseNs);
    CHECK(yieldsPaused(at + kLostSliceNs + len - 1));
    CHECK_FALSE(yieldsPaused(at + kLostSliceNs + len));
    end = at + kLostSliceNs + len;
  }
  CHECK(len == kMaxYieldPauseNs);
  // Long after the last pause: the first length again.
  const int64_t later = end + 10 * kMaxYieldPauseNs;
  lose2(later);
  CHECK(yieldsPaused(later + kLostSliceNs + kYieldPauseNs - 1));
  CHECK_FALSE(yieldsPaused(later + kLostSliceNs + kYieldPauseNs));
  resetYieldPause();
  CHECK_FALSE(yieldsPaused(later + kLostSliceNs));
}

TEST_CASE("yielding beside a busy thread on the same core loses slices, and yields pause", "[common]") {
  resetYieldPause();
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  int lost = 0;
  int64_t after = 0;
  {
    braid::testing::BusyCore busy;
    REQUIRE(busy.pinHere());
    // A yield hands the core to the busy thread when the scheduler finds it due; it then
    // keeps the core for its slice. Bounded by time, not a count, on a loaded machine.
    const int64_t end = nowNanos() + 10'000'000'000;
    while (!yieldsPaused(nowNanos()) && nowNanos() < end) lost += yieldCore() ? 0 : 1;
    after = nowNanos();
  }
  REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof mine, &mine) == 0);
  CHECK(lost >= kLostInWindow);
  CHECK(yieldsPaused(after));
  // While paused, a wait with nothing to sleep on naps rather than yields: at least kNapNs.
  const int64_t before = nowNanos();
  yieldOrNap();
  CHECK(nowNanos() - before >= kNapNs);
  resetYieldPause();
}

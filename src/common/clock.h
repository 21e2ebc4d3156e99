#pragma once
// Monotonic time and deadlines.

#include <time.h>

#include <chrono>
#include <cstdint>

namespace braid {

using Clock = std::chrono::steady_clock;

inline int64_t nowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The same clock (CLOCK_MONOTONIC) at the kernel tick's resolution: a few nanoseconds to
// read, where nowNanos() costs about twenty; behind it by at most a tick (1-4 ms).
inline int64_t coarseNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// A point in time after which a wait gives up. Default-constructed: never.
class Deadline {
 public:
  Deadline() = default;
  static Deadline after(double seconds) {
    Deadline d;
    if (seconds > 0) d.at_ = nowNanos() + static_cast<int64_t>(seconds * 1e9);
    return d;
  }
  // As after(), from the coarse clock: early by at most a tick, which a timeout of seconds
  // does not notice, and cheap enough to set on every small operation.
  static Deadline afterCoarse(double seconds) {
    Deadline d;
    if (seconds > 0) d.at_ = coarseNanos() + static_cast<int64_t>(seconds * 1e9);
    return d;
  }
  // From / to CLOCK_MONOTONIC nanoseconds (0 = never), for the plugin ABI.
  static Deadline atNanos(int64_t ns) {
    Deadline d;
    d.at_ = ns;
    return d;
  }
  int64_t nanos() const { return at_; }
  bool never() const { return at_ == 0; }
  bool expired() const { return at_ != 0 && nowNanos() >= at_; }
  // Milliseconds left, clamped to [0, cap]; cap when there is no deadline.
  int remainingMillis(int cap) const {
    if (at_ == 0) return cap;
    int64_t left = (at_ - nowNanos()) / 1000000;
    if (left < 0) return 0;
    return left < cap ? static_cast<int>(left) : cap;
  }

 private:
  int64_t at_ = 0;
};

}  // namespace braid

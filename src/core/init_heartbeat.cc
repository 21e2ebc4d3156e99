#include "core/init_heartbeat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/clock.h"

namespace braid::core {

double InitHeartbeat::periodFor(int nranks) { return std::max(0.5, nranks / 1024.0); }

double InitHeartbeat::silenceFor(double timeoutSec, int nranks) {
  const double s = timeoutSec > 0 ? std::clamp(timeoutSec / 6, 3.0, 10.0) : 10.0;
  return std::max(s, 6 * periodFor(nranks));
}

InitHeartbeat::InitHeartbeat(bootstrap::Store& store, std::string prefix, int rank, int nranks, double silenceSec,
                             double periodSec)
    : store_(store),
      prefix_(std::move(prefix)),
      rank_(rank),
      watched_(nranks > 1 ? (rank + 1) % nranks : rank),
      silenceSec_(silenceSec),
      periodSec_(periodSec) {
  thread_ = std::thread([this] { loop(); });
}

InitHeartbeat::~InitHeartbeat() { stop(); }

void InitHeartbeat::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status InitHeartbeat::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void InitHeartbeat::joined(Deadline deadline) {
  stop();
  (void)store_.add(prefix_ + std::to_string(rank_), kJoined, deadline);
}

void InitHeartbeat::loop() {
  const std::string mine = prefix_ + std::to_string(rank_);
  const std::string theirs = prefix_ + std::to_string(watched_);
  const auto period = std::chrono::duration<double>(periodSec_);
  const int roundsNeeded = static_cast<int>(std::ceil(silenceSec_ / periodSec_));
  const double opSec = std::max(2.0, 4 * periodSec_);
  bool watching = watched_ != rank_;
  int64_t seen = -1;
  int64_t changedNs = nowNanos();
  int unchanged = 0;
  for (bool first = true;; first = false) {
    if (!first) {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, period, [this] { return stopping_; })) return;
    }
    // A store that fails or is slow here is the joining thread's to report: the round
    // simply does not count.
    if (!store_.add(mine, 1, Deadline::after(opSec)).isOk() || !watching) continue;
    auto v = store_.add(theirs, 0, Deadline::after(opSec));
    if (!v.isOk()) continue;
    const int64_t now = nowNanos();
    if (v.value() >= kJoined) {
      watching = false;
    } else if (v.value() != seen) {
      seen = v.value();
      changedNs = now;
      unchanged = 0;
    } else if (seen > 0 && ++unchanged >= roundsNeeded && now - changedNs >= static_cast<int64_t>(silenceSec_ * 1e9)) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", (now - changedNs) / 1e9);
      std::lock_guard<std::mutex> lock(mu_);
      status_ = Status(Code::kRemoteError,
                       "rank " + std::to_string(watched_) + " stopped while joining: it has shown no sign of life "
                           "in the job's store for " + secs +
                           " s (it exited, was stopped, or its host is unreachable; this store cannot tell when a "
                           "rank's connection ends, so its ranks watch each other)",
                       watched_);
      return;
    }
  }
}

}  // namespace braid::core

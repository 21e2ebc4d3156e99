#pragma once
// A thread that never waits (as a data loader's loop or another job would), pinned to the
// first CPU this process may run on, for tests of how waits behave beside one. Stopped and
// joined when it goes out of scope.

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace braid::testing {

class BusyCore {
 public:
  BusyCore() {
    CPU_ZERO(&cpu_);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    sched_getaffinity(0, sizeof mine, &mine);
    int c = 0;
    while (c < CPU_SETSIZE - 1 && !CPU_ISSET(c, &mine)) ++c;
    CPU_SET(c, &cpu_);
    thread_ = std::thread([this] {
      pthread_setaffinity_np(pthread_self(), sizeof cpu_, &cpu_);
      pinned_ = true;
      uint64_t n = 0;
      while (!stop_.load(std::memory_order_relaxed)) ++n;
    });
    while (!pinned_) std::this_thread::yield();
  }
  ~BusyCore() {
    stop_ = true;
    thread_.join();
  }
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;

  // Pins the calling thread to the busy thread's CPU; true on success.
  bool pinHere() const { return pthread_setaffinity_np(pthread_self(), sizeof cpu_, &cpu_) == 0; }

 private:
  cpu_set_t cpu_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> pinned_{false};
  std::thread thread_;
};

}  // namespace braid::testing

// core_latency: the round trip of a cache line between two CPUs, two threads pinned one to
// each, taking turns to write it. It tells the state of the machine a benchmark runs on:
// every shared-memory transfer between ranks pays it per line the other core wrote. On a
// virtual machine it can change while the machine runs: the 2-core VM braid's benchmarks
// ran on moved between about 50-100 ns and 320-350 ns every few tens of seconds (its two
// vCPUs placed near each other or apart), and a 64 KiB allgather between its two ranks took
// three times as long in the slow state (docs/performance.md). The benchmark scripts probe
// it before and after each run (scripts/bench_lib.sh).
//
//   core_latency            CPUs 0 and 1 of those this process may use; median of 5 bursts
//   core_latency -q         the median alone, in ns
//   core_latency -c 2,9 -n 20000 -r 9
//
// Exit status 0, 2 for bad arguments or fewer than two usable CPUs.

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// The line the two threads write in turn: the first writes odd values, the second even ones.
struct alignas(128) Line {
  std::atomic<uint64_t> turn{0};
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Round trips `n` times between the calling thread, on cpu `a`, and a thread on cpu `b`;
// nanoseconds per round trip, or a negative value when a thread cannot be pinned.
double burst(int a, int b, uint64_t n) {
  Line line;
  std::atomic<bool> pinned{false}, failed{false};
  std::thread other([&] {
    if (!pin(b)) failed.store(true);
    pinned.store(true);
    if (failed.load()) return;
    for (uint64_t i = 0; i < n; ++i) {
      while (line.turn.load(std::memory_order_acquire) != 2 * i + 1) {
        if (failed.load(std::memory_order_relaxed)) return;  // this thread could not be pinned
      }
      line.turn.store(2 * i + 2, std::memory_order_release);
    }
  });
  const bool here = pin(a);
  while (!pinned.load()) std::this_thread::yield();
  if (!here || failed.load()) {
    failed.store(true);
    other.join();
    return -1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    line.turn.store(2 * i + 1, std::memory_order_release);
    while (line.turn.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  other.join();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

int usage(const char* why) {
  if (why) std::fprintf(stderr, "core_latency: %s\n", why);
  std::fprintf(why ? stderr : stdout,
               "usage: core_latency [-c A,B] [-n ROUND_TRIPS] [-r BURSTS] [-q]\n"
               "  -c A,B   the two CPUs (default: the first two this process may run on)\n"
               "  -n N     round trips per burst (default 2000, 1 to 100000000)\n"
               "  -r N     bursts; the median is reported (default 5, 1 to 1000)\n"
               "  -q       print the median alone, in ns\n");
  return why ? 2 : 0;
}

bool parseCount(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int a = -1, b = -1;
  long n = 2000, bursts = 5;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    if (arg == "-h" || arg == "--help") return usage(nullptr);
    if (arg == "-q") {
      quiet = true;
    } else if (arg == "-c" && hasValue) {
      const std::string v = argv[++i];
      const size_t comma = v.find(',');
      long x = 0, y = 0;
      if (comma == std::string::npos || !parseCount(v.substr(0, comma).c_str(), 0, CPU_SETSIZE - 1, &x) ||
          !parseCount(v.substr(comma + 1).c_str(), 0, CPU_SETSIZE - 1, &y) || x == y)
        return usage(("-c " + v + ": expected two different CPU numbers, A,B").c_str());
      a = static_cast<int>(x);
      b = static_cast<int>(y);
    } else if (arg == "-n" && hasValue) {
      if (!parseCount(argv[++i], 1, 100000000, &n)) return usage((std::string("-n ") + argv[i] + ": expected 1 to 100000000").c_str());
    } else if (arg == "-r" && hasValue) {
      if (!parseCount(argv[++i], 1, 1000, &bursts)) return usage((std::string("-r ") + argv[i] + ": expected 1 to 1000").c_str());
    } else {
      return usage((arg + ": unknown option or missing value").c_str());
    }
  }
  if (a < 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return usage("cannot read this process's CPUs");
    for (int c = 0; c < CPU_SETSIZE && b < 0; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      if (a < 0) a = c;
      else b = c;
    }
    if (b < 0) return usage("this process may run on one CPU only: two are needed");
  }
  std::vector<double> ns;
  for (long r = 0; r < bursts; ++r) {
    const double v = burst(a, b, static_cast<uint64_t>(n));
    if (v < 0) return usage(("cannot run threads on CPUs " + std::to_string(a) + " and " + std::to_string(b)).c_str());
    ns.push_back(v);
  }
  std::sort(ns.begin(), ns.end());
  const double median = ns.size() % 2 ? ns[ns.size() / 2] : (ns[ns.size() / 2 - 1] + ns[ns.size() / 2]) / 2;
  if (quiet) {
    std::printf("%.0f\n", median);
  } else {
    std::printf("core_latency: CPUs %d and %d: %.0f ns per round trip (median of %ld bursts of %ld; min %.0f, max %.0f)\n",
                a, b, median, bursts, n, ns.front(), ns.back());
  }
  return 0;
}

// foreign_load: the CPU time the machine spent on something other than the job's processes,
// from the kernel's accounts, and yields of ranks that share cores pausing only for that.

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/core_yield.h"
#include "common/foreign_load.h"
#include "support/catch.h"

using namespace braid;

namespace {

// A child process that never waits, on `cpus` (the caller's by default); killed when done.
class BusyChild {
 public:
  explicit BusyChild(const cpu_set_t* cpus = nullptr) {
    pid_ = fork();
    if (pid_ == 0) {
      if (cpus) sched_setaffinity(0, sizeof *cpus, cpus);
      alarm(30);  // never outlives a test that failed to end it
      volatile uint64_t n = 0;
      for (;;) n = n + 1;
    }
  }
  ~BusyChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  uint64_t ticks() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
    std::stringstream s;
    s << f.rdbuf();
    uint64_t t = 0;
    parseProcessTicks(s.str(), &t);
    return t;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace

TEST_CASE("foreign_load reads the CPUs' busy time and a process's own from the kernel's texts", "[common]") {
  const std::string stat =
      "cpu  900 10 300 5000 40 7 3 11 0 0\n"
      "cpu0 100 1 50 2000 20 2 1 5 0 0\n"
      "cpu1 200 2 60 3000 20 4 2 6 0 0\n"
      "cpu12 1 1 1 1 1 1 1 0 0 0\n"
      "intr 12345 0 0\n"
      "ctxt 99\n";
  uint64_t busy = 0;
  REQUIRE(parseCpuBusy(stat, {0, 1}, &busy));
  CHECK(busy == (100 + 1 + 50 + 2 + 1) + (200 + 2 + 60 + 4 + 2));  // user nice system irq softirq
  REQUIRE(parseCpuBusy(stat, {12}, &busy));
  CHECK(busy == 5);
  CHECK_FALSE(parseCpuBusy(stat, {0, 2}, &busy));  // a CPU with no line

  uint64_t ticks = 0;
  // comm may hold spaces and parentheses; utime and stime are fields 14 and 15.
  REQUIRE(parseProcessTicks("4242 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 1234 56 0 0 20 0 1 0", &ticks));
  CHECK(ticks == 1234 + 56);
  CHECK_FALSE(parseProcessTicks("4242 (short) R 1 2", &ticks));
  CHECK_FALSE(parseProcessTicks("no parenthesis here", &ticks));
  CHECK_FALSE(parseProcessTicks("1 (x) R 1 2 3 4 5 6 7 8 9 10 12x 56", &ticks));
}

TEST_CASE("foreign_load: the share of the CPUs' capacity that went to anything but the job", "[common]") {
  CpuAccounts a, b;
  a.cpus = b.cpus = {0, 1};
  a.complete = b.complete = true;
  a.wallNs = 1'000'000'000;
  b.wallNs = 2'000'000'000;  // one second: 200 ticks of capacity at 100 a second
  a.busyTicks = 1000;
  b.busyTicks = 1200;
  a.jobTicks = 500;
  b.jobTicks = 560;
  CHECK(foreignShare(a, b, 100) == Approx(0.7));
  b.jobTicks = 700;  // the job's time alone
  CHECK(foreignShare(a, b, 100) == 0);
  b.jobTicks = 710;  // more than the busy time, by the ticks' rounding
  CHECK(foreignShare(a, b, 100) == 0);
  b.jobTicks = 560;
  b.complete = false;  // a process's record or a CPU's line missing
  CHECK(foreignShare(a, b, 100) == 0);
  b.complete = true;
  b.cpus = {0, 2};  // as many CPUs, but others: the counts do not compare
  CHECK(foreignShare(a, b, 100) == 0);
  b.cpus = a.cpus;
  CHECK(foreignShare(a, b, 100) == Approx(0.7));
  b.wallNs = a.wallNs;
  CHECK(foreignShare(a, b, 100) == 0);
}

TEST_CASE("foreign_load: a busy process outside the job counts as something else, one of the job's does not",
          "[common]") {
  BusyChild child;
  REQUIRE(child.pid() > 0);
  auto over = [&](CpuAccounts* a, CpuAccounts* b, uint64_t* childTicks) {
    const uint64_t c0 = child.ticks();
    *a = readCpuAccounts();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    *b = readCpuAccounts();
    *childTicks = child.ticks() - c0;
  };
  CpuAccounts a, b;
  uint64_t childTicks = 0;
  over(&a, &b, &childTicks);
  REQUIRE(a.complete);
  REQUIRE(b.complete);
  INFO("busy " << b.busyTicks - a.busyTicks << " job " << b.jobTicks - a.jobTicks << " child " << childTicks);
  CHECK(childTicks >= 5);  // it ran
  // Everything busy that is not this process's is at least the child's (ticks round by one
  // at each end of each count).
  CHECK(static_cast<int64_t>(b.busyTicks - a.busyTicks) - static_cast<int64_t>(b.jobTicks - a.jobTicks) + 3 >=
        static_cast<int64_t>(childTicks));

  addJobProcesses({child.pid()});
  over(&a, &b, &childTicks);
  REQUIRE(b.complete);
  INFO("as the job's: busy " << b.busyTicks - a.busyTicks << " job " << b.jobTicks - a.jobTicks << " child "
                             << childTicks);
  CHECK(b.jobTicks - a.jobTicks + 2 >= childTicks);
  removeJobProcesses({child.pid()});
  over(&a, &b, &childTicks);
  CHECK(b.jobTicks - a.jobTicks <= 2);  // removed: only this process, which slept
}

TEST_CASE("foreign_load: a process of the job that is gone leaves nothing to say", "[common]") {
  pid_t pid = 0;
  {
    BusyChild child;
    pid = child.pid();
  }
  addJobProcesses({pid});
  CHECK_FALSE(readCpuAccounts().complete);
  removeJobProcesses({pid});
  CHECK(readCpuAccounts().complete);
}

// Ranks that share cores: a yield that loses the core to a process outside the job pauses
// yields once the accounts show it (the first reading of a window gives no verdict).
TEST_CASE("yields of ranks that share cores pause beside a busy process outside the job", "[common]") {
  resetYieldPause();
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  int c = 0;
  while (c < CPU_SETSIZE - 1 && !CPU_ISSET(c, &mine)) ++c;
  CPU_SET(c, &one);
  REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0);
  int lost = 0;
  int64_t after = 0;
  {
    BusyChild busy(&one);
    REQUIRE(busy.pid() > 0);
    const int64_t end = nowNanos() + 10'000'000'000;
    while (!yieldsPaused(nowNanos()) && nowNanos() < end) lost += yieldShared() ? 0 : 1;
    after = nowNanos();
  }
  REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof mine, &mine) == 0);
  CHECK(lost >= kLostInWindow);
  CHECK(yieldsPaused(after));
  resetYieldPause();
}

#include "common/foreign_load.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "common/clock.h"

namespace braid {
namespace {

bool readWhole(const char* path, std::string* out) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// Never destroyed: a communicator may be destroyed, and a wait may yield, during the
// process's exit, after the statics made before them.
struct JobList {
  std::mutex mu;
  std::map<int64_t, int> pids;  // pid -> how many adds
};
JobList& jobs() {
  static JobList* j = new JobList;
  return *j;
}
struct Sampler {
  std::mutex mu;
  CpuAccounts last;  // under mu
  std::atomic<bool> verdict{false};
};
Sampler& sampler() {
  static Sampler* s = new Sampler;
  return *s;
}

}  // namespace

double foreignShare(const CpuAccounts& a, const CpuAccounts& b, long ticksPerSec) {
  if (!a.complete || !b.complete || a.cpus != b.cpus || a.cpus.empty() || ticksPerSec <= 0) return 0;
  if (b.wallNs <= a.wallNs || b.busyTicks < a.busyTicks || b.jobTicks < a.jobTicks) return 0;
  const double busy = static_cast<double>(b.busyTicks - a.busyTicks);
  const double job = static_cast<double>(b.jobTicks - a.jobTicks);
  if (job >= busy) return 0;
  const double capacity = static_cast<double>(a.cpus.size()) * static_cast<double>(b.wallNs - a.wallNs) / 1e9 *
                          static_cast<double>(ticksPerSec);
  return capacity > 0 ? (busy - job) / capacity : 0;
}

bool parseCpuBusy(const std::string& procStat, const std::vector<int>& cpus, uint64_t* busy) {
  std::map<int, uint64_t> per;
  std::istringstream in(procStat);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream f(line.substr(3));
    int cpu = -1;
    // user nice system idle iowait irq softirq (steal and guest are not this kernel's work)
    uint64_t v[7] = {};
    f >> cpu;
    for (uint64_t& x : v) f >> x;
    if (!f) continue;
    per[cpu] = v[0] + v[1] + v[2] + v[5] + v[6];
  }
  uint64_t sum = 0;
  for (int c : cpus) {
    auto it = per.find(c);
    if (it == per.end()) return false;
    sum += it->second;
  }
  *busy = sum;
  return true;
}

bool parseProcessTicks(const std::string& pidStat, uint64_t* ticks) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from the last
  // ')'. utime and stime are fields 14 and 15, the 12th and 13th after it.
  const size_t close = pidStat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream f(pidStat.substr(close + 1));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 1; i <= 13; ++i) {
    if (!(f >> field)) return false;
    char* end = nullptr;
    if (i == 12) utime = std::strtoull(field.c_str(), &end, 10);
    else if (i == 13) stime = std::strtoull(field.c_str(), &end, 10);
    else continue;
    if (!end || *end) return false;
  }
  *ticks = utime + stime;
  return true;
}

CpuAccounts readCpuAccounts() {
  CpuAccounts a;
  a.wallNs = nowNanos();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(::getpid(), sizeof set, &set) != 0) return a;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) a.cpus.push_back(c);
  std::string text;
  if (!readWhole("/proc/stat", &text) || !parseCpuBusy(text, a.cpus, &a.busyTicks)) return a;
  std::vector<int64_t> pids{static_cast<int64_t>(::getpid())};
  {
    JobList& j = jobs();
    std::lock_guard<std::mutex> lock(j.mu);
    for (const auto& [pid, n] : j.pids)
      if (pid != pids[0]) pids.push_back(pid);
  }
  for (int64_t pid : pids) {
    uint64_t t = 0;
    // A process that is gone, or not visible here (another pid namespace): nothing can be
    // said of the others' time.
    if (!readWhole(("/proc/" + std::to_string(pid) + "/stat").c_str(), &text) || !parseProcessTicks(text, &t))
      return a;
    a.jobTicks += t;
  }
  a.complete = true;
  return a;
}

void addJobProcesses(const std::vector<int64_t>& pids) {
  {
    JobList& j = jobs();
    std::lock_guard<std::mutex> lock(j.mu);
    for (int64_t p : pids)
      if (p > 0) ++j.pids[p];
  }
  // A first reading now, so that the first lost slice a kForeignSampleNs or more after the
  // communicator is made already has a window to judge (a short job, a benchmark's run).
  Sampler& sm = sampler();
  std::unique_lock<std::mutex> lock(sm.mu, std::try_to_lock);
  if (lock.owns_lock()) sm.last = readCpuAccounts();
}

void removeJobProcesses(const std::vector<int64_t>& pids) {
  JobList& j = jobs();
  std::lock_guard<std::mutex> lock(j.mu);
  for (int64_t p : pids) {
    auto it = j.pids.find(p);
    if (it != j.pids.end() && --it->second <= 0) j.pids.erase(it);
  }
}

bool foreignLoadLikely(int64_t now) {
  Sampler& sm = sampler();
  std::unique_lock<std::mutex> lock(sm.mu, std::try_to_lock);
  if (!lock.owns_lock()) return sm.verdict.load(std::memory_order_relaxed);  // another thread reads them
  if (sm.last.wallNs != 0 && now - sm.last.wallNs < kForeignSampleNs) return sm.verdict.load(std::memory_order_relaxed);
  const CpuAccounts reading = readCpuAccounts();
  const bool fresh = sm.last.wallNs != 0 && reading.wallNs - sm.last.wallNs <= kForeignMaxWindowNs;
  static const long ticksPerSec = sysconf(_SC_CLK_TCK);
  const bool busy = fresh && foreignShare(sm.last, reading, ticksPerSec) >= kForeignShare;
  sm.verdict.store(busy, std::memory_order_relaxed);
  sm.last = reading;
  return busy;
}

}  // namespace braid

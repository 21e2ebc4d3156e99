#pragma once
// Whether the CPUs a rank runs on are busy with something other than the job. Where ranks
// outnumber the cores, a yield that loses the core for a time slice is most often another
// rank of the job working, which is what the yield is for; but it may be a process that
// never waits (a data loader, another job), which keeps the core for the rest of its slice
// at every yield. The rank's own yields cannot tell the two apart (docs/performance.md,
// "Ranks that share cores beside busy processes"); the kernel's accounts can: the time the
// CPUs spent busy (/proc/stat), less the CPU time of the job's processes on this kernel
// (/proc/<pid>/stat), is what went to others.

#include <cstdint>
#include <string>
#include <vector>

namespace braid {

// One reading of the accounts, in clock ticks (sysconf(_SC_CLK_TCK)).
struct CpuAccounts {
  int64_t wallNs = 0;      // when it was read (nowNanos())
  uint64_t busyTicks = 0;  // the CPUs' busy time: user, nice, system, irq, softirq
  uint64_t jobTicks = 0;   // the job's processes' user and system time
  std::vector<int> cpus;   // the CPUs busyTicks covers (a reading over others does not compare)
  bool complete = false;   // every CPU's line and every process's record was read
};

// The share of the CPUs' capacity between `a` and `b` that went to anything but the job:
// (busy - job) / (cpus x elapsed), 0 when nothing can be said (an incomplete reading, no
// time elapsed, or the job's time exceeding the busy time by the ticks' rounding).
double foreignShare(const CpuAccounts& a, const CpuAccounts& b, long ticksPerSec);

// The busy ticks of `cpus` in a /proc/stat text; false if one of them has no line.
bool parseCpuBusy(const std::string& procStat, const std::vector<int>& cpus, uint64_t* busy);
// utime + stime of a /proc/<pid>/stat text; false if it is not one.
bool parseProcessTicks(const std::string& pidStat, uint64_t* ticks);

// Reads the accounts now: the CPUs this process may run on (its main thread's affinity, the
// same whichever thread reads), and the job's processes (this one and those added below).
CpuAccounts readCpuAccounts();

// The job's other processes on this kernel whose CPUs overlap this one's (the ranks a
// communicator found sharing them), counted: each add is undone by a remove. An add also
// reads the accounts, to start foreignLoadLikely's first window.
void addJobProcesses(const std::vector<int64_t>& pids);
void removeJobProcesses(const std::vector<int64_t>& pids);

// Share at or above which the CPUs count as busy with something else.
constexpr double kForeignShare = 0.15;
// How often the accounts are read at most, and the longest window a verdict is made over
// (an older reading only starts a new window).
constexpr int64_t kForeignSampleNs = 100 * 1000 * 1000;
constexpr int64_t kForeignMaxWindowNs = 1000 * 1000 * 1000;

// Whether something other than the job kept the CPUs busy lately: the verdict of the last
// window of kForeignSampleNs or more, read again when that is over. False until one is made,
// and when the accounts cannot be read. Any thread; cheap between readings.
bool foreignLoadLikely(int64_t now);

}  // namespace braid

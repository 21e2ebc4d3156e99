#pragma once
// BRAID_TIMELINE=DIR: a Chrome trace (chrome://tracing, ui.perfetto.dev) of what this process
// does, written to DIR/rank<R>-<pid>.json when the process exits: every call (issue to
// completion), every channel's run of it, every step of every round, and every wait on a
// peer longer than kMinWaitUs. The trace's pid is the process's rank (its first
// communicator's), tid 0.. the channels and kCallsTid the calling threads. Times are the
// realtime clock in microseconds, so traces of ranks on hosts with synchronised clocks
// line up; `braid-info --timeline DIR` merges the files of one job into one trace.
//
// Off (the variable unset), every hook is one relaxed atomic load and a branch.

#include <atomic>
#include <cstdint>
#include <string>

namespace braid::timeline {

constexpr int kCallsTid = 1000;
constexpr int64_t kMinWaitUs = 20;

namespace detail {
extern std::atomic<bool> gOn;
}

inline bool on() { return detail::gOn.load(std::memory_order_relaxed); }

// Microseconds on the realtime clock.
int64_t nowUs();

// This process's rank in the trace (the first call wins).
void setRank(int rank);

// A span [startUs, startUs + durUs) named `name` in category `cat` on thread `tid`; `args`
// is the body of a JSON object ("\"bytes\": 8") or empty.
void span(const std::string& name, const char* cat, int64_t startUs, int64_t durUs, int tid,
          const std::string& args = "");

// Writes what was recorded (also done at exit). For tests.
void flush();

// The file this process writes, or "" when off.
std::string path();

// Merges every *.json trace in `dir` (but `out`) into one trace at `out`; returns the
// number of events, or -1 with *err set.
int64_t merge(const std::string& dir, const std::string& out, std::string* err);

}  // namespace braid::timeline

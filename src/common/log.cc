#include "common/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace braid {
namespace {

// level, rank and sink change while other threads log (every communicator of a process
// sets the rank; tests set a sink): relaxed atomics, a plain load on the logging path.
struct LogState {
  std::atomic<LogLevel> level{LogLevel::kNone};
  FILE* out = stderr;
  std::mutex mu;
  std::atomic<int> rank{-1};
  char host[64] = {0};
  std::atomic<void (*)(int, const char*)> sink{nullptr};
};

LogState& state() {
  static LogState* s = [] {
    auto* st = new LogState();
    gethostname(st->host, sizeof(st->host) - 1);
    // Logging is read directly from the environment because it must work before (and
    // without) a communicator's config table.
    if (const char* v = std::getenv("BRAID_DEBUG")) {
      if (!strcasecmp(v, "WARN")) st->level.store(LogLevel::kWarn, std::memory_order_relaxed);
      else if (!strcasecmp(v, "INFO")) st->level.store(LogLevel::kInfo, std::memory_order_relaxed);
      else if (!strcasecmp(v, "TRACE")) st->level.store(LogLevel::kTrace, std::memory_order_relaxed);
    }
    if (const char* f = std::getenv("BRAID_DEBUG_FILE")) {
      std::string path;
      for (const char* p = f; *p; ++p) {
        if (p[0] == '%' && p[1] == 'h') { path += st->host; ++p; }
        else if (p[0] == '%' && p[1] == 'p') { path += std::to_string(getpid()); ++p; }
        else path += *p;
      }
      if (FILE* fp = std::fopen(path.c_str(), "a")) st->out = fp;
    }
    return st;
  }();
  return *s;
}

}  // namespace

LogLevel logLevel() { return state().level.load(std::memory_order_relaxed); }

void setLogRank(int rank) { state().rank.store(rank, std::memory_order_relaxed); }

void setLogSink(LogLevel level, void (*sink)(int level, const char* message)) {
  state().level.store(level, std::memory_order_relaxed);
  state().sink.store(sink, std::memory_order_relaxed);
}

namespace {

// One line to the sink (a plugin's host) at `sinkLevel`, or to the log file tagged `tag`.
void emit(LogState& s, int sinkLevel, const char* tag, const char* msg) {
  if (auto sink = s.sink.load(std::memory_order_relaxed)) {
    sink(sinkLevel, msg);
    return;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  std::fprintf(s.out, "%s:%d:%d [braid] %s %s\n", s.host, static_cast<int>(getpid()), s.rank.load(std::memory_order_relaxed), tag,
               msg);
  std::fflush(s.out);
}

}  // namespace

void logf(LogLevel level, const char* fmt, ...) {
  LogState& s = state();
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  emit(s, static_cast<int>(level), level == LogLevel::kWarn ? "WARN" : level == LogLevel::kInfo ? "INFO" : "TRACE", msg);
}

void logSecurity(const char* fmt, ...) {
  constexpr int kLinesPerWindow = 20;
  constexpr int64_t kWindowNs = 10'000'000'000;
  static std::mutex mu;
  static int64_t windowStart = 0;
  static int lines = 0;
  static long held = 0;
  long heldBefore = 0;
  {
    // Counted before anything is formatted: a flood costs little more than the count.
    std::lock_guard<std::mutex> lock(mu);
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
    if (now - windowStart >= kWindowNs) {
      windowStart = now;
      lines = 0;
    }
    if (++lines > kLinesPerWindow) {
      ++held;
      return;
    }
    heldBefore = held;
    held = 0;
  }
  char line[2200];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, 2048, fmt, ap);
  va_end(ap);
  if (heldBefore > 0 && n >= 0)
    snprintf(line + std::min(n, 2047), sizeof(line) - std::min(n, 2047), " (%ld similar lines held back)", heldBefore);
  // Through a plugin's host at level 0, which it logs as SECURITY too.
  emit(state(), 0, "SECURITY", line);
}

}  // namespace braid

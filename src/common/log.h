#pragma once
// Logging controlled by BRAID_DEBUG=WARN|INFO|TRACE (default: errors and warnings off
// unless set) and BRAID_DEBUG_FILE (%h = host, %p = pid). Log once, where an error is
// first identified; callers up the stack add context to the Status instead.

#include <cstdarg>

namespace braid {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel logLevel();
void logf(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Security events (a connection refused for failing authentication, a job without a key):
// logged whatever BRAID_DEBUG says, tagged SECURITY, at most 20 lines per 10 s per process
// (a flood of strangers must not flood the log; the lines held back are counted in the next
// one that is written).
void logSecurity(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Sets the prefix every line carries, e.g. "host:pid:rank 3".
void setLogRank(int rank);
// Inside a transport plugin: hand every line to the host's logger, at its level, instead
// of reading BRAID_DEBUG a second time.
void setLogSink(LogLevel level, void (*sink)(int level, const char* message));

}  // namespace braid

#define BRAID_SECURITY(...) ::braid::logSecurity(__VA_ARGS__)
#define BRAID_WARN(...) \
  do { if (::braid::logLevel() >= ::braid::LogLevel::kWarn) ::braid::logf(::braid::LogLevel::kWarn, __VA_ARGS__); } while (0)
#define BRAID_INFO(...) \
  do { if (::braid::logLevel() >= ::braid::LogLevel::kInfo) ::braid::logf(::braid::LogLevel::kInfo, __VA_ARGS__); } while (0)
#define BRAID_TRACE(...) \
  do { if (::braid::logLevel() >= ::braid::LogLevel::kTrace) ::braid::logf(::braid::LogLevel::kTrace, __VA_ARGS__); } while (0)

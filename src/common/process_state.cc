#include "common/process_state.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/random.h"

namespace braid {

char processState(int64_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // "pid (command) S ...": the command name may hold spaces and parentheses.
  const char* close = std::strrchr(buf, ')');
  return close && close[1] == ' ' && close[2] ? close[2] : 0;
}

uint64_t pidNamespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

uint64_t networkNamespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

uint64_t sharedMemoryDevice() {
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_dev);
}

uint64_t processToken() {
  static std::mutex mu;
  static uint64_t token = 0;
  static pid_t drawnBy = 0;
  static uint64_t drawnIn = 0;
  const pid_t pid = ::getpid();
  const uint64_t ns = pidNamespace();
  std::lock_guard<std::mutex> lock(mu);
  if (token == 0 || pid != drawnBy || ns != drawnIn) {
    do token = randomU64();
    while (token == 0);
    drawnBy = pid;
    drawnIn = ns;
  }
  return token;
}

}  // namespace braid

#include "common/process_state.h"

#include <cstdio>
#include <cstring>

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

}  // namespace braid

#pragma once
// Runs a shell command line for tests that drive real processes (braidrun and the ranks it
// launches), capturing stdout and stderr together.

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "support/catch.h"

namespace braid::testing {

struct CommandResult {
  int status = -1;  // exit status; 128 + signal number when killed by a signal
  std::string out;  // stdout and stderr, interleaved as written
  double seconds = 0;
};

inline CommandResult runCommand(const std::string& cmd) {
  CommandResult r;
  auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace braid::testing

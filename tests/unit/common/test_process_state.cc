// processState reads /proc: how a rank tells a stopped peer on its host from a slow one.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/process_state.h"
#include "support/catch.h"

TEST_CASE("processState reads a process's state: running or sleeping, stopped, gone", "[common]") {
  const char mine = braid::processState(getpid());
  CHECK((mine == 'R' || mine == 'S'));
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    for (;;) pause();
  }
  kill(child, SIGSTOP);
  char state = 0;
  for (int i = 0; i < 200 && state != 'T'; ++i) {  // the stop lands asynchronously
    state = braid::processState(child);
    if (state != 'T') usleep(5000);
  }
  CHECK(state == 'T');
  CHECK(braid::stateStopped(state));
  CHECK_FALSE(braid::stateGone(state));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK(braid::processState(child) == 0);
  CHECK(braid::stateGone(braid::processState(child)));
  CHECK_FALSE(braid::stateStopped(mine));
  CHECK_FALSE(braid::stateGone(mine));
}

// A rank's pid is compared only within its pid namespace; the process token tells "the same
// process" where pids cannot (another namespace may reuse a pid). A forked child draws its own.
TEST_CASE("pidNamespace names this process's pid namespace and processToken the process", "[common]") {
  const uint64_t ns = braid::pidNamespace();
  CHECK(ns != 0);  // Linux with /proc
  const uint64_t token = braid::processToken();
  CHECK(token != 0);
  CHECK(braid::processToken() == token);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const uint64_t mine[2] = {braid::processToken(), braid::pidNamespace()};
    _exit(write(fds[1], mine, sizeof mine) == static_cast<ssize_t>(sizeof mine) ? 0 : 1);
  }
  uint64_t theirs[2] = {0, 0};
  CHECK(read(fds[0], theirs, sizeof theirs) == static_cast<ssize_t>(sizeof theirs));
  int status = 0;
  waitpid(child, &status, 0);
  close(fds[0]);
  close(fds[1]);
  CHECK(WIFEXITED(status));
  CHECK(theirs[0] != 0);
  CHECK(theirs[0] != token);
  CHECK(theirs[1] == ns);  // a forked child stays in its parent's pid namespace
  CHECK(braid::processToken() == token);
}

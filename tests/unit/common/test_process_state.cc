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

#pragma once
// A tcp socket under a chosen congestion control, for the tests of taking sockets off the
// kernel's pacing (common/tcp_pacing.h, the tcp transport's unpaceLocalSocket).

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "support/catch.h"

namespace braid::testing {

// An IPv4 tcp socket under congestion control `cc`, or -1 when this process may not choose
// `cc` (tcp_allowed_congestion_control, a module not loaded). A socket that cannot be made
// fails the test.
inline int tcpSocketWith(const char* cc) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, static_cast<socklen_t>(std::strlen(cc))) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace braid::testing

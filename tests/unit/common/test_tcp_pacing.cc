// Whether the kernel paces tcp: which congestion controls do, reading the kernel's, and
// taking sockets off it.

#include "common/tcp_pacing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>

#include "support/catch.h"
#include "support/tcp_socket.h"

using braid::congestionControlOf;
using braid::congestionControlPaces;
using braid::tcpCongestionControl;
using braid::testing::tcpSocketWith;

TEST_CASE("the BBR family paces tcp, other congestion controls do not", "[unit]") {
  CHECK(congestionControlPaces("bbr"));
  CHECK(congestionControlPaces("bbr2"));
  CHECK(congestionControlPaces("bbr3"));
  CHECK_FALSE(congestionControlPaces("cubic"));
  CHECK_FALSE(congestionControlPaces("reno"));
  CHECK_FALSE(congestionControlPaces("dctcp"));
  CHECK_FALSE(congestionControlPaces(""));
}

TEST_CASE("the kernel's tcp congestion control is read as the kernel says it", "[unit]") {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string expected;
  in >> expected;
  CHECK(tcpCongestionControl() == expected);
}

TEST_CASE("a socket leaves a pacing congestion control for cubic or reno, others keep theirs", "[unit]") {
  const int reno = tcpSocketWith("reno");
  REQUIRE(reno >= 0);  // built into every Linux kernel and always allowed
  CHECK(braid::unpaceSocket(reno).empty());
  CHECK(congestionControlOf(reno) == "reno");
  close(reno);
  const int bbr = tcpSocketWith("bbr");
  if (bbr < 0) {
    WARN("bbr is not available to this process (tcp_allowed_congestion_control): only the half without it ran");
    return;
  }
  std::string now;
  CHECK(braid::unpaceSocket(bbr, &now) == "bbr");
  CHECK((now == "cubic" || now == "reno"));
  CHECK(congestionControlOf(bbr) == now);
  close(bbr);
}

TEST_CASE("a process can leave the kernel's pacing only where the kernel paces", "[unit]") {
  if (!congestionControlPaces(tcpCongestionControl())) CHECK_FALSE(braid::canUnpaceSockets());
  else CHECK(braid::canUnpaceSockets());  // cubic or reno: both always allowed
}

// Sockets opened since a snapshot and connected within this host leave a pacing congestion
// control; listeners only when asked; those open before the snapshot, and other protocols,
// are left alone.
TEST_CASE("sockets opened since a snapshot and connected within this host leave pacing", "[unit]") {
  const int old = tcpSocketWith("bbr");
  if (old < 0) {
    WARN("skipped: bbr is not available to this process");
    return;
  }
  const std::set<uint64_t> before = braid::openSocketInodes();
  CHECK(before.size() >= 1);
  const int listener = tcpSocketWith("bbr");
  REQUIRE(listener >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(listener, 4) == 0);
  socklen_t alen = sizeof(a);
  REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &alen) == 0);
  const int client = tcpSocketWith("bbr");
  REQUIRE(client >= 0);
  REQUIRE(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  const int accepted = accept(listener, nullptr, nullptr);  // bbr, the listener's at the time
  REQUIRE(accepted >= 0);
  const int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(udp >= 0);

  std::string had, now;
  CHECK(braid::unpaceNewLocalSockets(before, false, &had, &now) == 2);  // both ends of the connection
  CHECK(had == "bbr");
  CHECK(congestionControlOf(client) == now);
  CHECK(congestionControlOf(accepted) == now);
  CHECK(congestionControlOf(listener) == "bbr");
  CHECK(congestionControlOf(old) == "bbr");
  CHECK(braid::unpaceNewLocalSockets(before, true) == 1);  // the listener, now
  CHECK(congestionControlOf(listener) == now);
  // A connection the listener accepts later starts with the listener's.
  const int second = tcpSocketWith("bbr");
  REQUIRE(second >= 0);
  REQUIRE(connect(second, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  const int acceptedLater = accept(listener, nullptr, nullptr);
  REQUIRE(acceptedLater >= 0);
  CHECK(congestionControlOf(acceptedLater) == now);
  CHECK(braid::unpaceNewLocalSockets(before, true) == 1);  // `second` only
  CHECK(braid::unpaceNewLocalSockets(before, true) == 0);
  for (int fd : {old, listener, client, accepted, udp, second, acceptedLater}) close(fd);
}

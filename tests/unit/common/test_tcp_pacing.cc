// Whether the kernel paces tcp: which congestion controls do, and reading the kernel's.

#include "common/tcp_pacing.h"

#include <fstream>
#include <string>

#include "support/catch.h"

using braid::congestionControlPaces;
using braid::tcpCongestionControl;

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

// What braid reads around UCX: whether UCX_TLS may put messages through shared memory, and
// whether the kernel paces tcp.

#include "common/ucx_env.h"

#include <fstream>
#include <string>

#include "support/catch.h"

using braid::congestionControlPaces;
using braid::tcpCongestionControl;
using braid::ucxTlsMayUseSharedMemory;

TEST_CASE("UCX_TLS may use shared memory unless it lists only other transports", "[unit]") {
  // Unset, empty, exclusions and "all" leave UCX its choice, shared memory included.
  CHECK(ucxTlsMayUseSharedMemory(nullptr));
  CHECK(ucxTlsMayUseSharedMemory(""));
  CHECK(ucxTlsMayUseSharedMemory("^tcp"));
  CHECK(ucxTlsMayUseSharedMemory("^sm"));
  CHECK(ucxTlsMayUseSharedMemory("all"));
  for (const char* tls : {"sm", "sm,self", "tcp,sm,self", "shm", "posix,self", "sysv", "tcp,cma", "knem", "xpmem", "mm"})
    CHECK(ucxTlsMayUseSharedMemory(tls));
  // Lists of stream and network transports only; names are matched whole.
  for (const char* tls : {"tcp", "tcp,self", "self,tcp", "rc,ud,self", "rc_verbs", "smx,tcp", "tcpsm"})
    CHECK_FALSE(ucxTlsMayUseSharedMemory(tls));
}

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

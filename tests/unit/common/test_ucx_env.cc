// What braid reads around UCX: whether UCX_TLS may put messages through shared memory or
// tcp, and which network devices the UCX plugin gives UCX.

#include "common/ucx_env.h"

#include <arpa/inet.h>

#include "support/catch.h"

using braid::NetInterface;
using braid::ucxNetDevices;
using braid::ucxTlsMayUseSharedMemory;
using braid::ucxTlsMayUseTcp;

namespace {

NetInterface iface(const char* name, const char* address, bool loopback = false) {
  NetInterface n;
  n.name = name;
  n.loopback = loopback;
  REQUIRE(inet_pton(AF_INET, address, &n.address) == 1);
  return n;
}

}  // namespace

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

TEST_CASE("UCX_TLS may use tcp when unset, all, naming it, or excluding others", "[unit]") {
  for (const char* tls : {(const char*)nullptr, "", "all", "tcp", "tcp,self", "sm,tcp", "^sm", "^rc,ud"})
    CHECK(ucxTlsMayUseTcp(tls));
  for (const char* tls : {"sm,self", "self", "rc,ud,self", "^tcp", "^sm,tcp", "tcpx", "xtcp,sm"})
    CHECK_FALSE(ucxTlsMayUseTcp(tls));
}

TEST_CASE("the UCX plugin's network devices: loopback on one host, BRAID_NET_IF's across hosts", "[unit]") {
  // A host as the bridge test saw it: loopback, its NIC, and a bridge that comes and goes.
  const std::vector<NetInterface> up = {iface("lo", "127.0.0.1", true), iface("eth0", "192.0.2.2"),
                                        iface("eth1", "198.51.100.7"), iface("brflap", "10.99.7.1")};
  SECTION("every peer on this host: the loopback interface, whatever BRAID_NET_IF says") {
    CHECK(ucxNetDevices(up, true, {}) == "lo");
    CHECK(ucxNetDevices(up, true, {"", "eth1"}) == "lo");
    // Loopback by its flag, not its name.
    CHECK(ucxNetDevices({iface("eth0", "192.0.2.2"), iface("loop0", "127.0.0.1", true)}, true, {}) == "loop0");
    // No loopback interface up: UCX's own choice.
    CHECK(ucxNetDevices({iface("eth0", "192.0.2.2")}, true, {}) == "");
  }
  SECTION("across hosts with nothing asked for: UCX's own choice") {
    CHECK(ucxNetDevices(up, false, {}) == "");
    CHECK(ucxNetDevices(up, false, {"", ""}) == "");
  }
  SECTION("across hosts: the interfaces the specs select, loopback never, each once") {
    CHECK(ucxNetDevices(up, false, {"eth1"}) == "eth1");
    CHECK(ucxNetDevices(up, false, {"eth"}) == "eth0,eth1");                  // a prefix, as braid's tcp reads it
    CHECK(ucxNetDevices(up, false, {"=eth"}) == "");                          // exact names only
    CHECK(ucxNetDevices(up, false, {"^br,lo"}) == "eth0,eth1");               // an exclusion list
    CHECK(ucxNetDevices(up, false, {"198.51.100.7"}) == "eth1");              // an address
    CHECK(ucxNetDevices(up, false, {"eth1", "", "eth0", "eth1"}) == "eth1,eth0");  // channels' NICs, then netIf
    CHECK(ucxNetDevices(up, false, {"lo"}) == "");
    CHECK(ucxNetDevices(up, false, {"127.0.0.1"}) == "");
    // Nothing matches, or a spec that is not well formed: UCX's own choice.
    CHECK(ucxNetDevices(up, false, {"ib"}) == "");
    CHECK(ucxNetDevices(up, false, {"eth0,,eth1"}) == "");
    CHECK(ucxNetDevices(up, false, {"203.0.113.9"}) == "");
  }
}

TEST_CASE("this host's interfaces that are up with an IPv4 address include loopback", "[unit]") {
  const std::vector<NetInterface> up = braid::upIpv4Interfaces();
  bool loopback = false;
  for (const NetInterface& n : up) {
    CHECK_FALSE(n.name.empty());
    if (n.loopback) {
      loopback = true;
      CHECK(ntohl(n.address.s_addr) >> 24 == 127);
    }
  }
  CHECK(loopback);
}

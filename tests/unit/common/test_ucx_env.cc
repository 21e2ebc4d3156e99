// What braid reads around UCX: whether UCX_TLS may put messages through shared memory or
// tcp, and which network devices the UCX plugin gives UCX.

#include "common/ucx_env.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

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

TEST_CASE("software RDMA devices are told from cards by where sysfs puts them", "[unit]") {
  char tmpl[] = "/tmp/braid-sysfs-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string root = tmpl;
  // A card under its PCI function, Soft-RoCE's rxe and siw under virtual, as the kernel
  // registers them, each reached through a link in class/infiniband.
  const std::string card = root + "/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0";
  const std::string rxe = root + "/devices/virtual/infiniband/rxe0";
  const std::string siw = root + "/devices/virtual/infiniband/siw_eth0";
  for (const std::string& d : {card, rxe, siw}) REQUIRE(std::system(("mkdir -p '" + d + "'").c_str()) == 0);
  REQUIRE(std::system(("mkdir -p '" + root + "/class/infiniband'").c_str()) == 0);
  REQUIRE(symlink("../../devices/pci0000:00/0000:00:03.0/infiniband/mlx5_0", (root + "/class/infiniband/mlx5_0").c_str()) == 0);
  REQUIRE(symlink("../../devices/virtual/infiniband/rxe0", (root + "/class/infiniband/rxe0").c_str()) == 0);
  REQUIRE(symlink("../../devices/virtual/infiniband/siw_eth0", (root + "/class/infiniband/siw_eth0").c_str()) == 0);

  using V = std::vector<std::string>;
  CHECK(braid::softwareRdmaDevices(V{"mlx5_0", "rxe0", "siw_eth0"}, root) == V{"rxe0", "siw_eth0"});
  CHECK(braid::softwareRdmaDevices(V{"mlx5_0"}, root).empty());
  // Names without an entry, and names that would leave the folder, are left out.
  CHECK(braid::softwareRdmaDevices(V{"mlx5_1", "", "../infiniband/rxe0"}, root).empty());
  // A sysfs root given through a link of its own still finds them.
  REQUIRE(symlink(root.c_str(), (root + "-link").c_str()) == 0);
  CHECK(braid::softwareRdmaDevices(V{"rxe0", "mlx5_0"}, root + "-link") == V{"rxe0"});
  REQUIRE(std::system(("rm -rf '" + root + "' '" + root + "-link'").c_str()) == 0);
}

TEST_CASE("UCX's UD destination check is turned off only on Soft-RoCE before UCX 1.19, never against the user's setting", "[unit]") {
  const char* names[] = {"UCX_UD_ETH_DGID_CHECK", "UCX_UD_VERBS_ETH_DGID_CHECK", "UCX_UD_MLX5_ETH_DGID_CHECK"};
  std::string saved[3];
  bool had[3];
  for (int i = 0; i < 3; ++i) {
    const char* v = std::getenv(names[i]);
    had[i] = v != nullptr;
    saved[i] = v ? v : "";
    unsetenv(names[i]);
  }
  CHECK(braid::ucxUncheckUdDestinations(true, 1, 13));
  CHECK(braid::ucxUncheckUdDestinations(true, 1, 18));
  CHECK_FALSE(braid::ucxUncheckUdDestinations(false, 1, 13));
  // UCX 1.19 reads a packet's IP version from its header: its check works on Soft-RoCE.
  CHECK_FALSE(braid::ucxUncheckUdDestinations(true, 1, 19));
  CHECK_FALSE(braid::ucxUncheckUdDestinations(true, 2, 0));
  for (const char* name : names) {
    setenv(name, "y", 1);
    CHECK_FALSE(braid::ucxUncheckUdDestinations(true, 1, 13));
    unsetenv(name);
  }
  for (int i = 0; i < 3; ++i)
    if (had[i]) setenv(names[i], saved[i].c_str(), 1);
}

TEST_CASE("a UCX endpoint's lanes are read from UCX's description of it", "[unit]") {
  using V = std::vector<std::string>;
  // As UCX 1.13 describes an endpoint to a peer across Soft-RoCE, and one over tcp.
  const std::string rdma =
      "#\n# UCP endpoint\n#\n"
      "#               peer: <no debug data>\n"
      "#                 lane[0]:  1:rc_verbs/rxe0:1.0 md[1]       -> addr[1].md[1]/ib/sysdev[255] rma_bw#0 am am_bw#0\n"
      "#                 lane[1]:  2:ud_verbs/rxe0:1.0 md[1]       -> addr[1].md[1]/ib/sysdev[255] keepalive\n"
      "#                 lane[2]:  1:rc_verbs/rxe0:1.0 md[1]       -> addr[1].md[1]/ib/sysdev[255] rma_bw#1\n";
  CHECK(braid::ucxLaneTransports(rdma) == V{"rc_verbs", "ud_verbs"});
  CHECK(braid::ucxLanesOverRdma(braid::ucxLaneTransports(rdma)));
  const std::string tcp = "#                 lane[0]:  3:tcp/lo.0 md[2]          -> addr[1].md[2]/tcp/sysdev[255] am am_bw#0\n";
  CHECK(braid::ucxLaneTransports(tcp) == V{"tcp"});
  CHECK_FALSE(braid::ucxLanesOverRdma(braid::ucxLaneTransports(tcp)));
  CHECK(braid::ucxLanesOverRdma(V{"tcp", "dc_mlx5"}));
  CHECK(braid::ucxLanesOverRdma(V{"ud_mlx5"}));
  CHECK_FALSE(braid::ucxLanesOverRdma(V{"posix", "cma", "self"}));
  // Text without lanes, or lanes not in that shape, give none.
  CHECK(braid::ucxLaneTransports("").empty());
  CHECK(braid::ucxLaneTransports("# UCP endpoint\n# lane[0]: tcp\n# lane[1]:  x:tcp/lo\n# lane[2]").empty());
}

#pragma once
// What braid decides around UCX without loading it, from UCX's own settings: the UCX
// plugin's rendezvous threshold, its network devices, and the core's slot geometry for UCX
// on one host (with common/tcp_pacing.h).

#include <netinet/in.h>

#include <string>
#include <vector>

namespace braid {

// Whether a UCX_TLS value (nullptr when unset) may let UCX move messages through shared
// memory: unset, empty, an exclusion list ("^tcp"), "all", or a list naming sm, shm, posix,
// sysv, cma, knem, xpmem or mm. False only for a list of stream and network transports
// ("tcp,self", "rc,ud,self").
bool ucxTlsMayUseSharedMemory(const char* tls);

// Whether a UCX_TLS value (nullptr when unset) may let UCX use its tcp transport: unset,
// empty, "all", a list naming tcp, or an exclusion list that does not.
bool ucxTlsMayUseTcp(const char* tls);

// An interface of this network namespace that is up and has an IPv4 address.
struct NetInterface {
  std::string name;
  bool loopback = false;
  in_addr address{};  // its first IPv4 address
};
// This namespace's interfaces that are up with an IPv4 address, in getifaddrs' order.
std::vector<NetInterface> upIpv4Interfaces();

// The network devices UCX's tcp should use (UCX_NET_DEVICES' syntax, "lo" or "eth0,eth1"),
// or "" for UCX's own choice, which is every interface it finds when its worker starts.
// That includes interfaces that come and go while the job runs (a container's bridge); a
// connection made over one of them stalls, neither delivering nor failing, once its address
// is gone. So:
// - every peer on this host: the loopback interface, which carries their traffic anyway;
// - otherwise, where `wanted` holds specs (BRAID_NET_IF and the topology's per-channel
//   NICs: an IPv4 address, an interface name, or an NCCL_SOCKET_IFNAME-style list), the
//   interfaces other than loopback they select, as braid's tcp listens on;
// - otherwise "": across hosts UCX picks its lanes among every interface.
// A spec that is not well formed selects nothing.
std::string ucxNetDevices(const std::vector<NetInterface>& up, bool oneHost, const std::vector<std::string>& wanted);

}  // namespace braid

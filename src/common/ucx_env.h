#pragma once
// What braid decides around UCX without loading it, from UCX's own settings: the UCX
// plugin's rendezvous threshold, its network devices, its check of UD packets on Soft-RoCE,
// and the core's slot geometry for UCX on one host (with common/tcp_pacing.h).

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

// The RDMA devices among `names` ("rxe0", "mlx5_0") that software provides rather than a
// card (Soft-RoCE's rxe, Soft-iWARP's siw), which the kernel registers as virtual devices:
// their sysfs entries (<sysfs>/class/infiniband/NAME) lead under <sysfs>/devices/virtual/,
// where a card's lead under its bus. A name without an entry is left out.
std::vector<std::string> softwareRdmaDevices(const std::vector<std::string>& names, const std::string& sysfs = "/sys");

// The transports of a UCX endpoint's lanes ("tcp", "rc_verbs"), in lane order without
// repeats, from UCX's description of the endpoint (ucp_ep_print_info), which has a line
// "lane[N]: I:TRANSPORT/DEVICE ..." for each lane; UCX 1.13 offers no query for them. Empty
// when the text has no such line.
std::vector<std::string> ucxLaneTransports(const std::string& endpointInfo);

// Whether one of those is an RDMA transport (rc_*, ud_*, dc_*: InfiniBand and RoCE). Over
// those UCX hears of a dead peer only when it next sends to it or its keepalive asks
// (UCX_KEEPALIVE_INTERVAL, 20 s), where tcp hears the socket close at once.
bool ucxLanesOverRdma(const std::vector<std::string>& transports);

// Whether the UCX plugin turns off UCX's check of each UD packet's destination GID
// (ETH_DGID_CHECK of UCX's ud_verbs and ud_mlx5): only where UCX, of a version before 1.19,
// has a software RoCE device (`softRoce`) and none of UCX_UD_ETH_DGID_CHECK,
// UCX_UD_VERBS_ETH_DGID_CHECK and UCX_UD_MLX5_ETH_DGID_CHECK is set. Before 1.19 ud_verbs
// takes a packet's IP version from its completion's service level, which mlx5 hardware
// fills in and rxe does not, so over Soft-RoCE with an IPv4-mapped GID (UCX's own choice on
// RoCE v2) it drops every UD packet on that check and nothing wires up: its endpoints time
// out after 30 s and UCX aborts (docs/transports.md, "UCX over Soft-RoCE"). UCX 1.19 reads
// the version from the packet's header instead (openucx/ucx commit 7de57ad9).
bool ucxUncheckUdDestinations(bool softRoce, unsigned ucxMajor, unsigned ucxMinor);

}  // namespace braid

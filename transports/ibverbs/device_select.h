#pragma once
// Which RDMA device, port and GID the verbs transport uses, as pure functions over names
// and a sysfs tree, so the rules are unit-tested without a device (the tests build a fake
// /sys/class/infiniband in a temporary folder).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/nic_filter.h"
#include "common/status.h"

namespace braid::transport::ibverbs {

// BRAID_IB_HCA (NCCL_IB_HCA syntax, common/nic_filter.h) parsed, with errors naming this
// plugin.
[[nodiscard]] StatusOr<NicFilter> parseHcaList(const std::string& spec);

// The GID index to address RoCE traffic with, on port `port` of `device`, reading
// <sysfsRoot>/<device>/ports/<port>/gids/<i> and .../gid_attrs/types/<i> (sysfsRoot is
// normally /sys/class/infiniband).
//
// `configured` >= 0 (BRAID_IB_GID_INDEX) is taken as given, but must name a populated GID
// when sysfs lists the port. -1 picks automatically, in this order of preference:
//   1. RoCE v2 with an IPv4-mapped address (::ffff:a.b.c.d): routable over IP, and what
//      an IPv4 data-centre fabric is configured for;
//   2. RoCE v2 with a global IPv6 address (not fe80::/10);
//   3. any other populated GID (RoCE v1, or InfiniBand's port GID).
// Lowest index first within a class. kInvalidArgument / kSystemError naming the device
// when nothing usable is found.
struct GidChoice {
  int index = -1;
  std::string gid;    // as sysfs writes it
  std::string type;   // "RoCE v2", "IB/RoCE v1", or "" when sysfs has no type
  std::string why;    // one phrase for logs, e.g. "RoCE v2 IPv4-mapped"
};
StatusOr<GidChoice> selectGid(const std::string& sysfsRoot, const std::string& device, int port, int configured);

// Parses a GID as sysfs prints it ("fe80:0000:...:0001", eight groups of four hex
// digits) into 16 bytes; false if it is not one.
bool parseGid(const std::string& text, uint8_t out[16]);

}  // namespace braid::transport::ibverbs

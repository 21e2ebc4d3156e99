#pragma once
// NIC details from Linux sysfs: for RDMA devices /sys/class/infiniband/<hca>/ports/<p>/
// {rate, link_layer, state}, for network interfaces /sys/class/net/<if>/{speed, operstate}.
// NICs hwloc did not report (restricted containers) are added when sysfs names their PCI
// device. Absent directories are not errors: a host without RDMA has no class/infiniband.

#include <string>

#include "common/status.h"
#include "topology/graph.h"

namespace braid::topology {

struct SysfsNetReport {
  int annotated = 0;  // NICs whose rate/state/link layer were read
  int added = 0;      // NICs found in sysfs but not in the graph
};

// Reads NIC details under `sysRoot` (normally "/sys"; tests pass a fake tree) into `g`,
// reopening and re-finalizing it when NICs are added. Blocking file reads only.
[[nodiscard]] Status addSysfsNetInfo(Graph* g, SysfsNetReport* report, const std::string& sysRoot = "/sys");

// Parses an InfiniBand rate file ("100 Gb/sec (4X EDR)", "25 Gb/sec (1X EDR)") to Mb/s;
// 0 when not understood.
int64_t parseIbRate(const std::string& rate);

}  // namespace braid::topology

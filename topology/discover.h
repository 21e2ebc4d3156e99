#pragma once
// Where graphs come from: this machine (hwloc + NVML + sysfs), or a file in any of the
// three accepted formats, told apart by content rather than by name.

#include <string>

#include "common/status.h"
#include "topology/graph.h"
#include "topology/nvml.h"
#include "topology/sysfs_net.h"

namespace braid::topology {

struct DiscoverOptions {
  bool useNvml = true;           // add NVLinks and GPU details from libnvidia-ml when present
  bool useSysfs = true;          // add NIC rate/state/link layer from sysfs
  std::string sysRoot = "/sys";  // where sysfs is mounted (tests point it at a fake tree)
};

struct DiscoverReport {
  NvmlReport nvml;
  SysfsNetReport sysfs;
};

// Discovers this machine: hwloc for CPUs, NUMA and the PCIe tree, then NVML and sysfs.
// Blocks for the discovery (milliseconds to about a second). Only an hwloc failure is an
// error; missing NVML or sysfs entries only mean less detail. `report` may be null.
[[nodiscard]] StatusOr<Graph> discoverLocal(const DiscoverOptions& options = {}, DiscoverReport* report = nullptr);

enum class TopoFormat { kUnknown, kHwlocXml, kNcclXml, kBraidJson };
const char* topoFormatName(TopoFormat f);  // "hwloc XML", "NCCL topology XML", "braid JSON"

// The format of a topology file's text: JSON when it starts with '{', otherwise XML told
// apart by its root element (<topology> hwloc, <system> NCCL).
TopoFormat detectTopoFormat(const std::string& text);

// Parses topology text of any accepted format; `source` names it in errors.
[[nodiscard]] StatusOr<Graph> parseTopology(const std::string& text, const std::string& source);
// Reads and parses the file at `path`.
[[nodiscard]] StatusOr<Graph> loadTopologyFile(const std::string& path);

}  // namespace braid::topology

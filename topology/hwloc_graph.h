#pragma once
// Graphs from hwloc: this machine (hwloc's own discovery, with I/O devices), or an hwloc
// XML export (`lstopo --of xml`) of another machine. hwloc stays inside the .cc file.
//
// What hwloc gives: NUMA nodes and their CPUs and CPU vendor/model, the PCIe tree (host
// bridges, switches, GPUs, NICs and their OS devices: cudaN/nvmlN, mlx5_N, ibN/ethN), and,
// when hwloc was built with NVML, the NVLinkBandwidth matrix. A PCIe switch appears in
// hwloc as an upstream-port bridge whose children are downstream-port bridges; the
// downstream ports (and the CPU's root ports) are folded away so that two GPUs under one
// switch are one switch apart, as in NCCL's model.

#include <string>

#include "common/status.h"
#include "topology/graph.h"

namespace braid::topology {

// Discovers this machine with hwloc (CPUs, NUMA nodes and I/O devices). Does not consult
// NVML or sysfs; see discoverLocal() in discover.h for the full picture. Blocks for the
// duration of hwloc's discovery (milliseconds to a second on large hosts).
[[nodiscard]] StatusOr<Graph> discoverHwloc();

// Builds a graph from an hwloc XML export in `path`. Malformed XML is reported with the
// file, line and column.
[[nodiscard]] StatusOr<Graph> loadHwlocXmlFile(const std::string& path);
// Same, from the XML text itself; `source` names it in error messages.
[[nodiscard]] StatusOr<Graph> parseHwlocXml(const std::string& text, const std::string& source);

}  // namespace braid::topology

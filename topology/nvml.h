#pragma once
// NVML, loaded at run time with dlopen("libnvidia-ml.so.1") so that braid builds and runs
// on machines without the NVIDIA driver. NVML adds what hwloc alone does not know: each
// GPU's compute capability and model, and its NVLinks (to other GPUs, to NVSwitches, or to
// the CPU). When the library or a GPU is absent this is not an error: the graph simply has
// no NVLink information.

#include <string>

#include "common/status.h"
#include "topology/graph.h"

namespace braid::topology {

struct NvmlReport {
  bool loaded = false;    // libnvidia-ml.so.1 was found and nvmlInit succeeded
  int gpus = 0;           // GPUs NVML reported
  int gpusAdded = 0;      // of which hwloc had not found (added under their NUMA node)
  int nvlinks = 0;        // active NVLinks seen
  std::string note;       // why NVML was not used, when it was not
};

// Adds NVML's knowledge to `g` (reopened and re-finalized as needed). Returns Ok when NVML
// is absent (report->loaded == false). `sysRoot` ("/sys") is used to find the NUMA node of
// GPUs hwloc did not report. Not thread-safe with other NVML users that call nvmlShutdown.
[[nodiscard]] Status addNvmlInfo(Graph* g, NvmlReport* report, const std::string& sysRoot = "/sys");

}  // namespace braid::topology

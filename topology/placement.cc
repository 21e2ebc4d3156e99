#include "topology/placement.h"

#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/log.h"

namespace braid::topology {

// Everything hwloc, loaded once. After construction the topology is only read, which hwloc
// allows from many threads at once; the bind calls act on the calling thread or on the
// given pages and share no state of ours.
struct Placement::Impl {
  hwloc_topology_t topo = nullptr;
  std::vector<int> numaOsIndices;      // ascending
  std::vector<hwloc_obj_t> numaObjs;   // same order as numaOsIndices
  std::vector<int> cpuToNuma;          // indexed by OS CPU number; -1 when unknown
  std::vector<int> coresPerNuma;       // same order as numaOsIndices
  int cores = 1;
  int pus = 1;

  ~Impl() {
    if (topo) hwloc_topology_destroy(topo);
  }

  int indexOfNuma(int osIndex) const {
    for (size_t i = 0; i < numaOsIndices.size(); ++i)
      if (numaOsIndices[i] == osIndex) return static_cast<int>(i);
    return -1;
  }

  void load() {
    if (hwloc_topology_init(&topo) != 0) {
      topo = nullptr;
      fallback();
      return;
    }
    // Placement needs only CPUs and memory; skipping I/O discovery keeps this under a few
    // milliseconds even on hosts with hundreds of PCI functions.
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    if (hwloc_topology_load(topo) != 0) {
      BRAID_WARN("topology: hwloc_topology_load failed (errno %d); placement disabled", errno);
      hwloc_topology_destroy(topo);
      topo = nullptr;
      fallback();
      return;
    }
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; ++i) numaObjs.push_back(hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i));
    std::sort(numaObjs.begin(), numaObjs.end(),
              [](hwloc_obj_t a, hwloc_obj_t b) { return a->os_index < b->os_index; });
    for (hwloc_obj_t o : numaObjs) numaOsIndices.push_back(static_cast<int>(o->os_index));
    coresPerNuma.assign(numaObjs.size(), 0);

    cores = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
    pus = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
    int npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    for (int i = 0; i < npu; ++i) {
      hwloc_obj_t pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, i);
      unsigned cpu = pu->os_index;
      if (cpu >= cpuToNuma.size()) cpuToNuma.resize(cpu + 1, -1);
      for (hwloc_obj_t numa : numaObjs) {
        if (numa->cpuset && hwloc_bitmap_isset(numa->cpuset, cpu)) {
          cpuToNuma[cpu] = static_cast<int>(numa->os_index);
          break;
        }
      }
    }
    int ncore = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    for (int i = 0; i < ncore; ++i) {
      hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, i);
      for (size_t k = 0; k < numaObjs.size(); ++k) {
        if (numaObjs[k]->cpuset && hwloc_bitmap_isincluded(core->cpuset, numaObjs[k]->cpuset)) {
          ++coresPerNuma[k];
          break;
        }
      }
    }
    if (numaObjs.empty()) {
      // hwloc always reports one NUMA node on Linux; keep the invariant numNumaNodes() >= 1
      // even if a stripped-down build does not.
      numaOsIndices.push_back(0);
      numaObjs.push_back(nullptr);
      coresPerNuma.push_back(cores);
    }
  }

  void fallback() {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cores = pus = online > 0 ? static_cast<int>(online) : 1;
    numaOsIndices = {0};
    numaObjs = {nullptr};
    coresPerNuma = {cores};
  }
};

Placement::Placement() : impl_(std::make_unique<Impl>()) { impl_->load(); }
Placement::~Placement() = default;

Placement& Placement::local() {
  // A function-local static gives thread-safe, once-only initialisation (C++11 magic
  // statics). It is never destroyed, so threads still running at exit may keep using it.
  static Placement* instance = new Placement();
  return *instance;
}

int Placement::numaNodeOfCaller() const {
  int cpu = sched_getcpu();
  if (cpu < 0) return -1;
  if (impl_->topo == nullptr) return impl_->numaOsIndices.size() == 1 ? impl_->numaOsIndices[0] : -1;
  if (static_cast<size_t>(cpu) >= impl_->cpuToNuma.size()) return -1;
  return impl_->cpuToNuma[cpu];
}

Status Placement::bindThreadToNuma(int numaNode) const {
  if (numaNode == -1 || impl_->numaOsIndices.size() <= 1 || impl_->topo == nullptr) return Status::ok();
  int k = impl_->indexOfNuma(numaNode);
  if (k < 0) return invalidArgument("bindThreadToNuma: no NUMA node " + std::to_string(numaNode));
  hwloc_obj_t numa = impl_->numaObjs[k];
  if (numa == nullptr || numa->cpuset == nullptr || hwloc_bitmap_iszero(numa->cpuset))
    return Status::ok();  // a memory-only node (CXL, HBM): nothing to run on, keep as is
  if (hwloc_set_cpubind(impl_->topo, numa->cpuset, HWLOC_CPUBIND_THREAD) != 0)
    return systemError("hwloc_set_cpubind", errno);
  return Status::ok();
}

Status Placement::bindMemoryToNuma(void* addr, size_t bytes, int numaNode) const {
  if (numaNode == -1 || bytes == 0 || impl_->numaOsIndices.size() <= 1 || impl_->topo == nullptr)
    return Status::ok();
  if (addr == nullptr) return invalidArgument("bindMemoryToNuma: null address");
  int k = impl_->indexOfNuma(numaNode);
  if (k < 0) return invalidArgument("bindMemoryToNuma: no NUMA node " + std::to_string(numaNode));
  hwloc_obj_t numa = impl_->numaObjs[k];
  if (numa == nullptr) return Status::ok();
  // hwloc rounds the range out to whole pages itself. MIGRATE moves pages that were already
  // touched, so a buffer allocated and zeroed before binding still ends up local.
  if (hwloc_set_area_membind(impl_->topo, addr, bytes, numa->nodeset, HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE) != 0)
    return systemError("hwloc_set_area_membind", errno);
  return Status::ok();
}

int Placement::numCores() const { return impl_->cores; }
int Placement::numNumaNodes() const { return static_cast<int>(impl_->numaOsIndices.size()); }
const std::vector<int>& Placement::numaNodes() const { return impl_->numaOsIndices; }

int Placement::coresOfNuma(int numaNode) const {
  int k = impl_->indexOfNuma(numaNode);
  return k < 0 ? 0 : impl_->coresPerNuma[k];
}

std::string Placement::summary() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%d NUMA node%s, %d cores, %d PUs", numNumaNodes(),
                numNumaNodes() == 1 ? "" : "s", impl_->cores, impl_->pus);
  return buf;
}

}  // namespace braid::topology

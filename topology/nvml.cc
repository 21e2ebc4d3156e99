#include "topology/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "common/log.h"

namespace braid::topology {

namespace {

// The few NVML types used, declared here rather than taken from nvml.h so that building
// braid needs no driver headers. Layouts follow NVML's public ABI (the v2/v3 variants of
// the functions below, stable since CUDA 9).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kNvlinkMaxLinks = 18;
constexpr int kNvlinkRemoteGpu = 0;
constexpr int kNvlinkRemoteCpu = 1;  // NVML_NVLINK_DEVICE_TYPE_IBMNPU
constexpr int kNvlinkRemoteSwitch = 2;

struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
  char reserve[64];  // slack in case a future library writes a longer structure
};

struct NvmlApi {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*getCount)(unsigned*) = nullptr;
  nvmlReturn_t (*getHandleByIndex)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*getPciInfo)(nvmlDevice_t, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*getName)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*getCudaCc)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*getNvLinkState)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*getNvLinkRemotePci)(nvmlDevice_t, unsigned, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*getNvLinkRemoteType)(nvmlDevice_t, unsigned, int*) = nullptr;  // optional

  ~NvmlApi() {
    if (lib != nullptr) {
      if (shutdown != nullptr) shutdown();
      dlclose(lib);
    }
  }

  template <typename F>
  bool sym(F* f, const char* name, bool required = true) {
    *f = reinterpret_cast<F>(dlsym(lib, name));
    return *f != nullptr || !required;
  }

  // Loads the library; false with `why` set when NVML is not usable here.
  bool load(std::string* why) {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      *why = "libnvidia-ml.so.1 not found";
      return false;
    }
    bool ok = sym(&init, "nvmlInit_v2") && sym(&shutdown, "nvmlShutdown") &&
              sym(&getCount, "nvmlDeviceGetCount_v2") && sym(&getHandleByIndex, "nvmlDeviceGetHandleByIndex_v2") &&
              sym(&getPciInfo, "nvmlDeviceGetPciInfo_v3") && sym(&getName, "nvmlDeviceGetName") &&
              sym(&getCudaCc, "nvmlDeviceGetCudaComputeCapability") &&
              sym(&getNvLinkState, "nvmlDeviceGetNvLinkState") &&
              sym(&getNvLinkRemotePci, "nvmlDeviceGetNvLinkRemotePciInfo_v2") &&
              sym(&getNvLinkRemoteType, "nvmlDeviceGetNvLinkRemoteDeviceType", false);
    if (!ok) {
      *why = "libnvidia-ml.so.1 lacks a required symbol (driver too old)";
      shutdown = nullptr;
      return false;
    }
    nvmlReturn_t rc = init();
    if (rc != kNvmlSuccess) {
      *why = "nvmlInit failed (code " + std::to_string(rc) + ")";
      shutdown = nullptr;
      return false;
    }
    return true;
  }
};

std::string busIdOf(const NvmlPciInfo& p) {
  std::string out;
  char s[sizeof p.busId + 1];
  std::memcpy(s, p.busId, sizeof p.busId);
  s[sizeof p.busId] = '\0';
  if (normalizeBusId(s, &out)) return out;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.0", p.domain, p.bus, p.device);
  return normalizeBusId(buf, &out) ? out : std::string();
}

int numaOfPciDevice(const std::string& sysRoot, const std::string& busId) {
  std::ifstream f(sysRoot + "/bus/pci/devices/" + busId + "/numa_node");
  int n = -1;
  if (f >> n) return n;
  return -1;
}

}  // namespace

Status addNvmlInfo(Graph* g, NvmlReport* report, const std::string& sysRoot) {
  *report = NvmlReport{};
  NvmlApi api;
  if (!api.load(&report->note)) {
    BRAID_INFO("topology: NVML not used: %s", report->note.c_str());
    return Status::ok();
  }
  report->loaded = true;
  unsigned count = 0;
  if (api.getCount(&count) != kNvmlSuccess) {
    report->note = "nvmlDeviceGetCount failed";
    return Status::ok();
  }
  report->gpus = static_cast<int>(count);
  bool haveNvlinks = false;
  for (const Link& l : g->links()) haveNvlinks = haveNvlinks || l.type == LinkType::kNvl;
  g->reopen();

  struct Dev {
    nvmlDevice_t h;
    int node;
  };
  std::vector<Dev> devs;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t h = nullptr;
    NvmlPciInfo pci{};
    if (api.getHandleByIndex(i, &h) != kNvmlSuccess || api.getPciInfo(h, &pci) != kNvmlSuccess) continue;
    std::string bus = busIdOf(pci);
    int node = bus.empty() ? -1 : g->findByBusId(bus);
    if (node >= 0 && g->node(node).type != NodeType::kGpu) node = -1;
    if (node < 0) {
      // hwloc did not see this GPU (restricted /sys in a container): attach it to the CPU
      // of its NUMA node with default PCIe bandwidth, so rings still know it exists.
      Node n;
      n.type = NodeType::kGpu;
      n.busId = bus;
      n.numa = numaOfPciDevice(sysRoot, bus);
      int cpu = g->findCpuOfNuma(n.numa);
      if (cpu < 0 && !g->cpus().empty()) cpu = g->cpus()[0];
      if (cpu < 0) {
        for (int k = 0; k < g->size(); ++k)
          if (g->node(k).type == NodeType::kCpu) cpu = k;
      }
      if (cpu >= 0 && n.numa < 0) n.numa = g->node(cpu).numa;
      node = g->addNode(n);
      if (cpu >= 0) BRAID_RETURN_IF_ERROR(g->addLink(cpu, node, LinkType::kPci, kDefaultPciBw));
      ++report->gpusAdded;
    }
    Node& n = g->mutableNode(node);
    n.dev = static_cast<int>(i);
    int major = 0, minor = 0;
    if (api.getCudaCc(h, &major, &minor) == kNvmlSuccess) n.sm = major * 10 + minor;
    char name[96] = {0};
    if (api.getName(h, name, sizeof name - 1) == kNvmlSuccess) n.model = name;
    devs.push_back(Dev{h, node});
  }

  if (!haveNvlinks) {
    // Count per direction, then keep the larger per GPU pair: both ends report the links.
    std::map<std::pair<int, int>, int> dir;
    std::map<int, int> toSwitch;
    std::map<int, int> toCpu;
    for (const Dev& d : devs) {
      for (unsigned l = 0; l < kNvlinkMaxLinks; ++l) {
        int active = 0;
        if (api.getNvLinkState(d.h, l, &active) != kNvmlSuccess) break;  // no more links
        if (!active) continue;
        ++report->nvlinks;
        NvmlPciInfo rp{};
        if (api.getNvLinkRemotePci(d.h, l, &rp) != kNvmlSuccess) continue;
        std::string rbus = busIdOf(rp);
        int rtype = -1;
        if (api.getNvLinkRemoteType != nullptr && api.getNvLinkRemoteType(d.h, l, &rtype) != kNvmlSuccess) rtype = -1;
        int peer = rbus.empty() ? -1 : g->findByBusId(rbus);
        if (peer >= 0 && g->node(peer).type != NodeType::kGpu) peer = -1;
        if (rtype == kNvlinkRemoteGpu || (rtype < 0 && peer >= 0)) {
          if (peer >= 0 && peer != d.node) ++dir[{d.node, peer}];
        } else if (rtype == kNvlinkRemoteCpu) {
          ++toCpu[d.node];
        } else if (rtype == kNvlinkRemoteSwitch || rtype < 0) {
          ++toSwitch[d.node];
        }
      }
    }
    std::set<std::pair<int, int>> done;
    for (const auto& kv : dir) {
      int a = std::min(kv.first.first, kv.first.second), b = std::max(kv.first.first, kv.first.second);
      if (!done.insert({a, b}).second) continue;
      int c = std::max(dir[{a, b}], dir[{b, a}]);
      int sm = std::min(g->node(a).sm, g->node(b).sm);
      BRAID_RETURN_IF_ERROR(g->addLink(a, b, LinkType::kNvl, c * nvlinkBwPerLink(sm), c));
    }
    if (!toSwitch.empty()) {
      Node s;
      s.type = NodeType::kNvSwitch;
      int nvs = g->addNode(s);
      for (const auto& kv : toSwitch)
        BRAID_RETURN_IF_ERROR(g->addLink(kv.first, nvs, LinkType::kNvl, kv.second * nvlinkBwPerLink(g->node(kv.first).sm), kv.second));
    }
    for (const auto& kv : toCpu) {
      int cpu = g->findCpuOfNuma(g->node(kv.first).numa);
      if (cpu >= 0)
        BRAID_RETURN_IF_ERROR(g->addLink(kv.first, cpu, LinkType::kNvl, kv.second * nvlinkBwPerLink(g->node(kv.first).sm), kv.second));
    }
  }
  return g->finalize();
}

}  // namespace braid::topology

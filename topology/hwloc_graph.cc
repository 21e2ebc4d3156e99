#include "topology/hwloc_graph.h"

#include <hwloc.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "topology/xml.h"

namespace braid::topology {

namespace {

constexpr unsigned kNvidia = 0x10de;

// Owns an hwloc topology handle for the duration of one graph build.
class HwlocTopology {
 public:
  HwlocTopology() = default;
  ~HwlocTopology() {
    if (topo_) hwloc_topology_destroy(topo_);
  }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;

  Status init() {
    if (hwloc_topology_init(&topo_) != 0) {
      topo_ = nullptr;
      return systemError("hwloc_topology_init", errno);
    }
    // I/O objects are dropped by default; the communication topology is made of them.
    hwloc_topology_set_io_types_filter(topo_, HWLOC_TYPE_FILTER_KEEP_ALL);
    return Status::ok();
  }
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", static_cast<unsigned>(p.domain), p.bus, p.dev, p.func);
  return buf;
}

bool isGpu(hwloc_obj_t o) {
  if (o->type != HWLOC_OBJ_PCI_DEVICE) return false;
  // Display class (VGA 0x0300, 3D 0x0302) from NVIDIA: the devices CUDA can drive.
  return (o->attr->pcidev.class_id >> 8) == 0x03 && o->attr->pcidev.vendor_id == kNvidia;
}

bool isNvSwitch(hwloc_obj_t o) {
  if (o->type != HWLOC_OBJ_PCI_DEVICE) return false;
  if (o->subtype != nullptr && std::strcmp(o->subtype, "NVSwitch") == 0) return true;
  return o->attr->pcidev.class_id == 0x0680 && o->attr->pcidev.vendor_id == kNvidia;
}

bool isNic(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_PCI_DEVICE && (o->attr->pcidev.class_id >> 8) == 0x02;
}

bool subtreeHasDevice(hwloc_obj_t o) {
  if (isGpu(o) || isNic(o)) return true;
  for (hwloc_obj_t c = o->io_first_child; c != nullptr; c = c->next_sibling)
    if (subtreeHasDevice(c)) return true;
  return false;
}

// hwloc reports the raw link rate after line coding (15.75 GB/s for Gen3 x16); NCCL's
// figures, used for topology files, also take packet overhead off (12 GB/s). Scale hwloc's
// number to NCCL's so that a machine has the same bandwidths whichever way it was read.
double linkBw(float gbps) { return gbps > 0 ? static_cast<double>(gbps) * (12.0 / 15.753846) : kDefaultPciBw; }

const char* portStateName(long v) {
  switch (v) {
    case 1: return "DOWN";
    case 2: return "INIT";
    case 3: return "ARMED";
    case 4: return "ACTIVE";
    case 5: return "ACTIVE_DEFER";
    default: return "";
  }
}

class HwlocBuilder {
 public:
  explicit HwlocBuilder(hwloc_topology_t t) : topo_(t) {}

  StatusOr<Graph> build(const std::string& sourceTag) {
    BRAID_RETURN_IF_ERROR(cpus());
    for (hwloc_obj_t b = nullptr; (b = hwloc_get_next_bridge(topo_, b)) != nullptr;) {
      if (b->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_HOST) continue;
      int cpu = cpuFor(b);
      BRAID_RETURN_IF_ERROR(visit(b, cpu, g_.node(cpu).numa, 0));
    }
    // PCI devices hwloc could not attach to a host bridge (rare: some virtual machines).
    for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_pcidev(topo_, p)) != nullptr;) {
      if (p->parent != nullptr && p->parent->type != HWLOC_OBJ_BRIDGE && p->parent->type != HWLOC_OBJ_PCI_DEVICE) {
        int cpu = cpuFor(p);
        BRAID_RETURN_IF_ERROR(device(p, cpu, g_.node(cpu).numa, linkBw(p->attr->pcidev.linkspeed)));
      }
    }
    BRAID_RETURN_IF_ERROR(nvlinks());
    if (hwloc_obj_t root = hwloc_get_root_obj(topo_)) {
      if (const char* host = hwloc_obj_get_info_by_name(root, "HostName")) g_.setHost(host);
    }
    g_.setSource(sourceTag);
    BRAID_RETURN_IF_ERROR(g_.finalize());
    return std::move(g_);
  }

 private:
  Status cpus() {
    std::string arch;
    if (hwloc_obj_t root = hwloc_get_root_obj(topo_)) {
      if (const char* a = hwloc_obj_get_info_by_name(root, "Architecture")) arch = a;
    }
    int n = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t numa = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, i);
      Node c;
      c.type = NodeType::kCpu;
      c.numa = static_cast<int>(numa->os_index);
      c.arch = arch;
      if (numa->cpuset != nullptr && !hwloc_bitmap_iszero(numa->cpuset)) {
        char* s = nullptr;
        if (hwloc_bitmap_list_asprintf(&s, numa->cpuset) >= 0 && s != nullptr) c.cpus = s;
        std::free(s);
      }
      hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, numa);
      if (pkg == nullptr && numa->cpuset != nullptr)
        pkg = hwloc_get_next_obj_covering_cpuset_by_type(topo_, numa->cpuset, HWLOC_OBJ_PACKAGE, nullptr);
      if (pkg != nullptr) {
        if (const char* v = hwloc_obj_get_info_by_name(pkg, "CPUVendor")) c.vendor = v;
        if (const char* v = hwloc_obj_get_info_by_name(pkg, "CPUModel")) c.model = v;
        if (const char* v = hwloc_obj_get_info_by_name(pkg, "CPUFamilyNumber")) c.cpuFamily = std::atoi(v);
        if (const char* v = hwloc_obj_get_info_by_name(pkg, "CPUModelNumber")) c.cpuModel = std::atoi(v);
      }
      int id = g_.addNode(c);
      numaToCpu_[c.numa] = id;
    }
    if (numaToCpu_.empty()) {
      Node c;
      c.type = NodeType::kCpu;
      c.numa = 0;
      c.arch = arch;
      numaToCpu_[0] = g_.addNode(c);
    }
    for (auto i = numaToCpu_.begin(); i != numaToCpu_.end(); ++i) {
      for (auto j = std::next(i); j != numaToCpu_.end(); ++j) {
        const Node& a = g_.node(i->second);
        const Node& b = g_.node(j->second);
        double bw = std::min(interSocketBw(a.vendor, a.cpuModel), interSocketBw(b.vendor, b.cpuModel));
        BRAID_RETURN_IF_ERROR(g_.addLink(i->second, j->second, LinkType::kSys, bw));
      }
    }
    return Status::ok();
  }

  // The CPU node local to an I/O object: the first NUMA node of its nearest non-I/O
  // ancestor (a host bridge attached to the whole machine goes to NUMA node 0).
  int cpuFor(hwloc_obj_t io) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, io);
    if (anc != nullptr && anc->nodeset != nullptr) {
      int first = hwloc_bitmap_first(anc->nodeset);
      auto it = numaToCpu_.find(first);
      if (it != numaToCpu_.end()) return it->second;
    }
    return numaToCpu_.begin()->second;
  }

  // Walks the I/O children of `obj`. `pciDepth` counts PCI-to-PCI bridges above them:
  // odd depths are root ports and switch downstream ports (folded away), even depths are
  // switch upstream ports (one switch node each).
  Status visit(hwloc_obj_t obj, int parent, int numa, int pciDepth) {
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type == HWLOC_OBJ_BRIDGE) {
        int d = pciDepth + 1;
        if (d % 2 == 0 && subtreeHasDevice(c)) {
          Node sw;
          sw.type = NodeType::kPciSwitch;
          sw.numa = numa;
          if (c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
            sw.busId = busIdOf(c->attr->bridge.upstream.pci);
            char model[32];
            std::snprintf(model, sizeof model, "%04x:%04x", c->attr->bridge.upstream.pci.vendor_id,
                          c->attr->bridge.upstream.pci.device_id);
            sw.model = model;
          }
          int id = g_.addNode(sw);
          BRAID_RETURN_IF_ERROR(g_.addLink(parent, id, LinkType::kPci, linkBw(c->attr->bridge.upstream.pci.linkspeed)));
          BRAID_RETURN_IF_ERROR(visit(c, id, numa, d));
        } else {
          BRAID_RETURN_IF_ERROR(visit(c, parent, numa, d));
        }
      } else if (c->type == HWLOC_OBJ_PCI_DEVICE) {
        BRAID_RETURN_IF_ERROR(device(c, parent, numa, linkBw(c->attr->pcidev.linkspeed)));
      }
    }
    return Status::ok();
  }

  Status device(hwloc_obj_t c, int parent, int numa, double bw) {
    if (isNvSwitch(c)) {
      nvSwitchObjs_.insert(c);
      return Status::ok();
    }
    if (isGpu(c)) {
      Node n;
      n.type = NodeType::kGpu;
      n.busId = busIdOf(c->attr->pcidev);
      n.numa = numa;
      int cudaIdx = -1, nvmlIdx = -1;
      for (hwloc_obj_t o = c->io_first_child; o != nullptr; o = o->next_sibling) {
        if (o->type != HWLOC_OBJ_OS_DEVICE || o->name == nullptr) continue;
        if (std::sscanf(o->name, "cuda%d", &cudaIdx) == 1 || std::sscanf(o->name, "nvml%d", &nvmlIdx) == 1) {
          if (const char* m = hwloc_obj_get_info_by_name(o, "GPUModel")) n.model = m;
        }
      }
      n.dev = cudaIdx >= 0 ? cudaIdx : nvmlIdx;
      int id = g_.addNode(n);
      objToNode_[c] = id;
      for (hwloc_obj_t o = c->io_first_child; o != nullptr; o = o->next_sibling) objToNode_[o] = id;
      return g_.addLink(parent, id, LinkType::kPci, bw);
    }
    if (isNic(c)) {
      Node n;
      n.type = NodeType::kNic;
      n.busId = busIdOf(c->attr->pcidev);
      n.numa = numa;
      unsigned sub = c->attr->pcidev.class_id & 0xff;
      n.linkLayer = sub == 0x07 ? "InfiniBand" : sub == 0x00 ? "Ethernet" : "";
      for (hwloc_obj_t o = c->io_first_child; o != nullptr; o = o->next_sibling) {
        if (o->type != HWLOC_OBJ_OS_DEVICE || o->name == nullptr) continue;
        if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && n.hca.empty()) {
          n.hca = o->name;
          // Use the first active port; port 1 when none is reported active.
          for (int p = 1; p <= 8; ++p) {
            char key[32];
            std::snprintf(key, sizeof key, "Port%dState", p);
            const char* st = hwloc_obj_get_info_by_name(o, key);
            if (st == nullptr) break;
            long v = std::strtol(st, nullptr, 10);
            if (p == 1 || v == 4) {
              n.port = p;
              n.state = portStateName(v);
            }
            if (v == 4) break;
          }
        } else if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && n.ifName.empty()) {
          n.ifName = o->name;
        }
      }
      if (const char* m = hwloc_obj_get_info_by_name(c, "PCIDevice")) n.model = m;
      int id = g_.addNode(n);
      return g_.addLink(parent, id, LinkType::kPci, bw);
    }
    return Status::ok();
  }

  // NVLink from hwloc's "NVLinkBandwidth" matrix (MB/s between GPU OS devices and NVSwitch
  // PCI devices), present when the XML or this hwloc was made with NVML. All NVSwitch
  // chips are merged into one node, as NCCL does: the chips of one fabric are fully
  // connected, and per-chip detail would only slow the path search down.
  Status nvlinks() {
    unsigned nr = 0;
    if (hwloc_distances_get_by_name(topo_, "NVLinkBandwidth", &nr, nullptr, 0) != 0 || nr == 0) return Status::ok();
    std::vector<hwloc_distances_s*> d(nr, nullptr);
    if (hwloc_distances_get_by_name(topo_, "NVLinkBandwidth", &nr, d.data(), 0) != 0) return Status::ok();
    int nvs = -1;
    std::set<hwloc_obj_t> chips;
    Status st;
    for (unsigned k = 0; k < nr && st.isOk(); ++k) {
      hwloc_distances_s* m = d[k];
      if (m == nullptr) continue;
      const unsigned n = m->nbobjs;
      auto nodeOf = [&](hwloc_obj_t o) -> int {
        if (o == nullptr) return -1;
        if (nvSwitchObjs_.count(o) || isNvSwitch(o)) return -2;
        auto it = objToNode_.find(o);
        return it == objToNode_.end() ? -1 : it->second;
      };
      for (unsigned i = 0; i < n && st.isOk(); ++i) {
        for (unsigned j = 0; j < n && st.isOk(); ++j) {
          if (i == j) continue;
          uint64_t v = std::max(m->values[i * n + j], m->values[j * n + i]);
          if (v == 0) continue;
          int a = nodeOf(m->objs[i]);
          int b = nodeOf(m->objs[j]);
          double bw = static_cast<double>(v) / 1000.0;
          // hwloc reports about 25 GB/s per link for NVLink 2-4; the count is informative.
          int count = std::max(1, static_cast<int>(std::lround(static_cast<double>(v) / 25000.0)));
          if (a >= 0 && b == -2) {
            if (nvs < 0) {
              Node s;
              s.type = NodeType::kNvSwitch;
              nvs = g_.addNode(s);
            }
            chips.insert(m->objs[j]);
            st = g_.addLink(a, nvs, LinkType::kNvl, bw, count);
          } else if (a >= 0 && b >= 0 && a < b && g_.node(a).type == NodeType::kGpu && g_.node(b).type == NodeType::kGpu) {
            st = g_.addLink(a, b, LinkType::kNvl, bw, count);
          }
        }
      }
    }
    for (hwloc_distances_s* m : d)
      if (m != nullptr) hwloc_distances_release(topo_, m);
    if (nvs >= 0) g_.mutableNode(nvs).chips = static_cast<int>(chips.size());
    return st;
  }

  hwloc_topology_t topo_;
  Graph g_;
  std::map<int, int> numaToCpu_;
  std::map<hwloc_obj_t, int> objToNode_;
  std::set<hwloc_obj_t> nvSwitchObjs_;
};

}  // namespace

StatusOr<Graph> discoverHwloc() {
  // One discovery at a time per process: hwloc's Linux backend goes through libudev, whose
  // shared state is not safe to use from two threads at once (ThreadSanitizer caught two
  // communicators initializing on two threads, the one-thread-per-GPU pattern, racing
  // inside it).
  static std::mutex discovering;
  std::lock_guard<std::mutex> lock(discovering);
  HwlocTopology t;
  BRAID_RETURN_IF_ERROR(t.init());
  if (hwloc_topology_load(t.get()) != 0) return systemError("hwloc_topology_load", errno);
  HwlocBuilder b(t.get());
  return b.build("hwloc");
}

StatusOr<Graph> parseHwlocXml(const std::string& text, const std::string& source) {
  // Check well-formedness with our own reader first: hwloc reports a malformed file only
  // as EINVAL (and prints to stderr), without saying where.
  BRAID_ASSIGN_OR_RETURN(XmlElement root, parseXml(text, source));
  if (root.name != "topology")
    return invalidArgument(source + ":" + std::to_string(root.line) + ": root element is <" + root.name +
                           ">, expected <topology> (not an hwloc XML file)");
  HwlocTopology t;
  BRAID_RETURN_IF_ERROR(t.init());
  // The size counts the terminating NUL, as hwloc_topology_export_xmlbuffer() reports it.
  if (hwloc_topology_set_xmlbuffer(t.get(), text.data(), static_cast<int>(text.size()) + 1) != 0)
    return invalidArgument(source + ": hwloc rejected the XML (" + std::strerror(errno) + ")");
  if (hwloc_topology_load(t.get()) != 0)
    return invalidArgument(source + ": hwloc could not load the topology (" + std::strerror(errno) + ")");
  HwlocBuilder b(t.get());
  auto g = b.build("hwloc-xml:" + source);
  if (!g.isOk()) return g.status().withContext(source);
  return g;
}

StatusOr<Graph> loadHwlocXmlFile(const std::string& path) {
  std::string text;
  BRAID_RETURN_IF_ERROR(readFile(path, &text));
  return parseHwlocXml(text, path);
}

}  // namespace braid::topology

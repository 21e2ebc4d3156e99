#include "topology/nccl_xml.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <set>

namespace braid::topology {

namespace {

// RDMA device names, as opposed to network interface names: NCCL writes the HCA name for
// its IB transport and the interface name for its socket transport in <net name=...>.
bool looksLikeHca(const std::string& name) {
  static const char* const kPrefixes[] = {"mlx", "hfi", "irdma", "bnxt_re", "efa", "rdmap", "qedr",
                                          "rxe", "siw", "erdma", "ionic", "cxgb", "i40iw", "hns"};
  for (const char* p : kPrefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

class NcclBuilder {
 public:
  explicit NcclBuilder(const std::string& source) : src_(source) {}

  StatusOr<Graph> build(const XmlElement& root) {
    if (root.name != "system")
      return errorAt(root, "root element is <" + root.name + ">, expected <system> (not an NCCL topology file)");
    if (const std::string* v = root.attr("version")) {
      long ver;
      if (!toLong(*v, 10, &ver)) return errorAt(root, "<system> version='" + *v + "' is not an integer");
    }
    for (const XmlElement& c : root.children) {
      if (c.name == "cpu") BRAID_RETURN_IF_ERROR(cpu(c));
    }
    BRAID_RETURN_IF_ERROR(resolveNvlinks());
    g_.setSource("nccl-xml:" + src_);
    BRAID_RETURN_IF_ERROR(g_.finalize().withContext(src_));
    return std::move(g_);
  }

 private:
  struct PendingNvlink {
    int gpu;
    std::string target;
    int count;
    long tclass;  // -1 when absent
    const XmlElement* el;
  };

  Status errorAt(const XmlElement& el, const std::string& what) const {
    return invalidArgument(src_ + ":" + std::to_string(el.line) + ": " + what);
  }

  static bool toLong(const std::string& s, int base, long* out) {
    if (s.empty()) return false;
    const char* p = s.c_str();
    if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) p += 2;
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(p, &end, base);
    if (end == p || *end != '\0' || errno != 0) return false;
    *out = v;
    return true;
  }

  // Reads integer attribute `key` of `el` into *out when present; an error when present
  // but not an integer in [lo, hi].
  Status intAttr(const XmlElement& el, const char* key, long lo, long hi, long* out, int base = 10) {
    const std::string* v = el.attr(key);
    if (v == nullptr) return Status::ok();
    long x;
    if (!toLong(*v, base, &x)) return errorAt(el, "<" + el.name + "> " + key + "='" + *v + "' is not " + (base == 16 ? "a hexadecimal number" : "an integer"));
    if (x < lo || x > hi)
      return errorAt(el, "<" + el.name + "> " + key + "='" + *v + "' is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *out = x;
    return Status::ok();
  }

  Status cpu(const XmlElement& el) {
    Node n;
    n.type = NodeType::kCpu;
    long numa = -1;
    BRAID_RETURN_IF_ERROR(intAttr(el, "numaid", 0, 1 << 20, &numa));
    if (numa < 0) numa = nextAutoNuma_;
    if (!usedNuma_.insert(static_cast<int>(numa)).second)
      return errorAt(el, "second <cpu> with numaid=" + std::to_string(numa));
    nextAutoNuma_ = std::max<long>(nextAutoNuma_, numa + 1);
    n.numa = static_cast<int>(numa);
    if (const std::string* aff = el.attr("affinity")) {
      if (!cpuMaskToList(*aff, &n.cpus)) return errorAt(el, "<cpu> affinity='" + *aff + "' is not a hexadecimal CPU mask");
    }
    if (const std::string* a = el.attr("arch")) n.arch = *a;
    if (const std::string* v = el.attr("vendor")) n.vendor = *v;
    long fam = -1, model = -1;
    BRAID_RETURN_IF_ERROR(intAttr(el, "familyid", 0, INT_MAX, &fam));
    BRAID_RETURN_IF_ERROR(intAttr(el, "modelid", 0, INT_MAX, &model));
    n.cpuFamily = static_cast<int>(fam);
    n.cpuModel = static_cast<int>(model);
    int id = g_.addNode(n);
    // The inter-socket fabric: NCCL links every pair of CPUs directly.
    for (int other : cpuNodes_) {
      const Node& o = g_.node(other);
      double bw = std::min(interSocketBw(n.vendor, n.cpuModel), interSocketBw(o.vendor, o.cpuModel));
      BRAID_RETURN_IF_ERROR(g_.addLink(id, other, LinkType::kSys, bw));
    }
    cpuNodes_.push_back(id);
    for (const XmlElement& c : el.children) {
      if (c.name == "pci") BRAID_RETURN_IF_ERROR(pci(c, id, n.numa));
      else if (c.name == "nic") BRAID_RETURN_IF_ERROR(nic(c, id, n.numa, "", kDefaultPciBw, ""));
    }
    return Status::ok();
  }

  Status pci(const XmlElement& el, int parent, int numa) {
    const std::string* bus = el.attr("busid");
    if (bus == nullptr) return errorAt(el, "<pci> without busid");
    std::string busId;
    if (!normalizeBusId(*bus, &busId)) return errorAt(el, "<pci> busid='" + *bus + "' is not a PCI bus id (dddd:bb:dd.f)");
    long cls = -1;
    BRAID_RETURN_IF_ERROR(intAttr(el, "class", 0, 0xffffff, &cls, 16));
    long width = 0;
    BRAID_RETURN_IF_ERROR(intAttr(el, "link_width", 0, 64, &width));
    double bw = 0;
    if (const std::string* sp = el.attr("link_speed")) {
      if (!sp->empty()) {
        bw = pciBwFromSpeed(*sp, static_cast<int>(width));
        if (bw <= 0) return errorAt(el, "<pci> link_speed='" + *sp + "' is not a speed like '16.0 GT/s'");
      }
    }
    if (bw <= 0) bw = kDefaultPciBw;

    const XmlElement* gpuEl = nullptr;
    const XmlElement* nicEl = nullptr;
    bool hasPciChildren = false;
    for (const XmlElement& c : el.children) {
      if (c.name == "gpu") gpuEl = &c;
      else if (c.name == "nic") nicEl = &c;
      else if (c.name == "pci") hasPciChildren = true;
    }
    long base = cls >= 0 ? (cls >> 16) : -1;
    long sub = cls >= 0 ? (cls >> 8) & 0xff : -1;

    if (gpuEl != nullptr || base == 0x03) return gpu(el, gpuEl, busId, parent, numa, bw);
    if (nicEl != nullptr || base == 0x02) {
      std::string layer = (base == 0x02 && sub == 0x07) ? "InfiniBand" : (base == 0x02 && sub == 0x00) ? "Ethernet" : "";
      if (nicEl != nullptr) return nic(*nicEl, parent, numa, busId, bw, layer);
      return plainNic(el, parent, numa, busId, bw, layer);
    }
    if (base == 0x06 && sub == 0x80) return Status::ok();  // NVSwitch PCI function: reached via NVLink only
    if ((base == 0x06 && sub == 0x04) || hasPciChildren || cls < 0) {
      if (!seenBus_.insert(busId).second) return errorAt(el, "second <pci> with busid " + busId);
      Node n;
      n.type = NodeType::kPciSwitch;
      n.busId = busId;
      n.numa = numa;
      int id = g_.addNode(n);
      BRAID_RETURN_IF_ERROR(g_.addLink(parent, id, LinkType::kPci, bw));
      for (const XmlElement& c : el.children) {
        if (c.name == "pci") BRAID_RETURN_IF_ERROR(pci(c, id, numa));
        else if (c.name == "nic") BRAID_RETURN_IF_ERROR(nic(c, id, numa, "", bw, ""));
      }
      return Status::ok();
    }
    return Status::ok();  // storage, USB, ...: not part of the communication topology
  }

  Status gpu(const XmlElement& pciEl, const XmlElement* el, const std::string& busId, int parent, int numa, double bw) {
    if (!seenBus_.insert(busId).second) return errorAt(pciEl, "second <pci> with busid " + busId);
    Node n;
    n.type = NodeType::kGpu;
    n.busId = busId;
    n.numa = numa;
    if (el != nullptr) {
      long dev = -1, sm = 0, rank = -1, gdr = 0;
      BRAID_RETURN_IF_ERROR(intAttr(*el, "dev", 0, 1 << 16, &dev));
      BRAID_RETURN_IF_ERROR(intAttr(*el, "sm", 0, 10000, &sm));
      BRAID_RETURN_IF_ERROR(intAttr(*el, "rank", 0, INT_MAX, &rank));
      BRAID_RETURN_IF_ERROR(intAttr(*el, "gdr", 0, 1, &gdr));
      n.dev = static_cast<int>(dev);
      n.sm = static_cast<int>(sm);
      n.rank = static_cast<int>(rank);
      n.gdr = gdr != 0;
    }
    int id = g_.addNode(n);
    BRAID_RETURN_IF_ERROR(g_.addLink(parent, id, LinkType::kPci, bw));
    if (el != nullptr) {
      for (const XmlElement& c : el->children) {
        if (c.name != "nvlink") continue;
        const std::string* target = c.attr("target");
        if (target == nullptr) return errorAt(c, "<nvlink> without target");
        std::string t;
        if (!normalizeBusId(*target, &t)) return errorAt(c, "<nvlink> target='" + *target + "' is not a PCI bus id");
        long count = 1, tclass = -1;
        BRAID_RETURN_IF_ERROR(intAttr(c, "count", 1, 64, &count));
        BRAID_RETURN_IF_ERROR(intAttr(c, "tclass", 0, 0xffffff, &tclass, 16));
        nvlinks_.push_back(PendingNvlink{id, t, static_cast<int>(count), tclass, &c});
      }
    }
    return Status::ok();
  }

  Status plainNic(const XmlElement& el, int parent, int numa, const std::string& busId, double bw, const std::string& layer) {
    Node n;
    n.type = NodeType::kNic;
    n.busId = busId;
    n.numa = numa;
    n.linkLayer = layer;
    int id = g_.addNode(n);
    return g_.addLink(parent, id, LinkType::kPci, bw);
  }

  // <nic> holds one <net> per port or virtual device; each becomes a NIC node.
  Status nic(const XmlElement& el, int parent, int numa, const std::string& busId, double bw,
             const std::string& layer) {
    int made = 0;
    for (const XmlElement& c : el.children) {
      if (c.name != "net") continue;
      Node n;
      n.type = NodeType::kNic;
      n.busId = busId;
      n.numa = numa;
      n.linkLayer = layer;
      if (const std::string* name = c.attr("name")) {
        if (looksLikeHca(*name)) n.hca = *name;
        else n.ifName = *name;
      }
      long dev = -1, speed = 0, port = 1, gdr = 0;
      BRAID_RETURN_IF_ERROR(intAttr(c, "dev", 0, 1 << 16, &dev));
      BRAID_RETURN_IF_ERROR(intAttr(c, "speed", 0, LONG_MAX, &speed));
      BRAID_RETURN_IF_ERROR(intAttr(c, "port", 0, 255, &port));
      BRAID_RETURN_IF_ERROR(intAttr(c, "gdr", 0, 1, &gdr));
      n.dev = static_cast<int>(dev);
      n.speedMbps = speed;
      n.port = static_cast<int>(port);
      n.gdr = gdr != 0;
      int id = g_.addNode(n);
      // A NIC with no PCI path of its own (directly under <cpu>) is limited by its port.
      double linkBw = busId.empty() && speed > 0 ? static_cast<double>(speed) / 8000.0 : bw;
      BRAID_RETURN_IF_ERROR(g_.addLink(parent, id, LinkType::kPci, linkBw));
      ++made;
    }
    if (made == 0) return plainNic(el, parent, numa, busId, bw, layer);
    return Status::ok();
  }

  Status resolveNvlinks() {
    // GPU pairs are usually listed from both sides; take the larger count rather than
    // adding them, so a link described twice is counted once.
    std::map<std::pair<int, int>, int> gpuPairs;
    std::set<std::string> switchChips;
    int nvs = -1;
    for (const PendingNvlink& p : nvlinks_) {
      int target = -1;
      for (int i = 0; i < g_.size(); ++i) {
        if (g_.node(i).busId == p.target && (g_.node(i).type == NodeType::kGpu || g_.node(i).type == NodeType::kCpu)) target = i;
      }
      long base = p.tclass >= 0 ? p.tclass >> 8 : -1;
      bool toSwitch = base == 0x0680 || (p.tclass < 0 && target < 0);
      if (toSwitch) {
        if (nvs < 0) {
          Node n;
          n.type = NodeType::kNvSwitch;
          nvs = g_.addNode(n);
        }
        switchChips.insert(p.target);
        int sm = g_.node(p.gpu).sm;
        BRAID_RETURN_IF_ERROR(g_.addLink(p.gpu, nvs, LinkType::kNvl, p.count * nvlinkBwPerLink(sm), p.count));
        continue;
      }
      if (base == 0x0604 || (target >= 0 && g_.node(target).type == NodeType::kCpu) || (base >> 8) == 0x06) {
        // NVLink to the CPU (POWER9, Grace): the GPU's own CPU.
        int cpu = g_.findCpuOfNuma(g_.node(p.gpu).numa);
        if (cpu < 0) return errorAt(*p.el, "<nvlink> to a CPU, but the GPU has no CPU");
        BRAID_RETURN_IF_ERROR(g_.addLink(p.gpu, cpu, LinkType::kNvl, p.count * nvlinkBwPerLink(g_.node(p.gpu).sm), p.count));
        continue;
      }
      if (target < 0 || g_.node(target).type != NodeType::kGpu)
        return errorAt(*p.el, "<nvlink> target " + p.target + " is not a GPU in this file");
      if (target == p.gpu) return errorAt(*p.el, "<nvlink> from a GPU to itself");
      auto key = std::make_pair(std::min(p.gpu, target), std::max(p.gpu, target));
      // Per direction: a GPU may list several <nvlink> elements to the same peer.
      dirCount_[{p.gpu, target}] += p.count;
      gpuPairs[key] = std::max(dirCount_[{p.gpu, target}], dirCount_[{target, p.gpu}]);
    }
    for (const auto& kv : gpuPairs) {
      int a = kv.first.first, b = kv.first.second;
      int sm = std::min(g_.node(a).sm > 0 ? g_.node(a).sm : 1000, g_.node(b).sm > 0 ? g_.node(b).sm : 1000);
      if (sm == 1000) sm = 0;
      BRAID_RETURN_IF_ERROR(g_.addLink(a, b, LinkType::kNvl, kv.second * nvlinkBwPerLink(sm), kv.second));
    }
    if (nvs >= 0) g_.mutableNode(nvs).chips = static_cast<int>(switchChips.size());
    return Status::ok();
  }

  const std::string& src_;
  Graph g_;
  std::vector<int> cpuNodes_;
  std::set<int> usedNuma_;
  long nextAutoNuma_ = 0;
  std::set<std::string> seenBus_;
  std::vector<PendingNvlink> nvlinks_;
  std::map<std::pair<int, int>, int> dirCount_;
};

}  // namespace

StatusOr<Graph> graphFromNcclXml(const XmlElement& root, const std::string& source) {
  NcclBuilder b(source);
  return b.build(root);
}

StatusOr<Graph> parseNcclTopo(const std::string& text, const std::string& source) {
  BRAID_ASSIGN_OR_RETURN(XmlElement root, parseXml(text, source));
  return graphFromNcclXml(root, source);
}

StatusOr<Graph> loadNcclTopoFile(const std::string& path) {
  std::string text;
  BRAID_RETURN_IF_ERROR(readFile(path, &text));
  return parseNcclTopo(text, path);
}

}  // namespace braid::topology

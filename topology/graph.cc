#include "topology/graph.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>

namespace braid::topology {

namespace {

const char* const kNodeTypeNames[] = {"cpu", "switch", "gpu", "nic", "nvswitch"};
const char* const kLinkTypeNames[] = {"LOC", "NVL", "PCI", "SYS", "NET"};
const char* const kPathTypeNames[] = {"LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS", "NET", "DIS"};

template <typename E, size_t N>
bool parseName(const char* const (&names)[N], const std::string& s, E* out) {
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) {
      *out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

// Two bandwidths closer than this are the same: they come from decimal files and sums.
bool bwEqual(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::max(1.0, std::max(a, b)); }

}  // namespace

const char* nodeTypeName(NodeType t) { return kNodeTypeNames[static_cast<int>(t)]; }
const char* linkTypeName(LinkType t) { return kLinkTypeNames[static_cast<int>(t)]; }
const char* pathTypeName(PathType t) { return kPathTypeNames[static_cast<int>(t)]; }
bool parseNodeType(const std::string& s, NodeType* out) { return parseName(kNodeTypeNames, s, out); }
bool parseLinkType(const std::string& s, LinkType* out) { return parseName(kLinkTypeNames, s, out); }
bool parsePathType(const std::string& s, PathType* out) { return parseName(kPathTypeNames, s, out); }

double nvlinkBwPerLink(int sm) {
  // NCCL's per-link figures (src/graph/topo.h): what a link delivers after protocol
  // overhead, not the marketing number.
  if (sm <= 0) return 20.0;
  if (sm < 70) return 18.0;
  if (sm < 80) return 20.0;
  if (sm == 86 || sm == 87 || sm == 89) return 12.0;
  if (sm < 90) return 20.0;
  if (sm < 100) return 20.6;
  return 40.1;
}

double pciBwFromSpeed(const std::string& speed, int width) {
  const char* s = speed.c_str();
  char* end = nullptr;
  double gts = std::strtod(s, &end);
  if (end == s || !(gts > 0) || gts > 1000) return 0;
  if (width <= 0) width = 16;
  // GB/s per lane after line coding: Gen1/2 use 8b/10b, Gen3+ 128b/130b, less packet
  // overhead. Same table as NCCL (bw = width * k / 80).
  double k = gts < 4 ? 15.0 : gts < 7 ? 30.0 : gts * 7.5;
  return width * k / 80.0;
}

double interSocketBw(const std::string& vendor, int model) {
  if (vendor == "GenuineIntel") {
    if (model >= 143) return 22.0;  // Sapphire Rapids and later: UPI 2.0
    if (model >= 85 || model < 0) return 10.0;  // Skylake-SP and later
    return 6.0;
  }
  if (vendor == "AuthenticAMD") return 16.0;
  return 10.0;
}

const std::string& Node::netName() const {
  if (!hca.empty()) return hca;
  if (!ifName.empty()) return ifName;
  return name;
}

bool Node::operator==(const Node& o) const {
  return std::tie(type, name, busId, numa, cpus, arch, vendor, cpuFamily, cpuModel, dev, sm, rank,
                  gdr, model, hca, ifName, port, speedMbps, linkLayer, state, chips) ==
         std::tie(o.type, o.name, o.busId, o.numa, o.cpus, o.arch, o.vendor, o.cpuFamily, o.cpuModel,
                  o.dev, o.sm, o.rank, o.gdr, o.model, o.hca, o.ifName, o.port, o.speedMbps,
                  o.linkLayer, o.state, o.chips);
}

bool Link::operator==(const Link& o) const {
  return a == o.a && b == o.b && type == o.type && bwEqual(bw, o.bw) && count == o.count;
}

int Graph::addNode(Node n) {
  nodes_.push_back(std::move(n));
  return static_cast<int>(nodes_.size()) - 1;
}

Status Graph::addLink(int a, int b, LinkType type, double bw, int count) {
  if (finalized_) return internalError("addLink on a finalized graph");
  if (a < 0 || b < 0 || a >= size() || b >= size())
    return invalidArgument("link between unknown nodes " + std::to_string(a) + " and " + std::to_string(b));
  if (a == b) return invalidArgument("link from node " + std::to_string(a) + " to itself");
  if (!(bw >= 0) || !std::isfinite(bw)) return invalidArgument("link with bad bandwidth");
  if (count < 1) return invalidArgument("link with count < 1");
  if (links_.size() >= static_cast<size_t>(kMaxGraphLinks))
    return invalidArgument("more than " + std::to_string(kMaxGraphLinks) + " links (the bound on one host's graph)");
  if (a > b) std::swap(a, b);
  for (Link& l : links_) {
    if (l.a == a && l.b == b && l.type == type) {
      l.bw += bw;
      l.count += count;
      return Status::ok();
    }
  }
  links_.push_back(Link{a, b, type, bw, count});
  return Status::ok();
}

Status Graph::finalize() {
  if (finalized_) return Status::ok();
  if (size() > kMaxGraphNodes)
    return invalidArgument(std::to_string(size()) + " nodes exceed the bound of " + std::to_string(kMaxGraphNodes) +
                           " on one host's graph");
  const int n = size();
  // Canonical order: the same machine must give the same node indices whichever loader
  // produced the graph, so that JSON round trips compare equal and GPU i means CUDA device i.
  // GPUs and NICs go by their device index only when every one of them has one (a file
  // may give it for some only; then PCI bus order, which is nvidia-smi's, is the
  // consistent choice).
  bool allDev[kNumNodeTypes] = {true, true, true, true, true};
  for (const Node& x : nodes_) allDev[static_cast<int>(x.type)] &= x.dev >= 0;
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int i) {
    const Node& x = nodes_[i];
    int primary = 0;
    switch (x.type) {
      case NodeType::kCpu: primary = x.numa; break;
      case NodeType::kGpu:
      case NodeType::kNic: primary = allDev[static_cast<int>(x.type)] ? x.dev : 0; break;
      default: primary = 0; break;
    }
    return std::make_tuple(static_cast<int>(x.type), primary, x.busId, x.port, x.hca, x.ifName);
  };
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return key(x) < key(y); });
  std::vector<int> where(n);
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int i = 0; i < n; ++i) {
    where[order[i]] = i;
    sorted.push_back(std::move(nodes_[order[i]]));
  }
  nodes_ = std::move(sorted);
  for (Link& l : links_) {
    l.a = where[l.a];
    l.b = where[l.b];
    if (l.a > l.b) std::swap(l.a, l.b);
  }
  std::sort(links_.begin(), links_.end(), [](const Link& x, const Link& y) {
    return std::tie(x.a, x.b, x.type) < std::tie(y.a, y.b, y.type);
  });

  for (auto& v : byType_) v.clear();
  for (int i = 0; i < n; ++i) byType_[static_cast<int>(nodes_[i].type)].push_back(i);

  // Names follow the canonical order (GPU2 is the third GPU), and CPUs are named by their
  // NUMA index like nvidia-smi does; renaming on every finalize keeps that true after a
  // refinement added nodes.
  static const char* const kPrefix[] = {"NUMA", "SW", "GPU", "NIC", "NVS"};
  for (int t = 0; t < kNumNodeTypes; ++t) {
    const auto& ids = byType_[t];
    for (size_t k = 0; k < ids.size(); ++k) {
      Node& x = nodes_[ids[k]];
      int num = (x.type == NodeType::kCpu && x.numa >= 0) ? x.numa : static_cast<int>(k);
      x.name = kPrefix[t] + std::to_string(num);
    }
  }
  std::set<int> numas;
  for (int c : byType_[static_cast<int>(NodeType::kCpu)]) {
    if (nodes_[c].numa >= 0 && !numas.insert(nodes_[c].numa).second)
      return invalidArgument("two CPU nodes for NUMA node " + std::to_string(nodes_[c].numa));
  }
  std::set<std::string> names;
  for (const Node& x : nodes_) {
    if (!names.insert(x.name).second) return invalidArgument("two nodes named '" + x.name + "'");
  }
  for (const Link& l : links_) {
    const Node& x = nodes_[l.a];
    const Node& y = nodes_[l.b];
    bool nvlEnds = (x.type == NodeType::kGpu || x.type == NodeType::kNvSwitch || x.type == NodeType::kCpu) &&
                   (y.type == NodeType::kGpu || y.type == NodeType::kNvSwitch || y.type == NodeType::kCpu);
    if (l.type == LinkType::kNvl && !nvlEnds)
      return invalidArgument("NVLink between " + x.name + " and " + y.name + " (not GPU/NVSwitch)");
    if (l.type == LinkType::kSys && (x.type != NodeType::kCpu || y.type != NodeType::kCpu))
      return invalidArgument("SYS link between " + x.name + " and " + y.name + " (not two CPUs)");
  }

  adj_.assign(n, {});
  for (size_t i = 0; i < links_.size(); ++i) {
    adj_[links_[i].a].push_back(static_cast<int>(i));
    adj_[links_[i].b].push_back(static_cast<int>(i));
  }
  paths_ = std::make_shared<PathRows>();
  paths_->rows.resize(n);
  finalized_ = true;
  return Status::ok();
}

const std::vector<Path>& Graph::pathsFrom(int src) const {
  std::lock_guard<std::mutex> lock(paths_->mu);
  auto& row = paths_->rows[static_cast<size_t>(src)];
  if (!row) {
    auto r = std::make_unique<std::vector<Path>>(nodes_.size());
    computePathsFrom(src, r.get());
    row = std::move(r);
  }
  return *row;
}

namespace {

struct Label {
  PathType type;
  double bw;
  int hops;
};

// `a` is at least as good as `b` in every respect.
bool covers(const Label& a, const Label& b) {
  return a.type <= b.type && (a.bw > b.bw || bwEqual(a.bw, b.bw)) && a.hops <= b.hops;
}

bool better(const Label& a, const Label& b) {
  if (a.type != b.type) return a.type < b.type;
  if (!bwEqual(a.bw, b.bw)) return a.bw > b.bw;
  return a.hops < b.hops;
}

}  // namespace

// Best paths from `src` to every node. A path's type is the worst of its hops, and its
// bandwidth the narrowest; neither is additive, and "closest type first, then widest" is
// not preserved by extending paths (a PIX path of 10 GB/s beats a PXB path of 100 GB/s,
// but after a 50 GB/s SYS hop the second is better). So this keeps, per node, every label
// not dominated in (type, bandwidth, hops) and relaxes until nothing changes. The graphs
// are a few dozen nodes, and the number of useful labels per node is bounded by the
// number of path types, so this finishes in microseconds (linear in the graph's size).
void Graph::computePathsFrom(int src, std::vector<Path>* row) const {
  const int n = size();
  std::vector<std::vector<Label>> labels(n);
  std::deque<std::pair<int, Label>> work;
  labels[src].push_back(Label{PathType::kLoc, kLocBw, 0});
  work.push_back({src, labels[src][0]});
  while (!work.empty()) {
    auto [u, lu] = work.front();
    work.pop_front();
    // Skip a label that was replaced by a better one after it was queued.
    bool alive = false;
    for (const Label& l : labels[u]) {
      if (l.type == lu.type && bwEqual(l.bw, lu.bw) && l.hops == lu.hops) alive = true;
    }
    if (!alive) continue;
    const Node& un = nodes_[u];
    if (u != src) {
      // Devices are endpoints, with one exception NCCL also makes: a GPU forwards NVLink
      // traffic to its NVLink peers (PATH_NVB), but nothing over PCIe.
      if (un.type == NodeType::kNic) continue;
      if (un.type == NodeType::kGpu && lu.type > PathType::kNvb) continue;
    }
    for (int li : adj_[u]) {
      const Link& l = links_[li];
      int v = l.a == u ? l.b : l.a;
      if (v == src) continue;
      if (u != src && un.type == NodeType::kGpu && l.type != LinkType::kNvl) continue;
      const Node& vn = nodes_[v];
      PathType step = PathType::kPix;
      switch (l.type) {
        case LinkType::kLoc: step = PathType::kLoc; break;
        case LinkType::kNvl:
          step = (un.type == NodeType::kGpu && u != src) ? PathType::kNvb : PathType::kNvl;
          break;
        case LinkType::kPci:
          if (un.type == NodeType::kCpu || vn.type == NodeType::kCpu) step = PathType::kPhb;
          else if (un.type == NodeType::kPciSwitch && vn.type == NodeType::kPciSwitch) step = PathType::kPxb;
          else step = PathType::kPix;
          break;
        case LinkType::kSys: step = PathType::kSys; break;
        case LinkType::kNet: step = PathType::kNet; break;
      }
      Label lv{std::max(lu.type, step), std::min(lu.bw, l.bw), lu.hops + 1};
      auto& lst = labels[v];
      bool dominated = false;
      for (const Label& o : lst) {
        if (covers(o, lv)) {
          dominated = true;
          break;
        }
      }
      if (dominated) continue;
      lst.erase(std::remove_if(lst.begin(), lst.end(), [&](const Label& o) { return covers(lv, o); }),
                lst.end());
      lst.push_back(lv);
      work.push_back({v, lv});
    }
  }
  for (int v = 0; v < n; ++v) {
    Path& p = (*row)[static_cast<size_t>(v)];
    if (labels[v].empty()) continue;
    const Label* best = &labels[v][0];
    for (const Label& l : labels[v]) {
      if (better(l, *best)) best = &l;
    }
    p.type = best->type;
    p.bw = best->bw;
    p.hops = best->hops;
  }
}

int Graph::findByName(const std::string& name) const {
  for (int i = 0; i < size(); ++i)
    if (nodes_[i].name == name) return i;
  return -1;
}

int Graph::findByBusId(const std::string& busId) const {
  std::string norm;
  if (!normalizeBusId(busId, &norm)) return -1;
  for (int i = 0; i < size(); ++i)
    if (nodes_[i].busId == norm) return i;
  return -1;
}

int Graph::findCpuOfNuma(int numa) const {
  for (int c : cpus())
    if (nodes_[c].numa == numa) return c;
  return -1;
}

std::vector<int> Graph::nearestNics(int from) const {
  std::vector<int> out;
  const Path* best = nullptr;
  for (int nic : nics()) {
    if (nic == from) continue;
    const Path& p = path(from, nic);
    if (p.type == PathType::kDis) continue;
    if (best == nullptr || p.type < best->type || (p.type == best->type && p.bw > best->bw && !bwEqual(p.bw, best->bw))) {
      best = &p;
      out.clear();
      out.push_back(nic);
    } else if (p.type == best->type && bwEqual(p.bw, best->bw)) {
      out.push_back(nic);
    }
  }
  return out;
}

int Graph::cpuOf(int node) const {
  if (node < 0 || node >= size()) return -1;
  if (nodes_[node].type == NodeType::kCpu) return node;
  if (nodes_[node].numa >= 0) {
    int c = findCpuOfNuma(nodes_[node].numa);
    if (c >= 0) return c;
  }
  int best = -1;
  for (int c : cpus()) {
    if (best < 0 || better(Label{path(node, c).type, path(node, c).bw, path(node, c).hops},
                           Label{path(node, best).type, path(node, best).bw, path(node, best).hops}))
      best = c;
  }
  return best >= 0 && path(node, best).type != PathType::kDis ? best : -1;
}

bool Graph::operator==(const Graph& o) const { return nodes_ == o.nodes_ && links_ == o.links_; }

StatusOr<Graph> pcieView(const Graph& g) {
  Graph out;
  std::vector<int> map(g.size(), -1);
  for (int i = 0; i < g.size(); ++i)
    if (g.node(i).type != NodeType::kNvSwitch) map[i] = out.addNode(g.node(i));
  for (const Link& l : g.links()) {
    if (l.type == LinkType::kNvl || map[l.a] < 0 || map[l.b] < 0) continue;
    BRAID_RETURN_IF_ERROR(out.addLink(map[l.a], map[l.b], l.type, l.bw, l.count));
  }
  out.setHost(g.host());
  out.setSource(g.source());
  BRAID_RETURN_IF_ERROR(out.finalize());
  return out;
}

bool normalizeBusId(const std::string& in, std::string* out) {
  // Accepts "dddd:bb:dd.f" (domain up to 8 hex digits) and "bb:dd.f".
  unsigned long part[4] = {0, 0, 0, 0};
  size_t i = 0;
  std::vector<unsigned long> fields;
  std::vector<char> sepsSeen;
  while (i <= in.size()) {
    size_t j = i;
    while (j < in.size() && std::isxdigit(static_cast<unsigned char>(in[j]))) ++j;
    if (j == i || j - i > 8) return false;
    fields.push_back(std::strtoul(in.substr(i, j - i).c_str(), nullptr, 16));
    if (j == in.size()) break;
    sepsSeen.push_back(in[j]);
    i = j + 1;
  }
  if (fields.size() == 3 && sepsSeen == std::vector<char>{':', '.'}) {
    part[0] = 0;
    part[1] = fields[0];
    part[2] = fields[1];
    part[3] = fields[2];
  } else if (fields.size() == 4 && sepsSeen == std::vector<char>{':', ':', '.'}) {
    for (int k = 0; k < 4; ++k) part[k] = fields[k];
  } else {
    return false;
  }
  if (part[1] > 0xff || part[2] > 0x1f || part[3] > 0x7) return false;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lx:%02lx:%02lx.%lx", part[0], part[1], part[2], part[3]);
  *out = buf;
  return true;
}

bool cpuMaskToList(const std::string& mask, std::string* out) {
  std::vector<bool> bits;  // bit 0 first
  for (auto it = mask.rbegin(); it != mask.rend(); ++it) {
    char c = *it;
    if (c == ',') continue;
    if (c == 'x' || c == 'X') {
      // Tolerate a "0x" prefix on the most significant word.
      if (std::next(it) != mask.rend() && *std::next(it) == '0' && std::next(it, 2) == mask.rend()) break;
      return false;
    }
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
    for (int b = 0; b < 4; ++b) bits.push_back((v >> b) & 1);
  }
  std::string s;
  for (size_t i = 0; i < bits.size();) {
    if (!bits[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j + 1 < bits.size() && bits[j + 1]) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(i);
    if (j > i) s += "-" + std::to_string(j);
    i = j + 1;
  }
  *out = s;
  return true;
}

}  // namespace braid::topology

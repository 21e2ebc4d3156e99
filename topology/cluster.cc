#include "topology/cluster.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "topology/graph_json.h"
#include "topology/json.h"

namespace braid::topology {

namespace {

bool parseInt(const std::string& s, long lo, long hi, int* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

Status decodeError(const std::string& record) {
  // "E<code>\n<message>"
  size_t nl = record.find('\n');
  int code = static_cast<int>(Code::kRemoteError);
  std::string msg = nl == std::string::npos ? record.substr(1) : record.substr(nl + 1);
  if (nl != std::string::npos && !parseInt(record.substr(1, nl - 1), 1, static_cast<int>(Code::kInternal), &code))
    code = static_cast<int>(Code::kRemoteError);
  return Status(static_cast<Code>(code), msg);
}

}  // namespace

std::string compactGraphJson(const Graph& g) {
  return graphToJsonValue(g, /*withPaths=*/false).dump(0);
}

std::string hostRecordGraph(const Graph& g) { return "G" + compactGraphJson(g); }
std::string hostRecordNone() { return "N"; }
std::string hostRecordError(const Status& error) {
  return "E" + std::to_string(static_cast<int>(error.code())) + "\n" + error.message();
}

Status decodeHostRecord(const std::string& record, const std::string& source, Graph* graph, bool* known) {
  *known = false;
  if (record == "N") return Status::ok();
  if (!record.empty() && record[0] == 'E') return decodeError(record);
  if (record.empty() || record[0] != 'G')
    return Status(Code::kRemoteError, source + ": malformed host topology record");
  auto g = parseGraphJson(record.substr(1), source);
  if (!g.isOk()) return Status(Code::kRemoteError, g.status().message());
  *graph = std::move(g).value();
  *known = true;
  return Status::ok();
}

std::string encodeRankRecord(const RankRecord& r) {
  std::string s = std::to_string(r.gpu) + " " + std::to_string(r.numa);
  if (!r.visible.empty()) s += " " + r.visible;
  return s;
}

StatusOr<RankRecord> decodeRankRecord(const std::string& text, int rank) {
  const size_t sp = text.find(' ');
  const size_t sp2 = sp == std::string::npos ? sp : text.find(' ', sp + 1);
  RankRecord r;
  const std::string numa = sp2 == std::string::npos ? text.substr(sp + 1) : text.substr(sp + 1, sp2 - sp - 1);
  if (sp2 != std::string::npos) r.visible = text.substr(sp2 + 1);
  if (sp == std::string::npos || !parseInt(text.substr(0, sp), kGpuLocal, 1 << 20, &r.gpu) ||
      !parseInt(numa, -1, 1 << 20, &r.numa) || (sp2 != std::string::npos && r.visible.empty()) ||
      r.visible.find_first_of(" \t\n") != std::string::npos)
    return Status(Code::kRemoteError, "malformed placement record '" + text + "' from rank " + std::to_string(rank), rank);
  return r;
}

namespace {

// The GPU (index on `g`) visible device `ordinal` of CUDA_VISIBLE_DEVICES `visible` is, or
// kGpuNone; see resolveGpu.
int visibleGpu(const std::string& visible, int localRank, const Graph& g) {
  std::vector<int> devs;
  size_t at = 0;
  while (at <= visible.size()) {
    const size_t comma = std::min(visible.find(',', at), visible.size());
    int dev = -1;
    if (!parseInt(visible.substr(at, comma - at), 0, 1 << 20, &dev)) {
      // A UUID or MIG name: a device braid cannot place without the CUDA runtime. It still
      // counts (the list goes on); an entry that is not a device at all ends the list.
      const std::string e = visible.substr(at, comma - at);
      if (e.rfind("GPU-", 0) != 0 && e.rfind("MIG-", 0) != 0) break;
      dev = -1;
    }
    devs.push_back(dev);
    at = comma + 1;
  }
  if (devs.empty()) return kGpuNone;
  const int dev = devs[static_cast<size_t>(localRank) % devs.size()];
  if (dev < 0) return kGpuNone;
  const std::vector<int>& gpus = g.gpus();
  for (size_t i = 0; i < gpus.size(); ++i)
    if (g.node(gpus[i]).dev == dev) return static_cast<int>(i);
  // A graph that does not record CUDA indices (a topology file without them): its
  // canonical order is PCI bus order too.
  bool anyDev = false;
  for (int n : gpus) anyDev = anyDev || g.node(n).dev >= 0;
  return !anyDev && dev < static_cast<int>(gpus.size()) ? dev : kGpuNone;
}

}  // namespace

StatusOr<int> resolveGpu(const RankRecord& r, int localRank, const Graph& g, int rank) {
  const int ngpus = static_cast<int>(g.gpus().size());
  if (r.gpu == kGpuLocal && !r.visible.empty()) return visibleGpu(r.visible, localRank, g);
  if (r.gpu == kGpuLocal) return localRank < ngpus ? localRank : kGpuNone;
  if (r.gpu >= ngpus) {
    return Status(Code::kInvalidArgument,
                  "rank " + std::to_string(rank) + " asks for GPU " + std::to_string(r.gpu) + " (BRAID_GPU), but its host's topology (" +
                      g.source() + ") has " + std::to_string(ngpus) + " GPU" + (ngpus == 1 ? "" : "s"),
                  rank);
  }
  return r.gpu < 0 ? kGpuNone : r.gpu;
}

std::vector<int> hostIndices(const std::vector<std::string>& hostIds, std::vector<int>* localRanks) {
  std::map<std::string, int> index, count;
  std::vector<int> out;
  if (localRanks) localRanks->clear();
  for (const std::string& h : hostIds) {
    auto it = index.find(h);
    if (it == index.end()) it = index.emplace(h, static_cast<int>(index.size())).first;
    out.push_back(it->second);
    if (localRanks) localRanks->push_back(count[h]++);
  }
  return out;
}

std::vector<const Graph*> Cluster::hostPointers() const {
  std::vector<const Graph*> p;
  for (const Graph& g : hosts) p.push_back(&g);
  return p;
}

StatusOr<bool> fuseCluster(const std::vector<int>& hostOf, const std::vector<std::string>& hostRecords,
                           const std::vector<RankRecord>& rankRecords, Cluster* out) {
  if (hostOf.size() != rankRecords.size())
    return internalError("fuseCluster: " + std::to_string(hostOf.size()) + " host indices for " +
                         std::to_string(rankRecords.size()) + " ranks");
  Cluster c;
  c.hosts.resize(hostRecords.size());
  // Errors first, in host order, so that every host's error is reported the same way
  // whichever host also lacks a topology.
  bool all = true;
  for (size_t h = 0; h < hostRecords.size(); ++h) {
    bool known = false;
    BRAID_RETURN_IF_ERROR(decodeHostRecord(hostRecords[h], "topology of host " + std::to_string(h), &c.hosts[h], &known));
    all = all && known;
  }
  if (!all) return false;
  std::vector<int> seen(hostRecords.size(), 0);
  c.ranks.resize(rankRecords.size());
  for (size_t r = 0; r < rankRecords.size(); ++r) {
    int h = hostOf[r];
    if (h < 0 || h >= static_cast<int>(hostRecords.size()))
      return internalError("fuseCluster: rank " + std::to_string(r) + " on unknown host " + std::to_string(h));
    RankPlace& p = c.ranks[r];
    p.host = h;
    p.numa = rankRecords[r].numa;
    BRAID_ASSIGN_OR_RETURN(p.gpu, resolveGpu(rankRecords[r], seen[h]++, c.hosts[h], static_cast<int>(r)));
  }
  *out = std::move(c);
  return true;
}

std::string encodeRing(const std::vector<int>& ring) {
  if (ring.empty()) return "N";
  std::string s = "R";
  for (int r : ring) s += " " + std::to_string(r);
  return s;
}

Status decodeRing(const std::string& text, int nranks, std::vector<int>* ring) {
  ring->clear();
  if (text == "N") return Status::ok();
  if (!text.empty() && text[0] == 'E') return decodeError(text);
  std::vector<int> out;
  std::vector<bool> seen(static_cast<size_t>(nranks), false);
  bool ok = !text.empty() && text[0] == 'R';
  if (ok) {
    std::istringstream in(text.substr(1));
    std::string tok;
    while (ok && in >> tok) {
      int r = -1;
      ok = parseInt(tok, 0, nranks - 1, &r) && !seen[r];
      if (ok) {
        seen[r] = true;
        out.push_back(r);
      }
    }
    ok = ok && static_cast<int>(out.size()) == nranks;
  }
  if (!ok) return Status(Code::kRemoteError, "malformed ring record '" + text.substr(0, 64) + "'");
  *ring = std::move(out);
  return Status::ok();
}

std::string formatRing(const std::vector<int>& ring, const std::vector<int>& hostOf) {
  std::string s;
  for (size_t k = 0; k < ring.size(); ++k) {
    if (k > 0) {
      bool cross = static_cast<size_t>(ring[k]) < hostOf.size() && static_cast<size_t>(ring[k - 1]) < hostOf.size() &&
                   hostOf[ring[k]] != hostOf[ring[k - 1]];
      s += cross ? " | " : " ";
    }
    s += std::to_string(ring[k]);
  }
  return s;
}


double nicBandwidth(const Graph& g, const RankPlace& place, const NicPolicy& policy) {
  const int nic = nicForChannel(g, place, 0, policy);
  const int from = rankNode(g, place);
  if (nic < 0 || from < 0) return 0;
  double bw = g.path(from, nic).bw;
  const int64_t mbps = g.node(nic).speedMbps;
  if (mbps > 0) bw = std::min(bw, static_cast<double>(mbps) / 8000.0);
  return bw;
}

int topologyChannels(const Graph& g, const RankPlace& place, const NicPolicy& policy, bool multiHost) {
  int want = 0;
  const int from = rankNode(g, place);
  if (from < 0) return 0;
  if (multiHost) want = static_cast<int>(nearestAllowedNics(g, from, policy).size());
  if (place.gpu >= 0) {
    int nvlinks = 0;
    for (const Link& l : g.links())
      if (l.type == LinkType::kNvl && (l.a == from || l.b == from)) nvlinks += l.count;
    want = std::max(want, nvlinks);
  }
  return want;
}

int proposeChannels(int coresPerRank, int topoChannels) {
  const int cores = std::max(1, coresPerRank);
  const int base = std::min(cores, 4);
  const int cap = std::min(2 * cores, 16);
  return std::max(base, std::min(topoChannels, cap));
}

StatusOr<ClusterPlan> planCluster(const Cluster& c, const NicPolicy& policy) {
  ClusterPlan p;
  const std::vector<const Graph*> hosts = c.hostPointers();
  BRAID_ASSIGN_OR_RETURN(p.ring, ringOrder(hosts, c.ranks));
  BRAID_ASSIGN_OR_RETURN(auto trees, doubleBinaryTree(hosts, c.ranks));
  for (int t = 0; t < 2; ++t) p.treeParent[t] = trees[t].parent;
  // The slowest way out of any rank: what a collective across hosts runs at.
  double net = -1;
  for (const RankPlace& r : c.ranks) {
    double bw = nicBandwidth(*hosts[r.host], r, policy);
    net = net < 0 ? bw : std::min(net, bw);
  }
  p.netGBps = std::max(0.0, net);
  // GPU to GPU inside a host: the slowest hop the ring takes there.
  bool allGpus = !c.ranks.empty();
  for (const RankPlace& r : c.ranks) allGpus = allGpus && r.gpu >= 0;
  double intra = -1;
  for (size_t k = 0; allGpus && k < p.ring.size(); ++k) {
    const RankPlace& a = c.ranks[p.ring[k]];
    const RankPlace& b = c.ranks[p.ring[(k + 1) % p.ring.size()]];
    if (a.host != b.host || a.gpu == b.gpu) continue;
    const Graph& g = *hosts[a.host];
    double bw = g.path(rankNode(g, a), rankNode(g, b)).bw;
    intra = intra < 0 ? bw : std::min(intra, bw);
  }
  p.intraGBps = std::max(0.0, intra);
  return p;
}

namespace {

std::string formatGBps(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool parseGBps(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno || *end || !std::isfinite(v) || v < 0 || v > 1e7) return false;
  *out = v;
  return true;
}

// Parents "p0 p1 ..." of a spanning tree over nranks ranks.
bool parseTree(const std::string& text, int nranks, std::vector<int>* parent) {
  std::istringstream in(text);
  std::string tok;
  std::vector<int> p;
  while (in >> tok) {
    int v = 0;
    if (!parseInt(tok, -1, nranks - 1, &v)) return false;
    p.push_back(v);
  }
  if (static_cast<int>(p.size()) != nranks) return false;
  int roots = 0;
  for (int r = 0; r < nranks; ++r) {
    if (p[r] == r) return false;
    roots += p[r] < 0;
  }
  if (roots != 1) return false;
  // Every rank reaches the root within nranks steps: no cycle.
  for (int r = 0; r < nranks; ++r) {
    int x = r, hops = 0;
    while (p[x] >= 0 && hops <= nranks) {
      x = p[x];
      ++hops;
    }
    if (p[x] >= 0) return false;
  }
  *parent = std::move(p);
  return true;
}

}  // namespace

std::string encodeClusterPlan(const ClusterPlan& p) {
  std::string s = encodeRing(p.ring);
  if (p.ring.empty()) return s;
  for (int t = 0; t < 2; ++t) {
    if (p.treeParent[t].size() != p.ring.size()) continue;
    s += "\nT";
    for (int x : p.treeParent[t]) s += " " + std::to_string(x);
  }
  s += "\nB " + formatGBps(p.netGBps) + " " + formatGBps(p.intraGBps);
  return s;
}

Status decodeClusterPlan(const std::string& text, int nranks, ClusterPlan* out) {
  *out = ClusterPlan{};
  if (!text.empty() && text[0] == 'E') return decodeError(text);
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  ClusterPlan p;
  BRAID_RETURN_IF_ERROR(decodeRing(line, nranks, &p.ring));
  int trees = 0;
  bool ok = true;
  while (ok && std::getline(in, line)) {
    if (p.ring.empty()) {
      ok = false;
    } else if (line.size() >= 1 && line[0] == 'T' && trees < 2) {
      ok = parseTree(line.substr(1), nranks, &p.treeParent[trees++]);
    } else if (line.size() >= 2 && line[0] == 'B' && line[1] == ' ') {
      std::istringstream b(line.substr(2));
      std::string net, intra, extra;
      ok = (b >> net >> intra) && !(b >> extra) && parseGBps(net, &p.netGBps) && parseGBps(intra, &p.intraGBps);
    } else {
      ok = false;
    }
  }
  ok = ok && (trees == 0 || trees == 2);
  if (!ok) return Status(Code::kRemoteError, "malformed topology plan record '" + line.substr(0, 64) + "'");
  *out = std::move(p);
  return Status::ok();
}

}  // namespace braid::topology

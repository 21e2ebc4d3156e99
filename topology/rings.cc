#include "topology/rings.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace braid::topology {

namespace {

constexpr int kExactRingMax = 16;  // Held-Karp up to here: 16 * 2^16 states, a few ms

bool bwClose(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::max(1.0, std::max(a, b)); }

// Cost of putting GPUs at sorted positions i and j next to each other in a ring. The
// path type dominates: 64^type makes one hop of a worse type cost more than a whole ring
// (at most 16 hops handled exactly) of better ones, so the ring minimises the number of
// hops of its worst type first. Within a type, narrower paths cost up to 50 % more.
// A hop between GPUs adjacent in index order costs a hair less, so that among equally
// good rings the natural order 0, 1, 2, ... wins (it is also what users expect to see).
class RingCost {
 public:
  RingCost(const Graph& g, const std::vector<int>& nodes) : n_(static_cast<int>(nodes.size())), w_(n_ * n_, 0) {
    std::map<int, double> maxBw;
    for (int i = 0; i < n_; ++i)
      for (int j = 0; j < n_; ++j)
        if (i != j) {
          const Path& p = g.path(nodes[i], nodes[j]);
          double& m = maxBw[static_cast<int>(p.type)];
          m = std::max(m, p.bw);
        }
    for (int i = 0; i < n_; ++i) {
      for (int j = 0; j < n_; ++j) {
        if (i == j) continue;
        // Paths may differ by direction only in bandwidth; use the worse direction.
        const Path& p = g.path(nodes[i], nodes[j]);
        const Path& q = g.path(nodes[j], nodes[i]);
        int t = std::max(static_cast<int>(p.type), static_cast<int>(q.type));
        double bw = std::min(p.bw, q.bw);
        double m = maxBw[t] > 0 ? maxBw[t] : 1;
        double c = std::pow(64.0, t) * (1.5 - 0.5 * std::min(1.0, bw / m));
        if (std::abs(i - j) != 1) c *= 1.0 + 1e-9;
        w_[i * n_ + j] = c;
      }
    }
  }
  double operator()(int i, int j) const { return w_[i * n_ + j]; }

 private:
  int n_;
  std::vector<double> w_;
};

// Exact minimum-cost cycle through positions 0..n-1 starting at 0 (Held-Karp).
std::vector<int> exactCycle(int n, const RingCost& w) {
  const size_t full = (size_t{1} << n) - 1;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dp((full + 1) * n, inf);
  std::vector<int8_t> prev((full + 1) * n, -1);
  dp[1 * n + 0] = 0;
  for (size_t mask = 1; mask <= full; mask += 2) {  // masks containing position 0
    for (int j = 0; j < n; ++j) {
      double cur = dp[mask * n + j];
      if (!(mask >> j & 1) || cur == inf) continue;
      for (int k = 1; k < n; ++k) {
        if (mask >> k & 1) continue;
        size_t nm = mask | (size_t{1} << k);
        double c = cur + w(j, k);
        if (c < dp[nm * n + k]) {
          dp[nm * n + k] = c;
          prev[nm * n + k] = static_cast<int8_t>(j);
        }
      }
    }
  }
  int last = 1;
  double best = inf;
  for (int j = 1; j < n; ++j) {
    double c = dp[full * n + j] + w(j, 0);
    if (c < best) {
      best = c;
      last = j;
    }
  }
  std::vector<int> cyc;
  size_t mask = full;
  for (int j = last; j != -1;) {
    cyc.push_back(j);
    int p = prev[mask * n + j];
    mask &= ~(size_t{1} << j);
    j = p;
  }
  std::reverse(cyc.begin(), cyc.end());
  return cyc;
}

// Nearest neighbour from position 0, improved by 2-opt until no move helps: good rings
// for hosts with more GPUs than the exact search handles.
std::vector<int> heuristicCycle(int n, const RingCost& w) {
  std::vector<int> cyc{0};
  std::vector<bool> used(n, false);
  used[0] = true;
  for (int s = 1; s < n; ++s) {
    int cur = cyc.back(), best = -1;
    for (int k = 0; k < n; ++k)
      if (!used[k] && (best < 0 || w(cur, k) < w(cur, best))) best = k;
    used[best] = true;
    cyc.push_back(best);
  }
  for (int iter = 0; iter < 100 * n; ++iter) {
    bool improved = false;
    for (int i = 0; i + 1 < n && !improved; ++i) {
      for (int j = i + 2; j < n && !improved; ++j) {
        int a = cyc[i], b = cyc[i + 1], c = cyc[j], d = cyc[(j + 1) % n];
        if (a == d) continue;
        if (w(a, c) + w(b, d) < w(a, b) + w(c, d) - 1e-12 * (w(a, b) + w(c, d))) {
          std::reverse(cyc.begin() + i + 1, cyc.begin() + j + 1);
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  // Start at position 0 again.
  std::rotate(cyc.begin(), std::find(cyc.begin(), cyc.end(), 0), cyc.end());
  return cyc;
}

Status checkPlaces(const std::vector<const Graph*>& hosts, const std::vector<RankPlace>& ranks) {
  if (ranks.empty()) return invalidArgument("no ranks");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankPlace& p = ranks[r];
    if (p.host < 0 || p.host >= static_cast<int>(hosts.size()) || hosts[p.host] == nullptr)
      return invalidArgument("rank " + std::to_string(r) + " is on host " + std::to_string(p.host) + ", which has no graph");
    const Graph& g = *hosts[p.host];
    if (!g.finalized()) return invalidArgument("graph of host " + std::to_string(p.host) + " is not finalized");
    if (p.gpu < -1 || p.gpu >= static_cast<int>(g.gpus().size()))
      return invalidArgument("rank " + std::to_string(r) + " uses GPU " + std::to_string(p.gpu) + ", but host " +
                             std::to_string(p.host) + " has " + std::to_string(g.gpus().size()) + " GPUs");
  }
  return Status::ok();
}

}  // namespace

std::vector<int> orderGpusForRing(const Graph& g, const std::vector<int>& gpus, bool cutAtWeakest) {
  std::vector<int> sorted = gpus;
  std::sort(sorted.begin(), sorted.end());
  const int n = static_cast<int>(sorted.size());
  if (n <= 2) return sorted;
  std::vector<int> nodes;
  for (int x : sorted) nodes.push_back(g.gpus()[x]);
  RingCost w(g, nodes);
  std::vector<int> cyc = n <= kExactRingMax ? exactCycle(n, w) : heuristicCycle(n, w);
  // Of the two directions, take the one that goes to the lower index first.
  if (cyc[1] > cyc[n - 1]) std::reverse(cyc.begin() + 1, cyc.end());
  if (cutAtWeakest) {
    // Cut after the weakest hop; strict comparison lets the closing hop win ties.
    int cut = n - 1;
    double worst = w(cyc[n - 1], cyc[0]);
    for (int k = 0; k + 1 < n; ++k) {
      if (w(cyc[k], cyc[k + 1]) > worst) {
        worst = w(cyc[k], cyc[k + 1]);
        cut = k;
      }
    }
    std::rotate(cyc.begin(), cyc.begin() + (cut + 1) % n, cyc.end());
  }
  std::vector<int> out;
  for (int p : cyc) out.push_back(sorted[p]);
  return out;
}

StatusOr<std::vector<int>> ringOrder(const std::vector<const Graph*>& hosts, const std::vector<RankPlace>& ranks) {
  BRAID_RETURN_IF_ERROR(checkPlaces(hosts, ranks));
  std::vector<int> hostOrder;
  std::map<int, std::vector<int>> byHost;
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto& v = byHost[ranks[r].host];
    if (v.empty()) hostOrder.push_back(ranks[r].host);
    v.push_back(static_cast<int>(r));
  }
  const bool multiHost = hostOrder.size() > 1;
  std::vector<int> ring;
  ring.reserve(ranks.size());
  for (int h : hostOrder) {
    const Graph& g = *hosts[h];
    std::map<int, std::vector<int>> byGpu;
    std::vector<int> cpuRanks;
    for (int r : byHost[h]) {
      if (ranks[r].gpu >= 0) byGpu[ranks[r].gpu].push_back(r);
      else cpuRanks.push_back(r);
    }
    std::vector<int> gpus;
    for (const auto& kv : byGpu) gpus.push_back(kv.first);
    for (int gpu : orderGpusForRing(g, gpus, multiHost))
      for (int r : byGpu[gpu]) ring.push_back(r);
    // CPU ranks: those sharing a NUMA node next to each other, nodes in index order.
    std::stable_sort(cpuRanks.begin(), cpuRanks.end(), [&](int a, int b) {
      int na = ranks[a].numa < 0 ? std::numeric_limits<int>::max() : ranks[a].numa;
      int nb = ranks[b].numa < 0 ? std::numeric_limits<int>::max() : ranks[b].numa;
      return na < nb;
    });
    ring.insert(ring.end(), cpuRanks.begin(), cpuRanks.end());
  }
  return ring;
}

StatusOr<std::vector<int>> ringForChannel(const std::vector<const Graph*>& hosts, const std::vector<RankPlace>& ranks,
                                          int channel) {
  BRAID_ASSIGN_OR_RETURN(std::vector<int> ring, ringOrder(hosts, ranks));
  if (channel % 2 == 1) std::reverse(ring.begin(), ring.end());
  return ring;
}

void btreeNeighbours(int n, int pos, int* parent, int* child0, int* child1) {
  *parent = *child0 = *child1 = -1;
  if (n <= 1 || pos < 0 || pos >= n) return;
  int bit = 1;
  while (bit < n && !(bit & pos)) bit <<= 1;
  if (pos == 0) {
    *child1 = bit >> 1;  // the highest power of two below n
    return;
  }
  int up = (pos ^ bit) | (bit << 1);
  if (up >= n) up = pos ^ bit;
  *parent = up;
  int low = bit >> 1;
  if (low == 0) return;
  *child0 = pos - low;
  int c1 = pos + low;
  while (low > 0 && c1 >= n) {
    low >>= 1;
    c1 = pos + low;
  }
  *child1 = low > 0 ? c1 : -1;
}

StatusOr<std::array<Tree, 2>> doubleBinaryTree(const std::vector<const Graph*>& hosts,
                                               const std::vector<RankPlace>& ranks) {
  BRAID_ASSIGN_OR_RETURN(std::vector<int> ring, ringOrder(hosts, ranks));
  // Host segments of the ring, in ring order.
  std::vector<std::vector<int>> seg;
  for (size_t k = 0; k < ring.size(); ++k) {
    if (k == 0 || ranks[ring[k]].host != ranks[ring[k - 1]].host) seg.emplace_back();
    seg.back().push_back(ring[k]);
  }
  const int H = static_cast<int>(seg.size());
  const size_t R = ranks.size();
  std::array<Tree, 2> trees;
  for (int t = 0; t < 2; ++t) {
    Tree& tr = trees[t];
    tr.parent.assign(R, -1);
    tr.children.assign(R, {});
    std::vector<std::vector<int>> chain = seg;
    if (t == 1)
      for (auto& c : chain) std::reverse(c.begin(), c.end());
    // Parent host of each host position in this tree.
    std::vector<int> hostParent(H, -1);
    for (int p = 0; p < H; ++p) {
      int par, c0, c1;
      if (t == 0) {
        btreeNeighbours(H, p, &par, &c0, &c1);
        hostParent[p] = par;
      } else if (H % 2 == 0) {
        btreeNeighbours(H, H - 1 - p, &par, &c0, &c1);
        hostParent[p] = par < 0 ? -1 : H - 1 - par;
      } else {
        btreeNeighbours(H, (p - 1 + H) % H, &par, &c0, &c1);
        hostParent[p] = par < 0 ? -1 : (par + 1) % H;
      }
    }
    for (int p = 0; p < H; ++p) {
      const auto& c = chain[p];
      int entry = c.front();
      if (hostParent[p] < 0) {
        tr.root = entry;
      } else {
        int pe = chain[hostParent[p]].front();
        tr.parent[entry] = pe;
        tr.children[pe].push_back(entry);
      }
    }
    // Chains inside hosts go after the inter-host children: the network hop is the slow
    // one, so it starts first.
    for (int p = 0; p < H; ++p) {
      const auto& c = chain[p];
      for (size_t k = 1; k < c.size(); ++k) {
        tr.parent[c[k]] = c[k - 1];
        tr.children[c[k - 1]].push_back(c[k]);
      }
    }
  }
  return trees;
}

bool NicPolicy::allows(const Node& nic) const {
  if (!nic.hca.empty()) return ibHca.allows(nic.hca, nic.port);
  return netIf.allows(nic.netName());
}

std::vector<int> nearestAllowedNics(const Graph& g, int from, const NicPolicy& policy) {
  std::vector<int> out;
  if (from < 0 || from >= g.size()) return out;
  const Path* best = nullptr;
  for (int nic : g.nics()) {
    if (nic == from || !policy.allows(g.node(nic))) continue;
    const Path& p = g.path(from, nic);
    if (p.type == PathType::kDis) continue;
    bool sameBw = best != nullptr && bwClose(p.bw, best->bw);
    if (best == nullptr || p.type < best->type || (p.type == best->type && p.bw > best->bw && !sameBw)) {
      best = &p;
      out.assign(1, nic);
    } else if (p.type == best->type && sameBw) {
      out.push_back(nic);
    }
  }
  return out;
}

int rankNode(const Graph& g, const RankPlace& place) {
  if (place.gpu >= 0) return place.gpu < static_cast<int>(g.gpus().size()) ? g.gpus()[place.gpu] : -1;
  int cpu = place.numa >= 0 ? g.findCpuOfNuma(place.numa) : -1;
  if (cpu < 0 && !g.cpus().empty()) cpu = g.cpus()[0];
  return cpu;
}

int nicForChannel(const Graph& g, const RankPlace& place, int channel, const NicPolicy& policy) {
  std::vector<int> near = nearestAllowedNics(g, rankNode(g, place), policy);
  if (near.empty()) return -1;
  int k = static_cast<int>(near.size());
  return near[((channel % k) + k) % k];
}

}  // namespace braid::topology

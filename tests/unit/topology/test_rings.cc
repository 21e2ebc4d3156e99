// Rings, trees and NIC choice per channel, on fixture machines, for 8 and 16 ranks.

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "support/catch.h"
#include "topo_test_util.h"
#include "topology/rings.h"

using namespace braid::topology;
using namespace braid::topology::testing;

namespace {

// One rank per GPU on each of `hosts` copies of `g`, ranks host-major.
std::vector<RankPlace> onePerGpu(const Graph& g, int hosts) {
  std::vector<RankPlace> r;
  for (int h = 0; h < hosts; ++h)
    for (int k = 0; k < static_cast<int>(g.gpus().size()); ++k) r.push_back(RankPlace{h, k, -1});
  return r;
}

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// A tree spans all ranks exactly once, parents and children agree, no cycles, and the
// ranks of one host form a chain entered once.
void checkTree(const Tree& t, const std::vector<RankPlace>& ranks) {
  const int n = static_cast<int>(ranks.size());
  REQUIRE(t.parent.size() == ranks.size());
  REQUIRE(t.children.size() == ranks.size());
  REQUIRE(t.root >= 0);
  CHECK(t.parent[t.root] == -1);
  int roots = 0;
  for (int r = 0; r < n; ++r) {
    if (t.parent[r] < 0) ++roots;
    else CHECK(std::count(t.children[t.parent[r]].begin(), t.children[t.parent[r]].end(), r) == 1);
    for (int c : t.children[r]) CHECK(t.parent[c] == r);
    CHECK(t.children[r].size() <= 3);  // two tree children and one local chain child at most
    // Walking up ends at the root within n steps.
    int x = r, steps = 0;
    while (x != t.root && steps <= n) {
      x = t.parent[x];
      ++steps;
    }
    CHECK(x == t.root);
  }
  CHECK(roots == 1);
  // Per host: exactly one rank whose parent is on another host (or is the root).
  std::map<int, int> entries;
  for (int r = 0; r < n; ++r)
    if (t.parent[r] < 0 || ranks[t.parent[r]].host != ranks[r].host) ++entries[ranks[r].host];
  for (const auto& kv : entries) CHECK(kv.second == 1);
}

}  // namespace

TEST_CASE("8 ranks on a DGX-H100-like host: ring in GPU order, chains as trees", "[topology][rings]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  std::vector<const Graph*> hosts{&g};
  auto ranks = onePerGpu(g, 1);
  auto ring = ringOrder(hosts, ranks);
  REQUIRE(ring.isOk());
  CHECK(ring.value() == iota(8));
  auto rev = ringForChannel(hosts, ranks, 1);
  REQUIRE(rev.isOk());
  CHECK(rev.value() == std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  auto trees = doubleBinaryTree(hosts, ranks);
  REQUIRE(trees.isOk());
  for (const Tree& t : trees.value()) checkTree(t, ranks);
  CHECK(trees.value()[0].root == 0);
  CHECK(trees.value()[1].root == 7);
}

TEST_CASE("16 ranks on 2 DGX-H100-like hosts", "[topology][rings]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  std::vector<const Graph*> hosts{&g, &g};

  SECTION("host-major ranks") {
    auto ranks = onePerGpu(g, 2);
    auto ring = ringOrder(hosts, ranks);
    REQUIRE(ring.isOk());
    CHECK(ring.value() == iota(16));
    auto trees = doubleBinaryTree(hosts, ranks);
    REQUIRE(trees.isOk());
    for (const Tree& t : trees.value()) checkTree(t, ranks);
    const Tree& t0 = trees.value()[0];
    const Tree& t1 = trees.value()[1];
    CHECK(t0.root == 0);
    CHECK(t0.parent[8] == 0);   // host 1 enters at its first rank in tree 0
    CHECK(t1.root == 15);
    CHECK(t1.parent[7] == 15);  // host 0 enters at its last rank in tree 1
  }

  SECTION("ranks interleaved across hosts are regrouped per host") {
    std::vector<RankPlace> ranks;
    for (int r = 0; r < 16; ++r) ranks.push_back(RankPlace{r % 2, r / 2, -1});
    auto ring = ringOrder(hosts, ranks);
    REQUIRE(ring.isOk());
    CHECK(ring.value() == std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15});
    auto trees = doubleBinaryTree(hosts, ranks);
    REQUIRE(trees.isOk());
    for (const Tree& t : trees.value()) checkTree(t, ranks);
  }

  SECTION("each rank's channel uses the NIC under its GPU's switch") {
    auto ranks = onePerGpu(g, 2);
    for (const RankPlace& p : ranks)
      for (int c = 0; c < 4; ++c) CHECK(nicForChannel(g, p, c, {}) == nic(g, p.gpu));
  }
}

TEST_CASE("ring on a PCIe box keeps switch mates adjacent", "[topology][rings]") {
  Graph g = load("nccl-4gpu-pcie-2nic.xml");
  std::vector<const Graph*> hosts{&g};
  // Ranks bound to GPUs in a scrambled order: rank 0 -> GPU2, 1 -> GPU0, 2 -> GPU3, 3 -> GPU1.
  std::vector<RankPlace> ranks{{0, 2, -1}, {0, 0, -1}, {0, 3, -1}, {0, 1, -1}};
  auto ring = ringOrder(hosts, ranks);
  REQUIRE(ring.isOk());
  CHECK(ring.value() == std::vector<int>{1, 3, 0, 2});  // GPUs 0, 1, 2, 3
  int pix = 0;
  for (size_t k = 0; k < 4; ++k) {
    int a = ranks[ring.value()[k]].gpu, b = ranks[ring.value()[(k + 1) % 4]].gpu;
    PathType t = g.pathType(gpu(g, a), gpu(g, b));
    CHECK(t <= PathType::kPxb);
    if (t == PathType::kPix) ++pix;
  }
  CHECK(pix == 2);
}

TEST_CASE("ring on p4d crosses sockets only twice, and 2 hosts cut at a socket hop", "[topology][rings]") {
  Graph g = load("nccl-aws-p4d-24xl.xml");
  // Ask for GPUs in an order that would cross sockets at every hop.
  std::vector<int> gpus{0, 4, 1, 5, 2, 6, 3, 7};
  std::vector<int> order = orderGpusForRing(g, gpus, false);
  REQUIRE(order.size() == 8);
  int sys = 0;
  for (size_t k = 0; k < 8; ++k)
    if (g.pathType(gpu(g, order[k]), gpu(g, order[(k + 1) % 8])) == PathType::kSys) ++sys;
  CHECK(sys == 2);
  CHECK(order == iota(8));
  std::vector<int> cut = orderGpusForRing(g, gpus, true);
  CHECK(g.pathType(gpu(g, cut.back()), gpu(g, cut.front())) == PathType::kSys);
}

TEST_CASE("ring ordering handles DGX-2 size and larger hosts", "[topology][rings]") {
  Graph g = load("hwloc-nvidia-dgx2.xml");
  std::vector<int> all = iota(16);
  CHECK(orderGpusForRing(g, all, false) == all);
  // PCIe only: switch mates adjacent, one SYS hop each way.
  auto pv = pcieView(g);
  REQUIRE(pv.isOk());
  std::vector<int> order = orderGpusForRing(pv.value(), all, false);
  std::map<PathType, int> hops;
  for (size_t k = 0; k < 16; ++k) ++hops[pv.value().pathType(gpu(pv.value(), order[k]), gpu(pv.value(), order[(k + 1) % 16]))];
  CHECK(hops[PathType::kSys] == 2);
  CHECK(hops[PathType::kPix] == 8);
}

TEST_CASE("tree shapes for many hosts", "[topology][rings]") {
  Graph g = load("nccl-2socket-cpu-100g.xml");
  for (int H = 1; H <= 17; ++H) {
    std::vector<const Graph*> hosts(H, &g);
    std::vector<RankPlace> ranks;
    for (int h = 0; h < H; ++h) {
      ranks.push_back(RankPlace{h, -1, 1});
      ranks.push_back(RankPlace{h, -1, 0});
    }
    auto ring = ringOrder(hosts, ranks);
    REQUIRE(ring.isOk());
    // CPU ranks of a host ordered by NUMA node: the NUMA0 rank first.
    CHECK(ranks[ring.value()[0]].numa == 0);
    auto trees = doubleBinaryTree(hosts, ranks);
    REQUIRE(trees.isOk());
    for (const Tree& t : trees.value()) checkTree(t, ranks);
    // A host is an inner node (has children on other hosts) in at most one tree, except
    // one host when the count is odd (NCCL's shifted tree shares one).
    int both = 0;
    for (int h = 0; h < H; ++h) {
      bool inner[2] = {false, false};
      for (int t = 0; t < 2; ++t)
        for (size_t r = 0; r < ranks.size(); ++r)
          if (ranks[r].host == h)
            for (int c : trees.value()[t].children[r])
              if (ranks[c].host != h) inner[t] = true;
      if (inner[0] && inner[1]) ++both;
    }
    CHECK(both <= (H % 2 == 1 ? 1 : 0));
  }
}

TEST_CASE("btree neighbours match NCCL's layout", "[topology][rings]") {
  int p, c0, c1;
  btreeNeighbours(8, 0, &p, &c0, &c1);
  CHECK((p == -1 && c0 == -1 && c1 == 4));
  btreeNeighbours(8, 4, &p, &c0, &c1);
  CHECK((p == 0 && c0 == 2 && c1 == 6));
  btreeNeighbours(8, 6, &p, &c0, &c1);
  CHECK((p == 4 && c0 == 5 && c1 == 7));
  btreeNeighbours(8, 7, &p, &c0, &c1);
  CHECK((p == 6 && c0 == -1 && c1 == -1));
  btreeNeighbours(5, 4, &p, &c0, &c1);
  CHECK((p == 0 && c0 == 2 && c1 == -1));
  for (int n = 1; n <= 40; ++n)
    for (int r = 0; r < n; ++r) {
      btreeNeighbours(n, r, &p, &c0, &c1);
      if (r == 0) CHECK(p == -1);
      else CHECK((p >= 0 && p < n));
      for (int c : {c0, c1}) {
        if (c < 0) continue;
        REQUIRE(c < n);
        int pp, a, b;
        btreeNeighbours(n, c, &pp, &a, &b);
        CHECK(pp == r);
      }
    }
}

TEST_CASE("bad rank placements are rejected", "[topology][rings]") {
  Graph g = load("nccl-4gpu-pcie-2nic.xml");
  std::vector<const Graph*> hosts{&g};
  CHECK(ringOrder(hosts, {}).status().code() == braid::Code::kInvalidArgument);
  CHECK_THAT(ringOrder(hosts, {{0, 4, -1}}).status().message(), Catch::Contains("uses GPU 4, but host 0 has 4 GPUs"));
  CHECK_THAT(ringOrder(hosts, {{1, 0, -1}}).status().message(), Catch::Contains("on host 1"));
}

TEST_CASE("NIC filters: include, exclude, exact, port", "[topology][nic]") {
  auto parse = [](const std::string& s) {
    auto f = NicFilter::parse(s);
    REQUIRE(f.isOk());
    return f.value();
  };
  CHECK(parse("").allows("anything"));
  CHECK(parse("^").allows("anything"));
  CHECK(parse("eth").allows("eth0"));
  CHECK_FALSE(parse("eth").allows("ib0"));
  CHECK(parse("eth,ib").allows("ib1"));
  CHECK_FALSE(parse("^docker,lo").allows("docker0"));
  CHECK(parse("^docker,lo").allows("eth0"));
  CHECK(parse("=eth0").allows("eth0"));
  CHECK_FALSE(parse("=eth0").allows("eth01"));
  CHECK_FALSE(parse("^=eth0").allows("eth0"));
  CHECK(parse("^=eth0").allows("eth01"));
  CHECK(parse("mlx5_0:1").allows("mlx5_0", 1));
  CHECK_FALSE(parse("mlx5_0:1").allows("mlx5_0", 2));
  CHECK(parse("mlx5_0:1").allows("mlx5_0"));  // port unknown: name decides
  CHECK_FALSE(parse("=mlx5_1").allows("mlx5_10"));
  CHECK(parse("mlx5_1").allows("mlx5_10"));   // prefix, as NCCL
  CHECK_THAT(NicFilter::parse("eth0,,eth1").status().message(), Catch::Contains("empty entry"));
  CHECK_THAT(NicFilter::parse("mlx5_0:x").status().message(), Catch::Contains("is not a number"));
  CHECK_THAT(NicFilter::parse(":1").status().message(), Catch::Contains("no name"));
}

TEST_CASE("NIC per channel honours BRAID_IB_HCA / BRAID_NET_IF lists", "[topology][nic]") {
  auto policy = [](const std::string& netIf, const std::string& ibHca) {
    NicPolicy p;
    auto a = NicFilter::parse(netIf);
    auto b = NicFilter::parse(ibHca);
    REQUIRE((a.isOk() && b.isOk()));
    p.netIf = a.value();
    p.ibHca = b.value();
    return p;
  };

  SECTION("DGX-H100-like: excluding a GPU's own NIC falls back to the next nearest") {
    Graph g = load("nccl-dgx-h100-like.xml");
    RankPlace gpu0{0, 0, -1};
    CHECK(nicForChannel(g, gpu0, 0, policy("", "")) == nic(g, 0));
    NicPolicy noMlx0 = policy("", "^=mlx5_0");
    // Next nearest for GPU0 are NIC1-3 (PHB, same socket); channels rotate over them.
    CHECK(nicForChannel(g, gpu0, 0, noMlx0) == nic(g, 1));
    CHECK(nicForChannel(g, gpu0, 1, noMlx0) == nic(g, 2));
    CHECK(nicForChannel(g, gpu0, 2, noMlx0) == nic(g, 3));
    CHECK(nicForChannel(g, gpu0, 3, noMlx0) == nic(g, 1));
    // Only socket 1's NICs allowed: GPU0 crosses the socket link.
    NicPolicy far = policy("", "=mlx5_4,mlx5_5");
    std::vector<int> near = nearestAllowedNics(g, gpu(g, 0), far);
    CHECK(near == std::vector<int>{nic(g, 4), nic(g, 5)});
    CHECK(g.pathType(gpu(g, 0), near[0]) == PathType::kSys);
    // The Ethernet list does not affect RDMA NICs.
    CHECK(nicForChannel(g, gpu0, 0, policy("eth", "")) == nic(g, 0));
    CHECK(nicForChannel(g, gpu0, 0, policy("", "^mlx5")) == -1);
  }

  SECTION("ND v4: two nearest NICs alternate by channel") {
    Graph g = load("nccl-azure-ndv4.xml");
    for (int k = 0; k < 8; ++k) {
      RankPlace p{0, k, -1};
      int a = nicForChannel(g, p, 0, {}), b = nicForChannel(g, p, 1, {});
      CHECK(a != b);
      CHECK(nicForChannel(g, p, 2, {}) == a);
      CHECK(nicForChannel(g, p, 3, {}) == b);
    }
  }

  SECTION("CPU-only server: NIC for each NUMA node") {
    Graph g = load("nccl-2socket-cpu-100g.xml");
    RankPlace numa0{0, -1, 0}, numa1{0, -1, 1}, unknown{0, -1, -1};
    CHECK(nicForChannel(g, numa0, 0, {}) == nic(g, 0));
    CHECK(nicForChannel(g, numa1, 5, {}) == nic(g, 0));
    CHECK(rankNode(g, unknown) == g.cpus()[0]);
    CHECK(nicForChannel(g, numa1, 0, policy("=ens1f0", "")) == nic(g, 0));
    CHECK(nicForChannel(g, numa1, 0, policy("ens", "")) == nic(g, 0));
    CHECK(nicForChannel(g, numa1, 0, policy("^ens", "")) == -1);
    CHECK(nicForChannel(g, numa1, 0, policy("eth", "")) == -1);
  }
}

// The cluster view across ranks (cluster.h): what hosts and ranks publish, how rank 0 fuses
// it, the ring it publishes for 2 DGX-like hosts, and the NIC each channel then uses.

#include "topo_test_util.h"

#include "topology/cluster.h"
#include "topology/graph_json.h"
#include "topology/rings.h"

using namespace braid;
using namespace braid::topology;
using namespace braid::topology::testing;

namespace {

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// What rank 0 does in Communicator::loadTopology, from the published strings only.
std::vector<int> publishedRing(const std::vector<std::string>& hostIds, const std::vector<std::string>& hostRecords,
                               const std::vector<RankRecord>& rankRecords) {
  std::vector<int> hostOf = hostIndices(hostIds);
  Cluster c;
  auto fused = fuseCluster(hostOf, hostRecords, rankRecords, &c);
  INFO(fused.status().toString());
  REQUIRE(fused.isOk());
  REQUIRE(fused.value());
  auto ring = ringOrder(c.hostPointers(), c.ranks);
  REQUIRE(ring.isOk());
  std::vector<int> decoded;
  REQUIRE(decodeRing(encodeRing(ring.value()), static_cast<int>(hostIds.size()), &decoded).isOk());
  CHECK(decoded == ring.value());
  return decoded;
}

}  // namespace

TEST_CASE("host records carry a graph, no topology, or an error", "[topology][cluster]") {
  Graph g = load("nccl-dgx-h100-like.xml");

  SECTION("a graph travels as compact JSON and comes back equal") {
    std::string rec = hostRecordGraph(g);
    CHECK(rec[0] == 'G');
    CHECK(rec.find('\n') == std::string::npos);           // compact
    CHECK(rec.find("\"paths\"") == std::string::npos);    // recomputed by the reader
    CHECK(rec.size() < graphToJson(g).size() / 2);
    Graph back;
    bool known = false;
    REQUIRE(decodeHostRecord(rec, "host 1", &back, &known).isOk());
    CHECK(known);
    CHECK(back == g);
    CHECK(back.gpus().size() == 8);
  }

  SECTION("no topology") {
    Graph back;
    bool known = true;
    REQUIRE(decodeHostRecord(hostRecordNone(), "host 1", &back, &known).isOk());
    CHECK_FALSE(known);
  }

  SECTION("an error keeps its code and message for every rank to report") {
    Status err(Code::kInvalidArgument, "BRAID_TOPO_FILE=/x.xml on host h1: /x.xml:7:3: </cpu> does not match <pci>");
    Graph back;
    bool known = true;
    Status s = decodeHostRecord(hostRecordError(err), "host 1", &back, &known);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message() == err.message());
  }

  SECTION("garbage is a remote error naming the source") {
    Graph back;
    bool known = false;
    Status s = decodeHostRecord("G{\"format\": 12", "topology of host 3", &back, &known);
    CHECK(s.code() == Code::kRemoteError);
    CHECK(s.message().find("topology of host 3") != std::string::npos);
    CHECK(decodeHostRecord("X", "topology of host 3", &back, &known).code() == Code::kRemoteError);
  }
}

TEST_CASE("rank records and rings round-trip and reject garbage", "[topology][cluster]") {
  for (RankRecord r : {RankRecord{kGpuNone, -1, ""}, RankRecord{3, 1, ""}, RankRecord{kGpuLocal, 0, ""},
                       RankRecord{kGpuLocal, 1, "4,5,GPU-8f2c7e1a-0b3d-4c55-9e2a-1f0d9c6b7a21"}}) {
    auto back = decodeRankRecord(encodeRankRecord(r), 5);
    REQUIRE(back.isOk());
    CHECK(back.value() == r);
  }
  for (const char* bad : {"", "1", "x 0", "1 y", "-3 0", "1 0 ", "1 0 a b"}) {
    INFO(bad);
    auto r = decodeRankRecord(bad, 5);
    CHECK(r.status().code() == Code::kRemoteError);
    CHECK(r.status().rank() == 5);
  }
  std::vector<int> ring;
  REQUIRE(decodeRing(encodeRing({2, 0, 1}), 3, &ring).isOk());
  CHECK(ring == std::vector<int>{2, 0, 1});
  REQUIRE(decodeRing(encodeRing({}), 3, &ring).isOk());
  CHECK(ring.empty());
  for (const char* bad : {"R 0 1", "R 0 1 1", "R 0 1 3", "R 0 1 x", "Q"}) {
    INFO(bad);
    CHECK(decodeRing(bad, 3, &ring).code() == Code::kRemoteError);
  }
  Status e = decodeRing(hostRecordError(Status(Code::kInvalidArgument, "no such file")), 3, &ring);
  CHECK(e.code() == Code::kInvalidArgument);
  CHECK(e.message() == "no such file");
  CHECK(formatRing({0, 1, 2, 3}, {0, 0, 1, 1}) == "0 1 | 2 3");
}

TEST_CASE("host indices follow the lowest rank of each host", "[topology][cluster]") {
  std::vector<int> local;
  CHECK(hostIndices({"b", "a", "b", "c", "a"}, &local) == std::vector<int>{0, 1, 0, 2, 1});
  CHECK(local == std::vector<int>{0, 0, 1, 0, 1});
}

TEST_CASE("16 ranks on 2 DGX-like hosts: the ring from published records", "[topology][cluster]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  const std::vector<std::string> records{hostRecordGraph(g), hostRecordGraph(g)};

  SECTION("host-major ranks, GPU = local rank") {
    std::vector<std::string> ids;
    for (int r = 0; r < 16; ++r) ids.push_back(r < 8 ? "nodeA" : "nodeB");
    std::vector<RankRecord> ranks(16, RankRecord{kGpuLocal, -1, ""});
    CHECK(publishedRing(ids, records, ranks) == iota(16));
  }

  SECTION("interleaved hosts and permuted GPUs: grouped per host, in NVLink order") {
    std::vector<std::string> ids;
    std::vector<RankRecord> ranks;
    for (int r = 0; r < 16; ++r) {
      ids.push_back(r % 2 ? "nodeB" : "nodeA");
      ranks.push_back(RankRecord{7 - r / 2, r / 2 < 4 ? 0 : 1, ""});
    }
    // Host A holds the even ranks, GPU 7 - r/2; its segment follows GPUs 0..7.
    CHECK(publishedRing(ids, records, ranks) ==
          std::vector<int>{14, 12, 10, 8, 6, 4, 2, 0, 15, 13, 11, 9, 7, 5, 3, 1});
  }

  SECTION("CPU ranks on the same hosts follow their NUMA nodes") {
    std::vector<std::string> ids{"a", "a", "a", "a", "b", "b", "b", "b"};
    std::vector<RankRecord> ranks{{kGpuNone, 1, ""}, {kGpuNone, 0, ""}, {kGpuNone, 1, ""}, {kGpuNone, 0, ""},
                                  {kGpuNone, 0, ""}, {kGpuNone, 1, ""}, {kGpuNone, -1, ""}, {kGpuNone, 0, ""}};
    CHECK(publishedRing(ids, records, ranks) == std::vector<int>{1, 3, 0, 2, 4, 7, 5, 6});
  }
}

TEST_CASE("fusing: a host without topology, an error, a GPU that is not there", "[topology][cluster]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  std::vector<int> hostOf{0, 0, 1, 1};
  std::vector<RankRecord> ranks(4, RankRecord{kGpuLocal, -1, ""});
  Cluster c;

  auto none = fuseCluster(hostOf, {hostRecordGraph(g), hostRecordNone()}, ranks, &c);
  REQUIRE(none.isOk());
  CHECK_FALSE(none.value());

  // An error wins over "no topology", whichever host has which.
  auto err = fuseCluster(hostOf, {hostRecordNone(), hostRecordError(Status(Code::kInvalidArgument, "bad file"))},
                         ranks, &c);
  CHECK(err.status().code() == Code::kInvalidArgument);
  CHECK(err.status().message() == "bad file");

  ranks[3].gpu = 8;
  auto gpu = fuseCluster(hostOf, {hostRecordGraph(g), hostRecordGraph(g)}, ranks, &c);
  CHECK(gpu.status().code() == Code::kInvalidArgument);
  CHECK(gpu.status().message().find("rank 3 asks for GPU 8") != std::string::npos);

  // More local ranks than GPUs: the extra ones are CPU ranks.
  Graph cpu = load("nccl-2socket-cpu-100g.xml");
  std::vector<RankRecord> local(4, RankRecord{kGpuLocal, 0, ""});
  auto ok = fuseCluster({0, 0, 0, 0}, {hostRecordGraph(cpu)}, local, &c);
  REQUIRE(ok.isOk());
  REQUIRE(ok.value());
  for (const RankPlace& p : c.ranks) CHECK(p.gpu == kGpuNone);
  CHECK(resolveGpu(RankRecord{kGpuLocal, 0, ""}, 3, g, 3).value() == 3);
  CHECK(resolveGpu(RankRecord{kGpuLocal, 0, ""}, 9, g, 9).value() == kGpuNone);
}

TEST_CASE("BRAID_GPU=local follows CUDA_VISIBLE_DEVICES to the physical GPU", "[topology][cluster]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  REQUIRE(g.gpus().size() == 8);
  // The graph's GPU with CUDA index `dev`.
  auto gpuWithDev = [&](int dev) {
    for (size_t i = 0; i < g.gpus().size(); ++i)
      if (g.node(g.gpus()[i]).dev == dev) return static_cast<int>(i);
    return -100;
  };
  REQUIRE(gpuWithDev(5) >= 0);
  auto local = [&](const char* visible, int localRank) {
    auto r = resolveGpu(RankRecord{kGpuLocal, 0, visible}, localRank, g, localRank);
    REQUIRE(r.isOk());
    return r.value();
  };
  // All ranks of the host see GPUs 4-7: local rank r drives the r-th of them.
  CHECK(local("4,5,6,7", 0) == gpuWithDev(4));
  CHECK(local("4,5,6,7", 1) == gpuWithDev(5));
  CHECK(local("4,5,6,7", 3) == gpuWithDev(7));
  // More ranks than visible GPUs share them (CUDA device localRank % count).
  CHECK(local("4,5,6,7", 5) == gpuWithDev(5));
  // One GPU per rank (Slurm --gpus-per-task=1): each rank's device 0 is what it names.
  CHECK(local("6", 0) == gpuWithDev(6));
  CHECK(local("2", 3) == gpuWithDev(2));
  // UUIDs and MIG instances cannot be placed without the CUDA runtime; they still count.
  CHECK(local("GPU-8f2c7e1a-0b3d-4c55-9e2a-1f0d9c6b7a21,3", 0) == kGpuNone);
  CHECK(local("GPU-8f2c7e1a-0b3d-4c55-9e2a-1f0d9c6b7a21,3", 1) == gpuWithDev(3));
  CHECK(local("MIG-GPU-8f2c7e1a/1/0", 0) == kGpuNone);
  // The list ends at its first invalid entry, as in CUDA: "-1" hides every GPU; "1,x,2"
  // is just GPU 1.
  CHECK(local("-1", 0) == kGpuNone);
  CHECK(local("1,x,2", 0) == gpuWithDev(1));
  CHECK(local("1,x,2", 1) == gpuWithDev(1));
  // An index the host does not have: not placed.
  CHECK(local("12", 0) == kGpuNone);
}

TEST_CASE("NIC per channel on the fused cluster, with include/exclude lists", "[topology][cluster][nic]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  std::vector<std::string> records{hostRecordGraph(g), hostRecordGraph(g)};
  std::vector<int> hostOf;
  std::vector<RankRecord> ranks;
  for (int r = 0; r < 16; ++r) {
    hostOf.push_back(r / 8);
    ranks.push_back(RankRecord{kGpuLocal, -1, ""});
  }
  Cluster c;
  REQUIRE(fuseCluster(hostOf, records, ranks, &c).value());
  auto policy = [](const std::string& netIf, const std::string& ibHca) {
    NicPolicy p;
    p.netIf = NicFilter::parse(netIf).value();
    p.ibHca = NicFilter::parse(ibHca).value();
    return p;
  };
  const Graph& h1 = c.hosts[1];
  // Every GPU's own rail NIC on every channel, on both hosts.
  for (int r = 0; r < 16; ++r)
    for (int ch = 0; ch < 4; ++ch) CHECK(h1.node(nicForChannel(h1, c.ranks[r], ch, {})).hca == "mlx5_" + std::to_string(r % 8));
  // Excluding the rail NICs of socket 0 sends GPU 1 (rank 9) across to socket 1's four,
  // one per channel.
  NicPolicy far = policy("", "^mlx5_0,mlx5_1,mlx5_2,mlx5_3");
  std::vector<std::string> got;
  for (int ch = 0; ch < 5; ++ch) got.push_back(h1.node(nicForChannel(h1, c.ranks[9], ch, far)).hca);
  CHECK(got == std::vector<std::string>{"mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_4"});
  // Exact include of two NICs: channels alternate between them.
  NicPolicy two = policy("", "=mlx5_2,mlx5_3");
  CHECK(h1.node(nicForChannel(h1, c.ranks[8], 0, two)).hca == "mlx5_2");
  CHECK(h1.node(nicForChannel(h1, c.ranks[8], 1, two)).hca == "mlx5_3");
  // A prefix that matches nothing leaves no NIC: tcp keeps its default address.
  CHECK(nicForChannel(h1, c.ranks[8], 0, policy("", "bnxt")) == -1);
}

TEST_CASE("the cluster plan: trees, bandwidths and channels from 2 DGX-like hosts", "[topology][cluster][plan]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  std::vector<std::string> records{hostRecordGraph(g), hostRecordGraph(g)};
  std::vector<int> hostOf;
  std::vector<RankRecord> ranks;
  for (int r = 0; r < 16; ++r) {
    hostOf.push_back(r / 8);
    ranks.push_back(RankRecord{kGpuLocal, -1, ""});
  }
  Cluster c;
  REQUIRE(fuseCluster(hostOf, records, ranks, &c).value());
  auto plan = planCluster(c, {});
  INFO(plan.status().toString());
  REQUIRE(plan.isOk());
  const ClusterPlan& p = plan.value();
  CHECK(p.ring == iota(16));
  for (int t = 0; t < 2; ++t) {
    INFO("tree " << t);
    REQUIRE(p.treeParent[t].size() == 16);
    // Inside a host the tree is a chain; exactly one rank per host has a parent elsewhere
    // (or none: the root).
    for (int h = 0; h < 2; ++h) {
      int entries = 0;
      for (int r = 8 * h; r < 8 * h + 8; ++r) entries += p.treeParent[t][r] < 0 || p.treeParent[t][r] / 8 != h;
      CHECK(entries == 1);
    }
  }
  CHECK(p.treeParent[0] != p.treeParent[1]);
  // Each GPU's rail NIC is 400 Gb/s (50 GB/s) behind a PCIe Gen5 x16 switch, which the
  // graph rates at 48 GB/s (NCCL's figure): the path is the limit. The ring's hops inside a
  // host are NVLink, far faster.
  CHECK(p.netGBps == Approx(48.0).margin(1e-9));
  CHECK(p.intraGBps > 4 * p.netGBps);

  // Wire form: what every other rank decodes is what rank 0 computed.
  ClusterPlan back;
  REQUIRE(decodeClusterPlan(encodeClusterPlan(p), 16, &back).isOk());
  CHECK(back.ring == p.ring);
  CHECK(back.treeParent == p.treeParent);
  CHECK(back.netGBps == p.netGBps);
  CHECK(back.intraGBps == p.intraGBps);
  // A bare ring (an older record) decodes with no trees; "no topology" with nothing.
  REQUIRE(decodeClusterPlan(encodeRing(p.ring), 16, &back).isOk());
  CHECK(back.treeParent[0].empty());
  REQUIRE(decodeClusterPlan(encodeClusterPlan(ClusterPlan{}), 16, &back).isOk());
  CHECK(back.ring.empty());

  // Channels: one per NVLink of the GPU (18 on H100), capped by the cores.
  CHECK(topologyChannels(c.hosts[0], c.ranks[0], {}, true) == 18);
  CHECK(proposeChannels(1, 18) == 2);
  CHECK(proposeChannels(8, 18) == 16);
  CHECK(proposeChannels(8, 0) == 4);
  CHECK(proposeChannels(2, 0) == 2);
}

TEST_CASE("a malformed cluster plan is rejected", "[topology][cluster][plan]") {
  const std::string ring = encodeRing({0, 1, 2, 3});
  auto bad = [&](const std::string& tail) {
    ClusterPlan p;
    Status s = decodeClusterPlan(ring + tail, 4, &p);
    INFO(tail);
    CHECK(!s.isOk());
    CHECK(s.toString().find("malformed topology plan") != std::string::npos);
  };
  auto good = [&](const std::string& tail) {
    ClusterPlan p;
    Status s = decodeClusterPlan(ring + tail, 4, &p);
    INFO(tail << ": " << s.toString());
    CHECK(s.isOk());
  };
  good("\nT -1 0 1 2\nT 1 2 3 -1\nB 12.5 0");
  bad("\nT -1 0 1 2\nB 12.5 0");               // one tree only
  bad("\nT -1 0 1\nT 1 2 3 -1\nB 1 0");        // too short
  bad("\nT -1 -1 1 2\nT 1 2 3 -1\nB 1 0");     // two roots
  bad("\nT 1 2 0 -1\nT 1 2 3 -1\nB 1 0");      // a cycle 0 -> 1 -> 2 -> 0
  bad("\nT -1 1 1 2\nT 1 2 3 -1\nB 1 0");      // its own parent
  bad("\nT -1 0 1 4\nT 1 2 3 -1\nB 1 0");      // parent out of range
  bad("\nT -1 0 1 2\nT 1 2 3 -1\nB -1 0");     // negative bandwidth
  bad("\nT -1 0 1 2\nT 1 2 3 -1\nB nan 0");
  bad("\nT -1 0 1 2\nT 1 2 3 -1\nB 1");
  bad("\nT -1 0 1 2\nT 1 2 3 -1\nX");
}

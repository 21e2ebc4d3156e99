// The cost model covers every algorithm of the table and answers in the directions the
// alpha-beta argument says it must.

#include <string>

#include "plan/cost_model.h"
#include "support/catch.h"

using namespace braid;
using algorithms::Collective;

namespace {
algorithms::Request request(Collective c, size_t bytes, int nranks) {
  algorithms::Request r;
  r.coll = c;
  r.dtype = DataType::kFloat32;
  size_t elems = bytes / 4;
  bool perRank = c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll ||
                 c == Collective::kGather || c == Collective::kScatter;
  r.count = perRank ? std::max<size_t>(1, elems / nranks) : elems;
  if (c == Collective::kAllGatherV || c == Collective::kReduceScatterV || c == Collective::kAllToAllV) {
    r.counts.assign(nranks, std::max<size_t>(1, elems / nranks));
    r.sendCounts = r.counts;
    for (int i = 0; i < nranks; ++i) {
      r.displs.push_back(i * r.counts[0]);
      r.sendDispls.push_back(i * r.counts[0]);
    }
  }
  if (c == Collective::kSendRecv) r.p2p.push_back({true, 1, elems});
  return r;
}
}  // namespace

TEST_CASE("cost model: every algorithm of the table has a prediction", "[unit]") {
  plan::Machine m = plan::uniformMachine(4, 4);
  for (const auto& a : algorithms::algorithmTable()) {
    for (size_t bytes : {size_t{8}, size_t{1} << 20}) {
      double t = plan::predictSeconds(a, request(a.coll, bytes, 16), m, m.nchannels);
      INFO(algorithms::collectiveName(a.coll) << ":" << a.name << " " << bytes);
      CHECK(t >= 0);
      CHECK(t < 10);
    }
  }
}

TEST_CASE("cost model: hierarchical applies only across several hosts", "[unit]") {
  const auto* h = algorithms::findAlgorithm(Collective::kAllReduce, "hierarchical");
  REQUIRE(h);
  CHECK(plan::predictSeconds(*h, request(Collective::kAllReduce, 1 << 20, 8), plan::uniformMachine(1, 8), 1) < 0);
  CHECK(plan::predictSeconds(*h, request(Collective::kAllReduce, 1 << 20, 16), plan::uniformMachine(2, 8), 1) > 0);
}

TEST_CASE("cost model: latency-bound small and bandwidth-bound large", "[unit]") {
  plan::Machine m = plan::uniformMachine(8, 1);
  const auto* ring = algorithms::findAlgorithm(Collective::kAllReduce, "ring");
  const auto* rd = algorithms::findAlgorithm(Collective::kAllReduce, "recursive_doubling");
  auto at = [&](const algorithms::AlgorithmInfo* a, size_t b) {
    return plan::predictSeconds(*a, request(Collective::kAllReduce, b, 8), m, 1);
  };
  CHECK(at(rd, 8) < at(ring, 8));
  CHECK(at(ring, 256 << 20) < at(rd, 256 << 20));
  // Time grows with bytes.
  CHECK(at(ring, 1 << 20) < at(ring, 16 << 20));
}

TEST_CASE("cost model: per-transport links and the communicator's geometry", "[unit]") {
  CHECK(plan::transportLink("shm").alpha < plan::transportLink("tcp").alpha);
  CHECK(plan::transportLink("shm").beta > plan::transportLink("tcp").beta);
  algorithms::Layout l;
  l.nranks = 4;
  l.hostOf = {0, 0, 1, 1};
  l.rings = {{0, 1, 2, 3}, {0, 1, 2, 3}};
  l.roundBytes = 64 * 1024 * 16;
  plan::Machine m = plan::machineForLayout(l);
  CHECK(m.nhosts() == 2);
  CHECK(m.nchannels == 2);
  CHECK(m.ringSlotBytes == 64 * 1024);
  CHECK(m.ringSlots == 32);
  CHECK(plan::machineForLayout(l, "tcp").ringSlotBytes == 64 * 1024);
  // One host: memory slots, or tcp's own when tcp is forced.
  l.hostOf = {0, 0, 0, 0};
  CHECK(plan::machineForLayout(l).ringSlotBytes == 512 * 1024);
  plan::Machine tcp = plan::machineForLayout(l, "tcp");
  CHECK(tcp.ringSlotBytes == 128 * 1024);
  CHECK(tcp.ringSlots == 16);
}

TEST_CASE("cost model: the topology's trees price by their real depth and crossings", "[unit]") {
  // 2 hosts x 8 ranks. The published trees chain each host's ranks and join the two hosts
  // at the chains' heads: 8 hops deep, 1 host crossing, where a binary tree over 16 ranks is
  // 4 deep with its top levels crossing.
  algorithms::Layout l;
  l.nranks = 16;
  for (int r = 0; r < 16; ++r) l.hostOf.push_back(r / 8);
  l.rings = {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
  l.roundBytes = 64 * 1024 * 16;
  l.smallRoundBytes = 128 * 1024;
  plan::Machine binary = plan::machineForLayout(l);
  CHECK(binary.treeDepth == 0);
  for (int t = 0; t < 2; ++t) {
    std::vector<int> p(16);
    for (int r = 0; r < 16; ++r) {
      const int head = t == 0 ? (r / 8) * 8 : (r / 8) * 8 + 7;  // tree 1 enters at the far end
      if (r == head) p[r] = r / 8 == 0 ? -1 : (t == 0 ? 0 : 7);
      else p[r] = t == 0 ? r - 1 : r + 1;
    }
    l.treeParent[t] = p;
  }
  plan::Machine chained = plan::machineForLayout(l);
  CHECK(chained.treeDepth == 8);  // rank 15 -> 8 (head of host 1) -> 0: 7 + 1 hops
  CHECK(chained.treeCrossings == 1);
  const auto* tree = algorithms::findAlgorithm(Collective::kAllReduce, "tree");
  REQUIRE(tree != nullptr);
  const auto small = request(Collective::kAllReduce, 8, 16);
  // Over the table's TCP link (25 us) the one crossing per path beats the binary tree's two.
  CHECK(plan::predictSeconds(*tree, small, chained, 1) < plan::predictSeconds(*tree, small, binary, 1));
  // Where the network is as fast as shared memory, only depth counts: twice the hops cost more.
  binary.inter = chained.inter = binary.intra;
  CHECK(plan::predictSeconds(*tree, small, chained, 1) > plan::predictSeconds(*tree, small, binary, 1));
}

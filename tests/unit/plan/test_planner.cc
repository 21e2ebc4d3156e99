// The planner: BRAID_ALGO wins, single-host defaults stay, unavailable algorithms are
// skipped, and at 64 hosts x 8 ranks the model's choice is within 10 % of the best the
// simulator finds among all algorithms that build.

#include <chrono>
#include <map>
#include <cstdio>
#include <string>

#include "plan/planner.h"
#include "plan/simulator.h"
#include "support/catch.h"

using namespace braid;
using algorithms::Collective;

namespace {

algorithms::Request request(Collective c, size_t bytes, int nranks) {
  algorithms::Request r;
  r.coll = c;
  r.dtype = DataType::kFloat32;
  size_t elems = std::max<size_t>(1, bytes / 4);
  bool perRank = c == Collective::kAllGather || c == Collective::kReduceScatter;
  r.count = perRank ? std::max<size_t>(1, elems / nranks) : elems;
  return r;
}

std::string chosen(const algorithms::Request& req, const plan::Machine& m, const std::vector<plan::AlgoRule>* rules) {
  auto p = plan::choosePlan(req, plan::simLayout(m, 0), m, rules, nullptr);
  REQUIRE(p.isOk());
  return p->algo->name;
}

}  // namespace

TEST_CASE("planner: a BRAID_ALGO rule always wins", "[unit]") {
  auto rules = plan::parseAlgoOverride("allreduce:0-1K:ring");
  REQUIRE(rules.isOk());
  plan::Machine m = plan::uniformMachine(1, 4);
  CHECK(chosen(request(Collective::kAllReduce, 8, 4), m, &rules.value()) == "ring");
  // Outside the rule's range the model decides.
  CHECK(chosen(request(Collective::kAllReduce, 4096, 4), m, &rules.value()) == "recursive_doubling");
  // An override of an algorithm that cannot build reports the error rather than hiding it.
  auto bad = plan::parseAlgoOverride("allreduce:hierarchical");
  REQUIRE(bad.isOk());
  algorithms::Layout l = plan::simLayout(m, 0);
  exec::Schedule s;
  auto p = plan::choosePlan(request(Collective::kAllReduce, 8, 4), l, m, &bad.value(), &s);
  if (p.isOk()) CHECK(s.algorithm.size() > 0);
}

TEST_CASE("planner: one host keeps recursive doubling up to 64 KiB, then ring", "[unit]") {
  for (int n : {2, 4, 8}) {
    plan::Machine m = plan::uniformMachine(1, n);
    for (size_t b : {size_t{8}, size_t{1024}, size_t{64 * 1024}}) {
      INFO("n=" << n << " bytes=" << b);
      std::string c = chosen(request(Collective::kAllReduce, b, n), m, nullptr);
      CHECK(c != "ring");
      CHECK(c != "hierarchical");
    }
    for (size_t b : {size_t{4} << 20, size_t{256} << 20}) {
      INFO("n=" << n << " bytes=" << b);
      std::string c = chosen(request(Collective::kAllReduce, b, n), m, nullptr);
      CHECK(c != "recursive_doubling");
      CHECK(c != "direct");
    }
  }
}

TEST_CASE("planner: one host's allgathers of up to 64 KiB at 4 and 8 ranks double recursively", "[unit]") {
  auto pick = [](int n, size_t bytes) {
    plan::Machine m = plan::uniformMachine(1, n);
    return chosen(request(Collective::kAllGather, bytes, n), m, nullptr);
  };
  for (int n : {4, 8}) {
    for (size_t b : {size_t{1} << 10, size_t{16} << 10, size_t{64} << 10}) {
      INFO("n=" << n << " bytes=" << b);
      CHECK(pick(n, b) == "recursive_doubling");
    }
    // Above the small-message size, the ring.
    for (size_t b : {size_t{128} << 10, size_t{1} << 20, size_t{64} << 20}) {
      INFO("n=" << n << " bytes=" << b);
      CHECK(pick(n, b) == "ring");
    }
  }
  // Not a power of two (the extra ranks fold in and out): the ring.
  for (int n : {3, 6}) {
    INFO("n=" << n);
    CHECK(pick(n, static_cast<size_t>(n) << 10) == "ring");
    CHECK(pick(n, static_cast<size_t>(n) << 13) == "ring");
  }
}

// The allreduce the planner picks on one host of n ranks for connections that carry whole
// blocks of `wholeBlockBytes` (0: slots only), in the rings too or not, by rendezvous
// through memory (UCX's shared memory) or not.
static std::string pickAllreduce(int n, size_t bytes, size_t wholeBlockBytes, bool inRings, bool inMemory) {
  plan::Machine m = plan::uniformMachine(1, n);
  algorithms::Layout l = plan::simLayout(m, 0);
  l.wholeBlockBytes = wholeBlockBytes;
  l.wholeBlocksInRings = inRings;
  l.rendezvousInMemory = inMemory;
  auto p = plan::choosePlan(request(Collective::kAllReduce, bytes, n), l, m, nullptr, nullptr);
  REQUIRE(p.isOk());
  return std::string(p->algo->name);
}

TEST_CASE("planner: over rendezvous of whole blocks through memory, 4 ranks halve and double from 512 KiB to 4 MiB",
          "[unit]") {
  auto pick = [](int n, size_t bytes, size_t wholeBlockBytes, bool inRings, bool inMemory = true) {
    return pickAllreduce(n, bytes, wholeBlockBytes, inRings, inMemory);
  };
  const size_t whole = size_t{64} << 20;
  for (size_t b : {size_t{512} << 10, size_t{1} << 20, size_t{4} << 20}) {
    INFO("bytes=" << b);
    CHECK(pick(4, b, whole, true) == "rabenseifner");
    // Slots only (shm, tcp), or blocks sent whole in the mesh alone (UCX over paced tcp): the ring.
    CHECK(pick(4, b, 0, true) == "ring");
    CHECK(pick(4, b, whole, false) == "ring");
    // Whole blocks in the rings too, through sockets (UCX's tcp): the ring.
    CHECK(pick(4, b, whole, true, false) == "ring");
    // Other rank counts keep the ring.
    CHECK(pick(2, b, whole, true) == "ring");
    CHECK(pick(8, b, whole, true) == "ring");
  }
  CHECK(pick(4, size_t{8} << 20, whole, true) == "ring");
}

TEST_CASE("planner: over UCX's shared memory, 4 ranks take two shots from 64 KiB to 256 KiB", "[unit]") {
  auto pick = [](int n, size_t bytes, bool inMemory) { return pickAllreduce(n, bytes, size_t{64} << 20, true, inMemory); };
  for (size_t b : {size_t{64} << 10, size_t{128} << 10, size_t{256} << 10}) {
    INFO("bytes=" << b);
    CHECK(pick(4, b, true) == "two_shot");
    // Through sockets or braid's own slots, and at other rank counts: the defaults.
    CHECK(pick(4, b, false) == (b <= (size_t{64} << 10) ? "recursive_doubling" : "ring"));
    CHECK(pick(3, b, true) == (b <= (size_t{64} << 10) ? "recursive_doubling" : "ring"));
    CHECK(pick(8, b, true) == (b <= (size_t{64} << 10) ? "recursive_doubling" : "ring"));
  }
  // Either side of the range: recursive doubling below, the ring just above, Rabenseifner from 512 KiB.
  CHECK(pick(4, size_t{48} << 10, true) == "recursive_doubling");
  CHECK(pick(4, (size_t{256} << 10) + 4, true) == "ring");
  CHECK(pick(4, size_t{512} << 10, true) == "rabenseifner");
}

TEST_CASE("planner: planCollective builds what choosePlan chose, for every collective", "[unit]") {
  plan::Machine m = plan::uniformMachine(2, 2);
  for (int c = 0; c < algorithms::kNumCollectives; ++c) {
    auto coll = static_cast<Collective>(c);
    if (coll != Collective::kAllReduce && coll != Collective::kBroadcast) continue;
    algorithms::Request req = request(coll, 1 << 20, 4);
    auto s = plan::planCollective(req, plan::simLayout(m, 1), nullptr, m);
    REQUIRE(s.isOk());
    CHECK(!s->channels.empty());
  }
}

TEST_CASE("planner: within 10% of the simulator's best at 64 hosts x 8 ranks", "[unit]") {
  const auto t0 = std::chrono::steady_clock::now();
  plan::Machine m = plan::uniformMachine(64, 8);
  const int n = m.nranks();
  const algorithms::Layout l0 = plan::simLayout(m, 0);
  int compared = 0;
  for (Collective coll : {Collective::kAllReduce, Collective::kBroadcast, Collective::kAllGather,
                          Collective::kReduceScatter}) {
    for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 8) {
      algorithms::Request req = request(coll, bytes, n);
      double best = -1;
      std::string bestName, table;
      std::map<std::string, double> simulated;
      for (const auto& a : algorithms::algorithmTable()) {
        if (a.coll != coll) continue;
        if (!a.build(req, l0).isOk()) continue;  // not written yet, or does not apply
        auto r = plan::simulateAlgorithm(a, req, m);
        REQUIRE(r.isOk());
        simulated[a.name] = r->seconds;
        double pred = plan::predictSeconds(a, req, m, m.nchannels);
        char line[160];
        std::snprintf(line, sizeof line, "  %-20s sim %10.3f ms  model %10.3f ms\n", a.name, r->seconds * 1e3,
                      pred * 1e3);
        table += line;
        if (best < 0 || r->seconds < best) {
          best = r->seconds;
          bestName = a.name;
        }
      }
      if (simulated.empty()) continue;
      auto p = plan::choosePlan(req, l0, m, nullptr, nullptr);
      REQUIRE(p.isOk());
      INFO(algorithms::collectiveName(coll) << " " << bytes << " B: chose " << p->algo->name << ", best "
                                           << bestName << "\n" << table);
      REQUIRE(simulated.count(p->algo->name));
      CHECK(simulated[p->algo->name] <= 1.10 * best);
      ++compared;
    }
  }
  CHECK(compared >= 10);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("within-10% sweep: " << compared << " cases in " << secs << " s");
}

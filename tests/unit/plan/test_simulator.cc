// The cost simulator runs real schedules: check that it finishes them, that it notices a
// deadlock and a slice-size disagreement, and that its times grow the way the algorithms'
// structure says they must (ring latency O(n), recursive doubling O(log n)).

#include "algorithms/algorithm.h"
#include "plan/simulator.h"
#include "support/catch.h"

using namespace braid;
using algorithms::Collective;
using exec::Buf;
using exec::Prim;

namespace {

algorithms::Request allreduce(size_t bytes) {
  algorithms::Request r;
  r.coll = Collective::kAllReduce;
  r.dtype = DataType::kFloat32;
  r.count = bytes / 4;
  return r;
}

double sim(const char* coll, const char* algo, const algorithms::Request& req, const plan::Machine& m) {
  const auto* a = algorithms::findAlgorithm(req.coll, algo);
  REQUIRE(a != nullptr);
  auto r = plan::simulateAlgorithm(*a, req, m);
  INFO(coll << ":" << algo << " " << (r.isOk() ? "" : r.status().toString()));
  REQUIRE(r.isOk());
  return r->seconds;
}

}  // namespace

TEST_CASE("simulator: a ring allreduce costs what its hops and bytes say", "[unit]") {
  plan::Machine m = plan::uniformMachine(1, 4);
  m.intra = {1e-6, 1e9};
  m.intra.overhead = 0;
  m.reduceBeta = m.copyBeta = 1e15;  // links only
  // 16 B: six dependent hops of one tiny slice each.
  double t = sim("allreduce", "ring", allreduce(16), m);
  CHECK(t == Approx(6 * (1e-6 + 1 / 1e9)).epsilon(0.01));
  // 64 MiB: every connection carries 2 (n-1)/n of the buffer at 1 GB/s, pipelined.
  double big = sim("allreduce", "ring", allreduce(64 << 20), m);
  double bw = 1.5 * (64 << 20) / 1e9;
  CHECK(big > bw);
  CHECK(big < bw * 1.15);
}

TEST_CASE("simulator: host NICs are shared by the ranks that cross them", "[unit]") {
  // A chain broadcast crosses each host boundary once, so its time hardly depends on how
  // many ranks share a host; one-slot-per-peer direct traffic would.
  plan::Machine one = plan::uniformMachine(4, 1);
  plan::Machine four = plan::uniformMachine(4, 4);
  algorithms::Request req;
  req.coll = Collective::kBroadcast;
  req.count = (16 << 20) / 4;
  double a = sim("broadcast", "chain", req, one);
  double b = sim("broadcast", "chain", req, four);
  CHECK(b < a * 1.3);
  CHECK(b > a * 0.9);
}

TEST_CASE("simulator: ring latency grows linearly and recursive doubling logarithmically", "[unit]") {
  auto at = [&](const char* algo, int hosts) {
    plan::Machine m = plan::uniformMachine(hosts, 8);
    return sim("allreduce", algo, allreduce(8), m);
  };
  double ring8 = at("ring", 1), ring64 = at("ring", 8), ring512 = at("ring", 64);
  CHECK(ring64 / ring8 > 6);
  CHECK(ring512 / ring64 > 6);
  double rd64 = at("recursive_doubling", 8), rd512 = at("recursive_doubling", 64);
  CHECK(rd512 / rd64 < 2);
  CHECK(rd512 < ring512 / 10);
}

TEST_CASE("simulator: reports a deadlock instead of hanging", "[unit]") {
  // Both ranks receive before they send.
  std::vector<exec::Schedule> s(2);
  for (int r = 0; r < 2; ++r) {
    s[r].channels.resize(1);
    s[r].algorithm = "broken";
    s[r].connectionSet = 1;
    s[r].channels[0].steps.push_back(exec::Step{Prim::kRecv, 1 - r, -1, {}, {Buf::kOutput, 0, 64}});
    s[r].channels[0].steps.push_back(exec::Step{Prim::kSend, -1, 1 - r, {Buf::kInput, 0, 64}, {}});
  }
  auto res = plan::simulate(s, plan::uniformMachine(1, 2));
  REQUIRE_FALSE(res.isOk());
  CHECK(res.status().message().find("deadlock") != std::string::npos);
}

TEST_CASE("simulator: notices ends that cut different slices", "[unit]") {
  std::vector<exec::Schedule> s(2);
  for (int r = 0; r < 2; ++r) {
    s[r].channels.resize(1);
    s[r].connectionSet = 1;
  }
  s[0].channels[0].steps.push_back(exec::Step{Prim::kSend, -1, 1, {Buf::kInput, 0, 64}, {}});
  s[1].channels[0].steps.push_back(exec::Step{Prim::kRecv, 0, -1, {}, {Buf::kOutput, 0, 32}});
  auto res = plan::simulate(s, plan::uniformMachine(1, 2));
  REQUIRE_FALSE(res.isOk());
}

TEST_CASE("simulator: 512 ranks of ring allreduce simulate quickly at any size", "[unit]") {
  plan::Machine m = plan::uniformMachine(64, 8);
  for (size_t bytes : {size_t{8}, size_t{1} << 30}) {
    const auto* a = algorithms::findAlgorithm(Collective::kAllReduce, "ring");
    auto r = plan::simulateAlgorithm(*a, allreduce(bytes), m);
    REQUIRE(r.isOk());
    CHECK(r->slices <= plan::SimOptions{}.maxSlices + 2 * 512 * 1022 * 2);
    CHECK(r->seconds > 0);
  }
}

TEST_CASE("simulator: a ring's rounds overlap where the FIFO holds two rounds' slices", "[unit]") {
  // Ring allreduces of many rounds, simulated with ChannelPlan::overlapRounds on and off:
  // every ring finishes either way, and running the next round's send ahead never makes
  // one slower. A round's part of 2 slices fits twice in a FIFO of 4, so there it runs
  // ahead and the rounds do not drain the ring; in a FIFO of 3 it does not, and the time
  // is the same as without.
  auto run = [](int n, int slots, bool overlap) {
    plan::Machine m = plan::uniformMachine(1, n);
    m.intra = {20e-6, 2e9};
    m.ringSlotBytes = 4096;
    m.ringSlots = slots;
    std::vector<exec::Schedule> all;
    for (int r = 0; r < n; ++r) {
      algorithms::Layout l = plan::simLayout(m, r);
      l.roundBytes = 2 * m.ringSlotBytes;
      auto s = algorithms::allreduceRing(allreduce(static_cast<size_t>(n) * 64 * 1024), l);
      REQUIRE(s.isOk());
      for (exec::ChannelPlan& ch : s->channels) {
        CHECK(ch.overlapRounds);
        ch.overlapRounds = overlap;
      }
      all.push_back(std::move(*s));
    }
    auto res = plan::simulate(all, m);
    INFO("n " << n << ", FIFO " << slots << (overlap ? ", overlapped" : "") << ": "
              << (res.isOk() ? "" : res.status().toString()));
    REQUIRE(res.isOk());
    return res->seconds;
  };
  for (int n : {2, 3, 5, 8}) {
    INFO("n " << n);
    const double off = run(n, 4, false), on = run(n, 4, true);
    CHECK(on <= off);
    if (n == 2) CHECK(on < 0.9 * off);
    CHECK(run(n, 3, true) == run(n, 3, false));
  }
}

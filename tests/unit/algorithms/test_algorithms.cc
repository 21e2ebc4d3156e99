// Schedules are data: check their shape and run them symbolically. The symbolic run moves
// "which ranks' contributions" instead of numbers, so it proves that every output element
// ends up with exactly one contribution from every rank, for any rank count.

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "algorithms/algorithm.h"
#include "plan/planner.h"
#include "support/catch.h"

using namespace braid;
using exec::Buf;
using exec::Prim;

namespace {

algorithms::Layout layout(int rank, int n, int nch, size_t roundBytes) {
  plan::World w;
  w.rank = rank;
  w.nranks = n;
  w.nchannels = nch;
  w.roundBytes = roundBytes;
  for (int r = 0; r < n; ++r) w.hostIds.push_back("h" + std::to_string(r % 2));  // two hosts, interleaved
  return plan::layoutFor(w);
}

// Symbolic allreduce: each element holds a multiset of contributing ranks.
using Contrib = std::multiset<int>;

using AlgoFn = StatusOr<exec::Schedule> (*)(const algorithms::Request&, const algorithms::Layout&);

bool simulateAllreduce(int n, int nch, size_t count, std::string* why, AlgoFn algo = &algorithms::allreduceRing) {
  std::vector<exec::Schedule> sched;
  for (int r = 0; r < n; ++r) {
    algorithms::Request req;
    req.count = count;
    req.dtype = DataType::kFloat32;
    auto s = algo(req, layout(r, n, nch, 64));
    if (!s.isOk()) { *why = s.status().toString(); return false; }
    std::string v = exec::validate(s.value(), n, count * 4, count * 4);
    if (!v.empty()) { *why = v; return false; }
    sched.push_back(std::move(s).value());
  }
  std::vector<std::vector<Contrib>> in(n, std::vector<Contrib>(count)), out(n, std::vector<Contrib>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) in[r][i] = {r};
  for (int c = 0; c < static_cast<int>(sched[0].channels.size()); ++c) {
    // Run each rank's steps in turn; a receive whose data is not there yet yields to others.
    std::map<std::pair<int, int>, std::deque<std::vector<Contrib>>> wire;  // (from, to) -> messages
    std::vector<size_t> pc(n, 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < n; ++r) {
        auto& steps = sched[r].channels[c].steps;
        while (pc[r] < steps.size()) {
          const exec::Step& st = steps[pc[r]];
          auto region = [&](const exec::Region& g, std::vector<std::vector<Contrib>>& buf) {
            return std::make_pair(&buf[r], g.offset / 4);
          };
          std::vector<Contrib> incoming;
          bool needsIn = st.prim != Prim::kSend && st.prim != Prim::kCopy;
          if (needsIn) {
            auto& q = wire[{st.peerIn, r}];
            if (q.empty()) break;
            incoming = q.front();
            q.pop_front();
          }
          size_t len = st.bytes() / 4;
          auto [src, so] = region(st.src, st.src.buf == Buf::kInput ? in : out);
          auto [dst, dO] = region(st.dst, st.dst.buf == Buf::kInput ? in : out);
          std::vector<Contrib> result(st.prim == Prim::kCopy ? 0 : len);
          for (size_t i = 0; i < result.size(); ++i) {
            switch (st.prim) {
              case Prim::kSend: result[i] = (*src)[so + i]; break;
              case Prim::kRecv: case Prim::kRecvCopySend: result[i] = incoming[i]; break;
              default: {
                result[i] = incoming[i];
                result[i].insert((*src)[so + i].begin(), (*src)[so + i].end());
              }
            }
          }
          if (st.prim == Prim::kRecv || st.prim == Prim::kRecvReduceCopySend || st.prim == Prim::kRecvCopySend ||
              st.prim == Prim::kRecvReduce)
            for (size_t i = 0; i < len; ++i) (*dst)[dO + i] = result[i];
          if (st.prim == Prim::kCopy)
            for (size_t i = 0; i < len; ++i) (*dst)[dO + i] = (*src)[so + i];
          if (st.prim == Prim::kSend || st.prim == Prim::kRecvReduceSend || st.prim == Prim::kRecvReduceCopySend ||
              st.prim == Prim::kRecvCopySend)
            wire[{r, st.peerOut}].push_back(result);
          ++pc[r];
          progress = true;
        }
      }
    }
    for (int r = 0; r < n; ++r)
      if (pc[r] != sched[r].channels[c].steps.size()) { *why = "deadlock at rank " + std::to_string(r); return false; }
  }
  Contrib all;
  for (int r = 0; r < n; ++r) all.insert(r);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      if (out[r][i] != all) { *why = "rank " + std::to_string(r) + " element " + std::to_string(i) + " wrong"; return false; }
  return true;
}

}  // namespace

TEST_CASE("ring allreduce schedules reduce every element exactly once per rank", "[unit]") {
  for (int n = 1; n <= 17; ++n)
    for (int nch : {1, 2, 3})
      for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n - 1 > 0 ? n - 1 : 1), size_t{37}, size_t{1023}}) {
        std::string why;
        INFO("n=" << n << " channels=" << nch << " count=" << count);
        CHECK(simulateAllreduce(n, nch, count, &why));
        INFO(why);
      }
}

TEST_CASE("recursive doubling reduces every element exactly once per rank", "[unit]") {
  for (int n = 1; n <= 17; ++n)
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{37}}) {
      std::string why;
      INFO("n=" << n << " count=" << count);
      CHECK(simulateAllreduce(n, 1, count, &why, &algorithms::allreduceRecursiveDoubling));
      INFO(why);
    }
}

TEST_CASE("recursive doubling peers are symmetric", "[unit]") {
  for (int n = 1; n <= 33; ++n)
    for (int r = 0; r < n; ++r)
      for (int q : algorithms::recursiveDoublingPeers(r, n)) {
        INFO("n=" << n << " r=" << r << " q=" << q);
        REQUIRE(q >= 0);
        REQUIRE(q < n);
        auto back = algorithms::recursiveDoublingPeers(q, n);
        CHECK(std::find(back.begin(), back.end(), r) != back.end());
      }
}

TEST_CASE("rings keep each host's ranks contiguous", "[unit]") {
  CHECK(plan::hostContiguousRing({"a", "b", "a", "b"}) == std::vector<int>{0, 2, 1, 3});
  CHECK(plan::hostContiguousRing({"b", "a", "b", "c", "a"}) == std::vector<int>{0, 2, 1, 4, 3});
  CHECK(plan::hostContiguousRing({"x"}) == std::vector<int>{0});
}

TEST_CASE("rounds bound what a step sends per round", "[unit]") {
  CHECK(algorithms::roundsFor(0, 1024) == 1);
  CHECK(algorithms::roundsFor(1024, 1024) == 1);
  CHECK(algorithms::roundsFor(1025, 1024) == 2);
  algorithms::Request req;
  req.count = 1 << 20;
  auto s = algorithms::allreduceRing(req, layout(0, 4, 1, 64 * 1024));
  REQUIRE(s.isOk());
  // 1M floats / 4 chunks = 1 MiB per chunk, 64 KiB per round.
  CHECK(s->channels[0].rounds == 16);
}

TEST_CASE("chain broadcast: the root sends, the last rank only receives", "[unit]") {
  const int n = 5;
  for (int root = 0; root < n; ++root) {
    int sends = 0, recvs = 0, forwards = 0;
    for (int r = 0; r < n; ++r) {
      algorithms::Request req;
      req.coll = algorithms::Collective::kBroadcast;
      req.count = 100;
      req.root = root;
      auto s = algorithms::broadcastChain(req, layout(r, n, 1, 1 << 20));
      REQUIRE(s.isOk());
      CHECK(exec::validate(s.value(), n, 400, 400) == "");
      for (const auto& st : s->channels[0].steps) {
        sends += st.prim == Prim::kSend;
        recvs += st.prim == Prim::kRecv;
        forwards += st.prim == Prim::kRecvCopySend;
      }
    }
    CHECK(sends == 1);
    CHECK(recvs == 1);
    CHECK(forwards == n - 2);
  }
}

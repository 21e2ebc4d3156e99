// The tree, Rabenseifner, direct, two-shot and hierarchical allreduces, the tree broadcast
// and the chain and tree reduces in the in-process world, each forced through BRAID_ALGO:
// rank counts 1..9, 12, 13, 16, 17, counts 0, 1, n-1, 7 and 1023 with every dtype and op
// (bitwise ones on integer types), in place and out of place, several roots, and 1M+3 with
// tiny slots on a few rank counts. Every element is compared with an independently computed
// value, and allreduce results of inexact float inputs must be bit-identical on every rank.
// Hierarchical runs pretend several hosts (WorldOptions::ranksPerHost); the loopback transport
// only links ranks of one host, so those worlds let the registry pick TCP between "hosts".

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/catch.h"
#include "world/reference.h"
#include "world/world.h"

using namespace braid;
using algorithms::Collective;
using braid::testing::WorldOptions;

namespace {

const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,   DataType::kUint32,
                              DataType::kInt64,   DataType::kUint64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64, DataType::kInt16,   DataType::kUint16,
                              DataType::kFloat8E4M3, DataType::kFloat8E5M2};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                            ReduceOp::kAvg, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
constexpr size_t kBig = (size_t{1} << 20) + 3;

struct Case {
  size_t count;
  DataType dt;
  ReduceOp op;
  bool inPlace;
  int root;
};

std::vector<size_t> smallCounts(int n) {
  std::set<size_t> s = {0, 1, static_cast<size_t>(n > 1 ? n - 1 : 0), 7, 1023};
  return {s.begin(), s.end()};
}

// Every dtype x op (bitwise on integers only) x in place, for the small counts; `full`
// false keeps two counts and every other combination, for the larger rank counts.
std::vector<Case> reductionCases(int n, bool full, const std::vector<int>& roots) {
  std::vector<Case> cases;
  std::vector<size_t> counts = full ? smallCounts(n) : std::vector<size_t>{static_cast<size_t>(n - 1), 1023};
  size_t k = 0;
  for (size_t count : counts)
    for (DataType dt : kAllTypes)
      for (ReduceOp op : kAllOps) {
        if (isBitwiseOp(op) && isFloatType(dt)) continue;
        for (bool ip : {false, true}) {
          if (!full && (k++ % 2)) continue;
          cases.push_back({count, dt, op, ip, roots[(cases.size() / 2) % roots.size()]});
        }
      }
  return cases;
}

// 1M+3 elements on a few dtypes and ops: many rounds and slices through the FIFOs.
std::vector<Case> bigCases(const std::vector<int>& roots) {
  return {{kBig, DataType::kFloat32, ReduceOp::kSum, false, roots[0]},
          {kBig, DataType::kBFloat16, ReduceOp::kAvg, true, roots.back()},
          {kBig, DataType::kInt32, ReduceOp::kBxor, true, roots[roots.size() / 2]},
          {kBig, DataType::kFloat64, ReduceOp::kMax, false, roots.back()}};
}

std::vector<int> rootsFor(int n) {
  std::set<int> s = {0, n - 1, n / 2};
  return {s.begin(), s.end()};
}

// Runs `cases` of `coll` on every rank of the world `o`; "" or the first failure.
std::string runCases(const WorldOptions& o, Collective coll, const std::vector<Case>& cases) {
  std::mutex mu;
  std::string firstError;
  auto note = [&](const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (firstError.empty()) firstError = e;
  };
  braid::testing::SharedExpected expected(cases.size());
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int rank = comm.rank();
    const int n = comm.size();
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      const size_t es = dataTypeSize(c.dt);
      const bool bcast = coll == Collective::kBroadcast;
      const int root = c.root;
      std::vector<unsigned char> in(c.count * es + 1, 0), out(c.count * es + 1, 0xAB);
      if (!bcast || rank == root)
        for (size_t i = 0; i < c.count; ++i)
          braid::testing::storeValue(c.dt, in.data(), i, braid::testing::inputValue(c.dt, c.op, bcast ? root : rank, i));
      void* dst = c.inPlace ? in.data() : out.data();
      algorithms::Request req;
      req.coll = coll;
      req.count = c.count;
      req.dtype = c.dt;
      req.op = bcast ? ReduceOp::kSum : c.op;
      req.root = root;
      req.inPlace = c.inPlace;
      Status s = comm.run(req, in.data(), dst);
      std::ostringstream where;
      where << o.algo << " n=" << n << " slot=" << o.slotBytes << " hostsOf=" << o.ranksPerHost << " rank=" << rank
            << " root=" << root << " count=" << c.count << " " << dataTypeName(c.dt) << " "
            << (bcast ? "" : reduceOpName(c.op)) << (c.inPlace ? " in-place" : " out-of-place");
      if (!s.isOk()) {
        note(where.str() + ": " + s.toString());
        return;
      }
      const bool hasResult = coll == Collective::kAllReduce || bcast || rank == root;
      if (hasResult) {
        // The root's input (broadcast) or the reduction of all inputs, computed once for the
        // ranks that have a result: all of them, or the root of a reduce.
        const std::vector<double>& want = expected.get(k, [&](std::vector<double>& v) {
          v = bcast ? braid::testing::inputRange(c.dt, c.op, root, c.count)
                    : braid::testing::expectedAllReduceRange(c.dt, c.op, n, c.count);
        });
        for (size_t i = 0; i < c.count; ++i) {
          double got = braid::testing::loadValue(c.dt, dst, i);
          if (!braid::testing::matches(c.dt, got, want[i])) {
            std::ostringstream e;
            e << where.str() << ": element " << i << " is " << got << ", expected " << want[i];
            note(e.str());
            break;
          }
        }
        expected.release(k, coll == Collective::kAllReduce || bcast ? n : 1);
      }
      // Only results may be written: nothing past the end, nothing at a reduce's non-root.
      if (!c.inPlace && out[c.count * es] != 0xAB) note(where.str() + ": wrote past the end of recvbuff");
      if (!c.inPlace && !hasResult)
        for (size_t b = 0; b < c.count * es; ++b)
          if (out[b] != 0xAB) {
            note(where.str() + ": a non-root's recvbuff was written");
            break;
          }
    }
  });
  if (!init.isOk()) return "init failed: " + init.toString();
  return firstError;
}

// One algorithm over the rank counts `ns`: the full matrix where n <= 9, a sample above,
// and the big cases with tiny slots on the rank counts in `bigNs` (they dominate the time).
void sweep(const std::string& algo, Collective coll, const std::vector<int>& ns, const std::vector<int>& bigNs,
           int ranksPerHost = 0) {
  for (int n : ns) {
    WorldOptions o;
    o.nranks = n;
    o.algo = algo;
    o.timeoutSec = 20;
    o.ranksPerHost = ranksPerHost;
    if (ranksPerHost > 0) o.transport = "";  // loopback links only ranks of one host
    std::vector<int> roots = rootsFor(n);
    std::vector<Case> cases = reductionCases(n, n <= 9, roots);
    if (coll == Collective::kBroadcast) {
      // The op does not matter: one per dtype, count and placement, every root.
      cases.clear();
      for (size_t count : smallCounts(n))
        for (DataType dt : kAllTypes)
          for (bool ip : {false, true})
            for (int root : roots) cases.push_back({count, dt, ReduceOp::kSum, ip, root});
    }
    INFO(algo << " with " << n << " ranks");
    CHECK(runCases(o, coll, cases) == "");
    if (std::find(bigNs.begin(), bigNs.end(), n) != bigNs.end()) {
      o.slotBytes = 4096;
      o.nslots = 2;
      CHECK(runCases(o, coll, bigCases(roots)) == "");
    }
  }
}

const std::vector<int> kAllN = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17};

// Inputs whose float sums depend on the order of addition: only a consistent order (or a
// broadcast of one rank's result) gives every rank the same bits.
std::string checkBitIdentical(const std::string& algo, int n, int ranksPerHost = 0) {
  WorldOptions o;
  o.nranks = n;
  o.algo = algo;
  o.timeoutSec = 20;
  o.ranksPerHost = ranksPerHost;
  if (ranksPerHost > 0) o.transport = "";
  const size_t count = 3001;
  std::mutex mu;
  std::vector<std::vector<unsigned char>> results(static_cast<size_t>(n));
  std::string firstError;
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64}) {
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const size_t es = dataTypeSize(dt);
      std::vector<unsigned char> buf(count * es);
      for (size_t i = 0; i < count; ++i)
        braid::testing::storeValue(dt, buf.data(), i, 0.1 * (comm.rank() + 1) + 1e-3 * static_cast<double>(i % 97) - 0.0371);
      algorithms::Request req;
      req.count = count;
      req.dtype = dt;
      req.inPlace = true;
      Status s = comm.run(req, buf.data(), buf.data());
      std::lock_guard<std::mutex> lock(mu);
      if (!s.isOk() && firstError.empty()) firstError = s.toString();
      results[comm.rank()] = buf;
    });
    if (!init.isOk()) return init.toString();
    if (!firstError.empty()) return firstError;
    for (int r = 1; r < n; ++r)
      if (results[r] != results[0])
        return algo + " " + dataTypeName(dt) + ": rank " + std::to_string(r) + " differs from rank 0";
  }
  return "";
}

}  // namespace

TEST_CASE("double binary tree allreduce", "[world]") {
  sweep("allreduce:tree", Collective::kAllReduce, kAllN, {3, 8, 13});
}
TEST_CASE("rabenseifner allreduce", "[world]") {
  sweep("allreduce:rabenseifner", Collective::kAllReduce, kAllN, {5, 12});
}
TEST_CASE("direct allreduce", "[world]") { sweep("allreduce:direct", Collective::kAllReduce, kAllN, {2, 4}); }
TEST_CASE("two-shot allreduce", "[world]") { sweep("allreduce:two_shot", Collective::kAllReduce, kAllN, {3, 7}); }

TEST_CASE("hierarchical allreduce on one host and on one rank per host", "[world]") {
  sweep("allreduce:hierarchical", Collective::kAllReduce, {1, 4, 7}, {4});
  sweep("allreduce:hierarchical", Collective::kAllReduce, {2, 5}, {}, /*ranksPerHost=*/1);
}
TEST_CASE("hierarchical allreduce on several hosts", "[world]") {
  sweep("allreduce:hierarchical", Collective::kAllReduce, {4, 6, 9}, {6}, /*ranksPerHost=*/2);
  sweep("allreduce:hierarchical", Collective::kAllReduce, {8, 13}, {8}, /*ranksPerHost=*/3);
}

TEST_CASE("tree broadcast", "[world]") { sweep("broadcast:tree", Collective::kBroadcast, kAllN, {4, 9}); }
TEST_CASE("tree reduce", "[world]") { sweep("reduce:tree", Collective::kReduce, kAllN, {5, 16}); }
TEST_CASE("chain reduce", "[world]") { sweep("reduce:chain", Collective::kReduce, kAllN, {2, 7}); }

TEST_CASE("chain reduce on several channels", "[world]") {
  // Channels split the buffer, each around its own ring.
  for (int n : {3, 6}) {
    WorldOptions o;
    o.nranks = n;
    o.nchannels = 3;
    o.algo = "reduce:chain";
    o.timeoutSec = 20;
    o.slotBytes = 4096;
    o.nslots = 2;
    INFO("chain reduce with " << n << " ranks and 3 channels");
    std::vector<Case> cases = reductionCases(n, /*full=*/false, rootsFor(n));
    for (const Case& c : bigCases(rootsFor(n))) cases.push_back(c);
    CHECK(runCases(o, Collective::kReduce, cases) == "");
  }
}

TEST_CASE("allreduce results are bit-identical on every rank", "[world]") {
  for (const char* algo : {"allreduce:tree", "allreduce:rabenseifner", "allreduce:direct", "allreduce:two_shot",
                           "allreduce:hierarchical"})
    for (int n : {3, 5, 8, 13}) {
      INFO(algo << " with " << n << " ranks");
      CHECK(checkBitIdentical(algo, n) == "");
    }
  CHECK(checkBitIdentical("allreduce:hierarchical", 8, /*ranksPerHost=*/3) == "");
}

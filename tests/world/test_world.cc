// Ring allreduce and chain broadcast in the in-process world, for every rank count 1..9,
// several channel counts and slot sizes, counts from 0 to 1M+3, every dtype and op, in
// place and out of place. Every element is compared with an independently computed value.

#include <atomic>
#include <mutex>
#include <sstream>
#include <vector>

#include "support/catch.h"
#include "world/reference.h"
#include "world/world.h"

using namespace braid;
using braid::testing::WorldOptions;

namespace {

const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,   DataType::kUint32,
                              DataType::kInt64,   DataType::kUint64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64, DataType::kInt16,   DataType::kUint16,
                              DataType::kFloat8E4M3, DataType::kFloat8E5M2};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

struct Case {
  size_t count;
  DataType dt;
  ReduceOp op;
  bool inPlace;
};

std::vector<Case> allreduceCases(bool big) {
  std::vector<Case> cases;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}})
    for (DataType dt : kAllTypes)
      for (ReduceOp op : kAllOps)
        for (bool ip : {false, true}) cases.push_back({count, dt, op, ip});
  if (big) {
    // 1M+3 elements: every type once with sum, the other ops on float32 and bfloat16.
    for (DataType dt : kAllTypes) cases.push_back({(1u << 20) + 3, dt, ReduceOp::kSum, dt == DataType::kInt32});
    for (ReduceOp op : kAllOps)
      for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) cases.push_back({(1u << 20) + 3, dt, op, op == ReduceOp::kAvg});
  }
  return cases;
}

// Runs every case on every rank; returns a description of the first mismatch, or "".
std::string runAllReduceCases(const WorldOptions& o, const std::vector<Case>& cases) {
  std::mutex mu;
  std::string firstError;
  auto note = [&](const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (firstError.empty()) firstError = e;
  };
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int rank = comm.rank();
    for (const Case& c : cases) {
      size_t es = dataTypeSize(c.dt);
      std::vector<unsigned char> in(c.count * es + 1), out(c.count * es + 1, 0xAB);
      for (size_t i = 0; i < c.count; ++i) braid::testing::storeValue(c.dt, in.data(), i, braid::testing::inputValue(c.dt, c.op, rank, i));
      void* dst = c.inPlace ? in.data() : out.data();
      algorithms::Request req;
      req.coll = algorithms::Collective::kAllReduce;
      req.count = c.count;
      req.dtype = c.dt;
      req.op = c.op;
      req.inPlace = c.inPlace;
      Status s = comm.run(req, in.data(), dst);
      std::ostringstream where;
      where << "n=" << o.nranks << " ch=" << o.nchannels << " slot=" << o.slotBytes << " rank=" << rank
            << " count=" << c.count << " " << dataTypeName(c.dt) << " " << reduceOpName(c.op)
            << (c.inPlace ? " in-place" : " out-of-place");
      if (!s.isOk()) {
        note(where.str() + ": " + s.toString());
        return;
      }
      for (size_t i = 0; i < c.count; ++i) {
        double got = braid::testing::loadValue(c.dt, dst, i);
        double want = braid::testing::expectedAllReduce(c.dt, c.op, o.nranks, i);
        if (!braid::testing::matches(c.dt, got, want)) {
          std::ostringstream e;
          e << where.str() << ": element " << i << " is " << got << ", expected " << want;
          note(e.str());
          break;
        }
      }
      // The byte past the end must be untouched.
      if (!c.inPlace && out[c.count * es] != 0xAB) note(where.str() + ": wrote past the end of recvbuff");
    }
  });
  if (!init.isOk()) return "init failed: " + init.toString();
  return firstError;
}

std::string runBroadcastCases(const WorldOptions& o) {
  std::mutex mu;
  std::string firstError;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int rank = comm.rank();
    const int n = comm.size();
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{(1u << 20) + 3}})
      for (DataType dt : {DataType::kInt8, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64})
        for (int root : {0, n - 1, n / 2})
          for (bool ip : {false, true}) {
            size_t es = dataTypeSize(dt);
            std::vector<unsigned char> in(count * es), out(count * es, 0);
            for (size_t i = 0; i < count; ++i)
              braid::testing::storeValue(dt, in.data(), i, braid::testing::inputValue(dt, ReduceOp::kSum, root, i));
            if (rank != root) std::fill(in.begin(), in.end(), 0);
            void* dst = ip ? in.data() : out.data();
            algorithms::Request req;
            req.coll = algorithms::Collective::kBroadcast;
            req.count = count;
            req.dtype = dt;
            req.root = root;
            req.inPlace = ip;
            Status s = comm.run(req, in.data(), dst);
            std::ostringstream where;
            where << "broadcast n=" << n << " ch=" << o.nchannels << " rank=" << rank << " root=" << root
                  << " count=" << count << " " << dataTypeName(dt) << (ip ? " in-place" : "");
            if (!s.isOk()) {
              std::lock_guard<std::mutex> lock(mu);
              if (firstError.empty()) firstError = where.str() + ": " + s.toString();
              return;
            }
            for (size_t i = 0; i < count; ++i) {
              double got = braid::testing::loadValue(dt, dst, i);
              double want = braid::testing::inputValue(dt, ReduceOp::kSum, root, i);
              if (got != want) {
                std::lock_guard<std::mutex> lock(mu);
                if (firstError.empty())
                  firstError = where.str() + ": element " + std::to_string(i) + " is " + std::to_string(got) +
                               ", expected " + std::to_string(want);
                break;
              }
            }
          }
  });
  if (!init.isOk()) return "init failed: " + init.toString();
  return firstError;
}

void allreduceWorlds(int lo, int hi) {
  for (int n = lo; n <= hi; ++n) {
    for (int ch : {1, 2, 3}) {
      WorldOptions o;
      o.nranks = n;
      o.nchannels = ch;
      // Small slots and shallow FIFOs force many slices and rounds per step.
      o.slotBytes = ch == 2 ? 4096 : 64 * 1024;
      o.nslots = ch == 2 ? 2 : 4;
      INFO("nranks " << n << " channels " << ch);
      CHECK(runAllReduceCases(o, allreduceCases(/*big=*/ch != 3)) == "");
    }
  }
}

}  // namespace

TEST_CASE("ring allreduce with 1-3 ranks", "[world]") { allreduceWorlds(1, 3); }

TEST_CASE("over ucx, zero copy: allreduce (ring, tree, recursive doubling) and chain broadcast, 2-4 ranks", "[world][ucx]") {
  // UCX's ring connections send from and receive into the callers' buffers; in place,
  // a sent range is rewritten later in the same call, which must not reach the wire.
  if (!braid::testing::transportAvailable("ucx")) {
    WARN("skipped: no ucx transport plugin in this build");
    return;
  }
  for (int n = 2; n <= 4; ++n) {
    for (const char* algo : {"allreduce:ring", "allreduce:tree", "allreduce:recursive_doubling"}) {
      WorldOptions o;
      o.nranks = n;
      o.nchannels = 2;
      o.transport = "ucx";
      o.algo = algo;
      o.slotBytes = 64 * 1024;
      o.nslots = 4;
      o.timeoutSec = 60;
      INFO("nranks " << n << " " << algo);
      std::vector<Case> cases;
      for (bool ip : {false, true}) {
        cases.push_back({(1u << 20) + 3, DataType::kFloat32, ReduceOp::kSum, ip});
        cases.push_back({(1u << 18) + 1, DataType::kBFloat16, ReduceOp::kAvg, ip});
        cases.push_back({300001, DataType::kInt32, ReduceOp::kMax, ip});
        cases.push_back({1023, DataType::kFloat64, ReduceOp::kProd, ip});
      }
      CHECK(runAllReduceCases(o, cases) == "");
    }
    WorldOptions b;
    b.nranks = n;
    b.transport = "ucx";
    b.slotBytes = 64 * 1024;
    b.nslots = 4;
    b.timeoutSec = 60;
    CHECK(runBroadcastCases(b) == "");
  }
}
TEST_CASE("ring allreduce with 4-6 ranks", "[world]") { allreduceWorlds(4, 6); }
TEST_CASE("ring allreduce with 7-9 ranks", "[world]") { allreduceWorlds(7, 9); }

TEST_CASE("chain broadcast with 1-9 ranks", "[world]") {
  for (int n = 1; n <= 9; ++n)
    for (int ch : {1, 2}) {
      WorldOptions o;
      o.nranks = n;
      o.nchannels = ch;
      o.slotBytes = 8192;
      o.nslots = 4;
      INFO("nranks " << n << " channels " << ch);
      CHECK(runBroadcastCases(o) == "");
    }
}

TEST_CASE("collectives issued in a different order fail cleanly on every rank", "[world]") {
  WorldOptions o;
  o.nranks = 3;
  o.timeoutSec = 20;
  std::atomic<int> mismatches{0};
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    std::vector<float> buf(1000, 1.0f);
    algorithms::Request req;
    req.coll = algorithms::Collective::kAllReduce;
    req.count = comm.rank() == 1 ? 999 : 1000;  // rank 1 disagrees on the count
    req.dtype = DataType::kFloat32;
    req.inPlace = true;
    Status s = comm.run(req, buf.data(), buf.data());
    if (!s.isOk() && s.code() == Code::kInvalidArgument && s.message().find("mismatch") != std::string::npos) ++mismatches;
    else if (!s.isOk()) ++mismatches;  // a peer's report of the mismatch
  });
  REQUIRE(init.isOk());
  CHECK(mismatches.load() == 3);
}

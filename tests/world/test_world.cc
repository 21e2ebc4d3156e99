// Ring allreduce and chain broadcast in the in-process world, for every rank count 1..9,
// several channel counts and slot sizes, counts from 0 to 1M+3, every dtype and op, in
// place and out of place. Every element is compared with an independently computed value.

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/core_yield.h"
#include "support/busy_core.h"
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
  braid::testing::SharedExpected expected(cases.size());
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int rank = comm.rank();
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
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
      const std::vector<double>& want = expected.get(k, [&](std::vector<double>& v) {
        v = braid::testing::expectedAllReduceRange(c.dt, c.op, o.nranks, c.count);
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
      expected.release(k, o.nranks);
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
  const size_t kCounts[] = {0, 1, 7, 1023, (1u << 20) + 3};
  const DataType kTypes[] = {DataType::kInt8, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  // The root's values of each (count, dtype, root), shared by the in-place and the
  // out-of-place case.
  braid::testing::SharedExpected expected(std::size(kCounts) * std::size(kTypes) * 3);
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int rank = comm.rank();
    const int n = comm.size();
    size_t k = 0;
    for (size_t count : kCounts)
      for (DataType dt : kTypes)
        for (int root : {0, n - 1, n / 2}) {
          const std::vector<double>& want = expected.get(
              k, [&](std::vector<double>& v) { v = braid::testing::inputRange(dt, ReduceOp::kSum, root, count); });
          for (bool ip : {false, true}) {
            size_t es = dataTypeSize(dt);
            std::vector<unsigned char> in(count * es, 0), out(count * es, 0);
            if (rank == root)
              for (size_t i = 0; i < count; ++i) braid::testing::storeValue(dt, in.data(), i, want[i]);
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
              if (got != want[i]) {
                std::lock_guard<std::mutex> lock(mu);
                if (firstError.empty())
                  firstError = where.str() + ": element " + std::to_string(i) + " is " + std::to_string(got) +
                               ", expected " + std::to_string(want[i]);
                break;
              }
            }
          }
          expected.release(k++, n);
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

TEST_CASE("ring allreduce with 5 and 8 ranks and FIFOs of 2 slots", "[world]") {
  // Every round's part is one slot, so the next round's send that runs ahead of a round's
  // last receive fills the FIFO: a ring that did not fit would hang here.
  for (int n : {5, 8}) {
    WorldOptions o;
    o.nranks = n;
    o.nchannels = 2;
    o.slotBytes = 4096;
    o.nslots = 2;
    o.timeoutSec = 30;
    o.algo = "allreduce:ring";
    std::vector<Case> cases;
    for (bool ip : {false, true}) {
      cases.push_back({(1u << 18) + 3, DataType::kFloat32, ReduceOp::kSum, ip});
      cases.push_back({100003, DataType::kBFloat16, ReduceOp::kAvg, ip});
      cases.push_back({77777, DataType::kInt8, ReduceOp::kMax, ip});
    }
    INFO("nranks " << n);
    CHECK(runAllReduceCases(o, cases) == "");
  }
}

TEST_CASE("over ucx, ring allreduce with a FIFO of 16 slots whose credits come back in batches", "[world][ucx]") {
  // UCX returns a receiver's releases every nslots/4: a rank whose next round's send runs
  // ahead finds its FIFO full of messages released but not yet credited, unless the
  // receiver, waiting to send itself, returns what it owes.
  if (!braid::testing::transportAvailable("ucx")) {
    WARN("skipped: no ucx transport plugin in this build");
    return;
  }
  for (int n : {2, 3}) {
    WorldOptions o;
    o.nranks = n;
    o.nchannels = 1;
    o.transport = "ucx";
    o.slotBytes = 4096;
    o.nslots = 16;
    o.timeoutSec = 20;
    o.algo = "allreduce:ring";
    std::vector<Case> cases;
    // Rounds of 7 slices (of 8 at most): what a receiver has released when both ranks
    // run ahead is not a whole number of batches.
    for (size_t perRank : {13312, 20000, 28572})
      for (bool ip : {false, true})
        cases.push_back({perRank * static_cast<size_t>(n) + 1, DataType::kFloat32, ReduceOp::kSum, ip});
    INFO("nranks " << n);
    CHECK(runAllReduceCases(o, cases) == "");
  }
}

namespace {

// Transports that send from the callers' buffers (ucx, tcp): in place, a sent range is
// rewritten later in the same call, which must not reach the wire, while a reduction's
// result may go out from where an earlier step of the channel wrote it. Slots of 256 KiB,
// UCX's on one host: its messages above 64 KiB go by rendezvous, so the receiver reads the
// sender's memory late, when a later step's write would show.
void zeroCopyWorlds(const char* transport) {
  const size_t slotBytes = 256 * 1024;
  for (int n = 2; n <= 4; ++n) {
    for (const char* algo : {"allreduce:ring", "allreduce:tree", "allreduce:recursive_doubling",
                             "allreduce:rabenseifner", "allreduce:direct", "allreduce:two_shot"}) {
      WorldOptions o;
      o.nranks = n;
      o.nchannels = 2;
      o.transport = transport;
      o.algo = algo;
      o.slotBytes = slotBytes;
      o.nslots = 4;
      o.timeoutSec = 60;
      INFO(transport << ", nranks " << n << " " << algo << ", slots of " << slotBytes);
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
    b.transport = transport;
    b.slotBytes = 64 * 1024;
    b.nslots = 4;
    b.timeoutSec = 60;
    CHECK(runBroadcastCases(b) == "");
  }
}

}  // namespace

TEST_CASE("over ucx, zero copy: every allreduce algorithm and chain broadcast, 2-4 ranks", "[world][ucx]") {
  if (!braid::testing::transportAvailable("ucx")) {
    WARN("skipped: no ucx transport plugin in this build");
    return;
  }
  zeroCopyWorlds("ucx");
}

TEST_CASE("over tcp, zero copy: every allreduce algorithm and chain broadcast, 2-4 ranks", "[world]") {
  zeroCopyWorlds("tcp");
}

TEST_CASE("a loop over several shapes plans each once, and one the cache let go again", "[world]") {
  WorldOptions o;
  o.nranks = 3;
  std::mutex mu;
  std::vector<std::string> errors;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int n = comm.size();
    auto fail = [&](const std::string& what) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back("rank " + std::to_string(comm.rank()) + ": " + what);
    };
    // Each rank contributes rank + 1 + i at element i: the sum is n(n+1)/2 + n*i.
    auto allreduce = [&](size_t count) {
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(comm.rank() + 1 + static_cast<int>(i % 64));
      algorithms::Request req;
      req.coll = algorithms::Collective::kAllReduce;
      req.count = count;
      req.dtype = DataType::kFloat32;
      req.op = ReduceOp::kSum;
      Status s = comm.run(req, in.data(), out.data());
      if (!s.isOk()) return fail("count " + std::to_string(count) + ": " + s.toString());
      for (size_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 64));
        if (out[i] != want) {
          return fail("count " + std::to_string(count) + ": element " + std::to_string(i) + " is " +
                      std::to_string(out[i]) + ", expected " + std::to_string(want));
        }
      }
    };
    const uint64_t before = comm.plansMade();
    // Three shapes in turn, as gradient buckets of different sizes and a scalar would come.
    for (int round = 0; round < 20; ++round)
      for (size_t count : {size_t{1}, size_t{4096}, size_t{100000}}) allreduce(count);
    if (comm.plansMade() - before != 3) fail("3 shapes took " + std::to_string(comm.plansMade() - before) + " plans");
    // More shapes than the cache keeps: the oldest, count 1, goes; the newest stays.
    for (size_t count = 200; count < 270; ++count) allreduce(count);
    if (comm.plansMade() - before != 73) fail("73 shapes took " + std::to_string(comm.plansMade() - before) + " plans");
    allreduce(269);
    allreduce(1);
    if (comm.plansMade() - before != 74) {
      fail("after count 269 again and count 1 again: " + std::to_string(comm.plansMade() - before) +
           " plans, expected 74");
    }
  });
  REQUIRE(init.isOk());
  for (const std::string& e : errors) INFO(e);
  CHECK(errors.empty());
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

// Each rank's error, by rank, from one run of `body`.
std::vector<std::string> errorsOf(const WorldOptions& o, const std::function<Status(core::Communicator&)>& body,
                                  std::vector<double>* seconds = nullptr) {
  std::vector<std::string> errors(static_cast<size_t>(o.nranks));
  if (seconds) seconds->assign(static_cast<size_t>(o.nranks), 0);
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    auto t0 = std::chrono::steady_clock::now();
    Status s = body(comm);
    if (seconds)
      (*seconds)[comm.rank()] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    errors[comm.rank()] = s.isOk() ? "" : s.toString();
  });
  REQUIRE(init.isOk());
  return errors;
}

TEST_CASE("a count mismatch names both ranks' calls, decoded, within seconds", "[world]") {
  for (const char* transport : {"loopback", "shm", "tcp"}) {
    INFO(transport);
    WorldOptions o;
    o.nranks = 3;
    o.timeoutSec = 30;
    o.transport = transport;
    std::vector<double> seconds;
    auto errors = errorsOf(o, [](core::Communicator& comm) {
      std::vector<float> buf(1000, 1.0f);
      algorithms::Request req;
      req.coll = algorithms::Collective::kAllReduce;
      req.count = comm.rank() == 1 ? 999 : 1000;  // rank 1 disagrees on the count
      req.dtype = DataType::kFloat32;
      req.inPlace = true;
      return comm.run(req, buf.data(), buf.data());
    }, &seconds);
    for (int r = 0; r < o.nranks; ++r) {
      INFO("rank " << r << ": " << errors[r]);
      CHECK(!errors[r].empty());
      CHECK(seconds[r] < 10);
      // Every error, found here or reported by a peer, shows both calls.
      CHECK(errors[r].find("rank 1: #0 allreduce count=999 float sum") != std::string::npos);
      CHECK(errors[r].find("allreduce count=1000 float sum") != std::string::npos);
    }
  }
}

TEST_CASE("a root mismatch and a different collective are decoded too", "[world]") {
  WorldOptions o;
  o.nranks = 2;
  o.timeoutSec = 30;
  // Rank 1 runs a reduce where rank 0 runs an allreduce of the same size.
  auto errors = errorsOf(o, [](core::Communicator& comm) {
    std::vector<float> in(4096, 1.0f), out(4096, 0.0f);
    algorithms::Request req;
    req.coll = comm.rank() == 1 ? algorithms::Collective::kReduce : algorithms::Collective::kAllReduce;
    req.count = 4096;
    req.dtype = DataType::kFloat32;
    req.root = 1;
    return comm.run(req, in.data(), out.data());
  });
  bool decoded = false;
  for (const auto& e : errors) {
    INFO(e);
    CHECK(!e.empty());
    if (e.find("reduce count=4096 float sum root=1") != std::string::npos &&
        e.find("allreduce count=4096 float sum") != std::string::npos)
      decoded = true;
  }
  CHECK(decoded);
}

// Point-to-point calls carry no sequence number and publish no call: the error says what
// they are from their tag, at once, rather than waiting for a record that never comes.
TEST_CASE("a send or receive where the peer runs a collective is decoded as point-to-point", "[world]") {
  for (const char* transport : {"loopback", "tcp", "ucx"})
  for (bool sends : {true, false}) {
    if (std::string(transport) == "ucx" && !braid::testing::transportAvailable("ucx")) {
      WARN("ucx skipped: no ucx transport plugin in this build");
      break;
    }
    INFO(transport << (sends ? ": rank 0 sends" : ": rank 0 receives"));
    WorldOptions o;
    o.nranks = 2;
    o.transport = transport;
    o.timeoutSec = 30;
    std::vector<double> seconds;
    auto errors = errorsOf(
        o,
        [&](core::Communicator& comm) {
          std::vector<uint32_t> buf(10, 1);
          if (comm.rank() == 0) {
            // A send goes out eagerly and returns. Rank 0's allreduce may still complete with
            // the data rank 1 sent before it met the send; rank 0 then learns of the failure
            // at a later call.
            algorithms::Request p2p;
            p2p.coll = algorithms::Collective::kSendRecv;
            p2p.dtype = DataType::kUint32;
            p2p.p2p = {{sends, 1, 10}};
            Status s = comm.run(p2p, nullptr, nullptr, {buf.data()});
            if (!s.isOk()) return s;
          }
          algorithms::Request req;
          req.coll = algorithms::Collective::kAllReduce;
          req.dtype = DataType::kUint32;
          req.count = 10;
          return comm.run(req, buf.data(), buf.data());
        },
        &seconds);
    bool decoded = false;
    for (size_t r = 0; r < errors.size(); ++r) {
      INFO("rank " << r << ": " << errors[r]);
      decoded = decoded || (errors[r].find("rank 0: sends and receives (a point-to-point call)") != std::string::npos &&
                            errors[r].find("rank 1: #0 allreduce count=10 uint32 sum") != std::string::npos);
      CHECK(seconds[r] < 10);  // far from the timeout
    }
    CHECK(errors[1] != "");  // rank 1's allreduce met rank 0's point-to-point call
    CHECK(decoded);
  }
}

// A call as the sweep below issues it.
struct Call {
  algorithms::Collective coll;
  int root;
  const char* text;  // as the error decodes it
};

// Runs `call` with `count` floats a rank (buffers large enough for any collective).
Status runCall(core::Communicator& comm, const Call& call, size_t count) {
  const size_t n = static_cast<size_t>(comm.size());
  std::vector<float> in(n * count, 1.0f), out(n * count, 0.0f);
  algorithms::Request req;
  req.coll = call.coll;
  req.count = count;
  req.dtype = DataType::kFloat32;
  req.root = call.root;
  return comm.run(req, in.data(), out.data());
}

// Each rank's errors from its call (`callOf(rank)`, 1000 floats) and from the allreduce it
// issues next, and the seconds both took.
struct TwoCalls {
  std::vector<std::string> first, next;
  std::vector<double> seconds;
};
TwoCalls runTwoCalls(const WorldOptions& o, const std::function<Call(int)>& callOf) {
  TwoCalls t;
  t.first.resize(static_cast<size_t>(o.nranks));
  t.next.resize(static_cast<size_t>(o.nranks));
  t.seconds.resize(static_cast<size_t>(o.nranks));
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank();
    auto t0 = std::chrono::steady_clock::now();
    Status s = runCall(comm, callOf(r), 1000);
    t.first[r] = s.isOk() ? "" : s.toString();
    // The next call: everyone agrees on it, but the communicator is broken by now.
    Status s2 = runCall(comm, Call{algorithms::Collective::kAllReduce, 0, "allreduce"}, 1000);
    t.next[r] = s2.isOk() ? "" : s2.toString();
    t.seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  REQUIRE(init.isOk());
  return t;
}

// Every pair of calls where one rank issues another collective (or another root) than the
// rest, among them calls in which that rank, or the others, only send: the rank with the odd
// call fails at that call, so does every rank whose result it spoils, each within seconds
// (the timeout is 30 s) and with both calls decoded; the few whose own result was complete
// learn at their next call, also within seconds.
TEST_CASE("a rank that only sends in its call still sees a mismatched peer at that call", "[world]") {
  using C = algorithms::Collective;
  const Call kBcast0{C::kBroadcast, 0, "broadcast count=1000 float root=0"};
  const Call kBcast2{C::kBroadcast, 2, "broadcast count=1000 float root=2"};
  const Call kReduce0{C::kReduce, 0, "reduce count=1000 float sum root=0"};
  const Call kReduce3{C::kReduce, 3, "reduce count=1000 float sum root=3"};
  const Call kAllreduce{C::kAllReduce, 0, "allreduce count=1000 float sum"};
  const Call kScatter0{C::kScatter, 0, "scatter count=1000 float root=0"};
  const Call kGather1{C::kGather, 1, "gather count=1000 float root=1"};
  const Call kGather2{C::kGather, 2, "gather count=1000 float root=2"};
  struct Pair {
    Call others, odd;
    int oddRank;
  };
  const Pair pairs[] = {
      {kAllreduce, kBcast0, 0},  // the odd rank is a broadcast's root: it only sends
      {kBcast0, kAllreduce, 1},
      {kBcast0, kBcast2, 2},     // a root mismatch: the odd rank thinks it is the root
      {kBcast2, kBcast0, 3},
      {kBcast0, kReduce0, 0},    // the root only sends in one call and only receives in the other
      {kReduce0, kReduce3, 3},   // the leaves only send
      {kReduce3, kGather2, 1},
      {kScatter0, kBcast0, 2},
      {kGather1, kGather2, 0},
      {kAllreduce, kReduce0, 3},
  };
  for (const char* transport : {"loopback", "shm", "tcp", "ucx"}) {
    if (std::string(transport) == "ucx" && !braid::testing::transportAvailable("ucx")) {
      WARN("ucx skipped: no ucx transport plugin in this build");
      continue;
    }
    for (const Pair& pair : pairs) {
      INFO(transport << ": rank " << pair.oddRank << " runs " << pair.odd.text << " while the others run "
                     << pair.others.text);
      WorldOptions o;
      o.nranks = 4;
      o.timeoutSec = 30;
      o.transport = transport;
      TwoCalls t = runTwoCalls(o, [&](int r) { return r == pair.oddRank ? pair.odd : pair.others; });
      const auto& first = t.first;
      const auto& next = t.next;
      const auto& seconds = t.seconds;
      int failedAtCall = 0;
      for (int r = 0; r < 4; ++r) {
        INFO("rank " << r << ": " << first[r] << " / next call: " << next[r]);
        CHECK(seconds[r] < 10);
        CHECK(!next[r].empty());
        if (first[r].empty()) continue;
        ++failedAtCall;
        // Found here or reported by the peer that found it, with both calls decoded.
        CHECK(first[r].find(pair.odd.text) != std::string::npos);
        CHECK(first[r].find(pair.others.text) != std::string::npos);
      }
      INFO(failedAtCall << " of 4 ranks failed at the call");
      CHECK(!first[pair.oddRank].empty());
      CHECK(failedAtCall >= 2);
    }
  }
}

// BRAID_SEND_ACKS=0 on one rank turns acknowledgements off for all (a rank waiting for one
// its peer does not send would wait for the timeout): a broadcast's root among allreduces
// then returns from its call, as with NCCL, and fails at its next one, within seconds.
TEST_CASE("BRAID_SEND_ACKS=0 on one rank: a broadcast's root learns of a mismatch at its next call", "[world]") {
  using C = algorithms::Collective;
  const Call kBcast0{C::kBroadcast, 0, "broadcast count=1000 float root=0"};
  const Call kAllreduce{C::kAllReduce, 0, "allreduce count=1000 float sum"};
  for (int off : {0, 3}) {
    INFO("BRAID_SEND_ACKS=0 on rank " << off);
    WorldOptions o;
    o.nranks = 4;
    o.timeoutSec = 30;
    o.noSendAcksRank = off;
    TwoCalls t = runTwoCalls(o, [&](int r) { return r == 0 ? kBcast0 : kAllreduce; });
    const auto& first = t.first;
    const auto& next = t.next;
    const auto& seconds = t.seconds;
    CHECK(first[0].empty());  // only sent: no acknowledgement to wait for
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << first[r] << " / next call: " << next[r]);
      CHECK(seconds[r] < 10);
      CHECK(!next[r].empty());
      if (r > 0) CHECK(!first[r].empty());
    }
  }
}

// Over UCX an allgather's steps go whole (a message larger than a slot) on the rings while a
// small allreduce runs on the mesh: each rank's long wait looks at the other set without
// committing the message it finds (Connection::peekTag), so both calls are decoded within
// seconds, not at the timeout, and no whole block is cut to a slot's size.
TEST_CASE("over ucx with whole blocks, a collective on the other connection set is decoded too", "[world][ucx]") {
  if (!braid::testing::transportAvailable("ucx")) {
    WARN("skipped: no ucx transport plugin in this build");
    return;
  }
  WorldOptions o;
  o.nranks = 2;
  o.timeoutSec = 30;
  o.transport = "ucx";
  std::vector<double> seconds;
  auto errors = errorsOf(o, [](core::Communicator& comm) {
    const size_t block = size_t{1} << 20;  // 4 MiB of floats a rank: whole blocks above the slot
    std::vector<float> in(block, 1.0f), out(2 * block, 0.0f);
    algorithms::Request req;
    req.dtype = DataType::kFloat32;
    if (comm.rank() == 0) {
      req.coll = algorithms::Collective::kAllGather;
      req.count = block;
    } else {
      req.coll = algorithms::Collective::kAllReduce;
      req.count = 1024;
    }
    return comm.run(req, in.data(), out.data());
  }, &seconds);
  for (int r = 0; r < o.nranks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(!errors[r].empty());
    CHECK(seconds[r] < 10);
    CHECK(errors[r].find("allgather count=1048576 float") != std::string::npos);
    CHECK(errors[r].find("allreduce count=1024 float sum") != std::string::npos);
  }
}

// A rank ahead by one call: rank 1 waits over a second in a point-to-point group for rank 2
// (late), while rank 0, done with its part, already sends rank 1 its alltoall block, a whole
// block larger than a slot, on the same connection. The long wait's look for a mismatched call
// must not commit that message to a slot-sized receive: the alltoall then lands whole.
TEST_CASE("over ucx with whole blocks, a long wait's look leaves a peer's next block whole", "[world][ucx]") {
  if (!braid::testing::transportAvailable("ucx")) {
    WARN("skipped: no ucx transport plugin in this build");
    return;
  }
  WorldOptions o;
  o.nranks = 3;
  o.timeoutSec = 30;
  o.transport = "ucx";
  auto errors = errorsOf(o, [](core::Communicator& comm) {
    const int r = comm.rank();
    uint32_t a = 100 + static_cast<uint32_t>(r), b = 0, c = 0;
    algorithms::Request g;
    g.coll = algorithms::Collective::kSendRecv;
    g.dtype = DataType::kUint32;
    Status s;
    if (r == 0) {
      g.p2p = {{true, 1, 1}, {false, 1, 1}};
      s = comm.run(g, nullptr, nullptr, {&a, &b});
    } else if (r == 1) {
      g.p2p = {{false, 0, 1}, {true, 0, 1}, {false, 2, 1}};
      s = comm.run(g, nullptr, nullptr, {&b, &a, &c});
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1200));
      g.p2p = {{true, 1, 1}};
      s = comm.run(g, nullptr, nullptr, {&a});
    }
    if (!s.isOk()) return s;
    const size_t block = size_t{1} << 20;  // 4 MiB to each peer: above the mesh's slot
    std::vector<float> in(3 * block), out(3 * block, 0.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r * 10 + static_cast<int>(i / block));
    algorithms::Request t;
    t.coll = algorithms::Collective::kAllToAll;
    t.dtype = DataType::kFloat32;
    t.count = block;
    s = comm.run(t, in.data(), out.data());
    if (!s.isOk()) return s;
    // Block j of the output is block r of rank j's input.
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != static_cast<float>(static_cast<int>(i / block) * 10 + r))
        return internalError("element " + std::to_string(i) + " is wrong");
    return Status::ok();
  });
  for (int r = 0; r < o.nranks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

TEST_CASE("BRAID_DEBUG_DUMP writes each rank's flight recorder on a failure", "[world]") {
  char tmpl[] = "/tmp/braid-dump-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  WorldOptions o;
  o.nranks = 2;
  o.timeoutSec = 30;
  o.debugDump = dir;
  auto errors = errorsOf(o, [](core::Communicator& comm) {
    std::vector<int32_t> buf(64, 1);
    algorithms::Request req;
    req.coll = algorithms::Collective::kAllReduce;
    req.dtype = DataType::kInt32;
    req.inPlace = true;
    req.count = 64;
    for (int i = 0; i < 3; ++i) {
      Status s = comm.run(req, buf.data(), buf.data());
      if (!s.isOk()) return s;
    }
    req.count = comm.rank() == 0 ? 64 : 32;  // the fourth call disagrees
    return comm.run(req, buf.data(), buf.data());
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(!errors[r].empty());
    std::ifstream txt(dir + "/braid-rank" + std::to_string(r) + ".txt");
    REQUIRE(txt.good());
    std::stringstream t;
    t << txt.rdbuf();
    INFO(t.str());
    CHECK(t.str().find("rank " + std::to_string(r) + " of 2") != std::string::npos);
    CHECK(t.str().find("collective mismatch") != std::string::npos);
    CHECK(t.str().find("last completed: #2 allreduce count=64 int32 sum") != std::string::npos);
    CHECK(t.str().find("#3 allreduce count=" + std::string(r == 0 ? "64" : "32") + " int32 sum") !=
          std::string::npos);
    CHECK(t.str().find("state=failed") != std::string::npos);
    std::ifstream js(dir + "/braid-rank" + std::to_string(r) + ".json");
    REQUIRE(js.good());
    std::stringstream j;
    j << js.rdbuf();
    CHECK(j.str().find("\"rank\": " + std::to_string(r)) != std::string::npos);
    CHECK(j.str().find("\"state\": \"done\"") != std::string::npos);
    CHECK(j.str().find("\"last_completed\": \"#2 allreduce") != std::string::npos);
  }
  std::system(("rm -rf " + dir).c_str());
}

// Every rank's thread on one core beside a thread that never waits: the ranks' yields keep
// losing the core to it, and yields pause (common/core_yield.h); the waits then sleep, and
// the allreduces stay right. The ranks have a core each as the communicator counts them
// (they are pinned only after it is made), so their policy pauses yields.
TEST_CASE("ranks beside a busy thread on their core pause their yields, and their allreduces stay right",
          "[world]") {
  resetYieldPause();
  const uint64_t pausesBefore = yieldPausesStarted();
  braid::testing::BusyCore busy;
  std::mutex mu;
  std::vector<std::string> errors;
  std::atomic<int> calls{0};
  WorldOptions o;
  o.nranks = 2;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    auto fail = [&](const std::string& what) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back("rank " + std::to_string(comm.rank()) + ": " + what);
    };
    if (!busy.pinHere()) fail("could not pin the rank's thread");
    const size_t count = 16384;
    std::vector<float> in(count + 1), out(count + 1);
    // Until a pause has started (the last element, summed, says so on both ranks at once),
    // at most 2,000 calls.
    for (int i = 0; i < 2000; ++i) {
      for (size_t k = 0; k < count; ++k) in[k] = static_cast<float>(comm.rank() + 1 + static_cast<int>(k % 32));
      in[count] = yieldPausesStarted() > pausesBefore ? 1.0f : 0.0f;
      algorithms::Request req;
      req.coll = algorithms::Collective::kAllReduce;
      req.count = count + 1;
      req.dtype = DataType::kFloat32;
      req.op = ReduceOp::kSum;
      Status s = comm.run(req, in.data(), out.data());
      if (!s.isOk()) return fail("call " + std::to_string(i) + ": " + s.toString());
      for (size_t k = 0; k < count; ++k) {
        const float want = static_cast<float>(3 + 2 * static_cast<int>(k % 32));
        if (out[k] != want) {
          return fail("call " + std::to_string(i) + ": element " + std::to_string(k) + " is " +
                      std::to_string(out[k]) + ", expected " + std::to_string(want));
        }
      }
      if (comm.rank() == 0) ++calls;
      if (out[count] > 0) break;
    }
  });
  REQUIRE(init.isOk());
  for (const auto& e : errors) FAIL(e);
  INFO("calls until a pause: " << calls.load());
  CHECK(yieldPausesStarted() > pausesBefore);
  resetYieldPause();
}

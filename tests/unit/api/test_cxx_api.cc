// The C++ API as a user sees it: a caller-provided braid::Store drives rendezvous
// (Communicator::fromStore), synchronous and asynchronous collectives, and errors as
// exceptions. Ranks are threads of this process.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.hpp"
#include "support/catch.h"

namespace {

// A minimal thread-safe store, standing in for a framework's own (e.g. c10d's).
class MapStore : public braid::Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> l(mu_);
    kv_[key] = value;
    cv_.notify_all();
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, timeout, [&] { return kv_.count(key) > 0; })) throw braid::TimeoutError("no key " + key, -1);
    return kv_[key];
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> l(mu_);
    int64_t v = (kv_.count(key) ? std::stoll(kv_[key]) : 0) + delta;
    kv_[key] = std::to_string(v);
    cv_.notify_all();
    return v;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) get(k, timeout);
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& k : keys)
      if (!kv_.count(k)) return false;
    return true;
  }
  bool deleteKey(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    return kv_.erase(key) > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

// A group's view of a MapStore under a prefix, as torch's PrefixStore is, whose openRoot
// gives the MapStore itself: the live view's root.
class PrefixedStore : public braid::Store {
 public:
  PrefixedStore(std::shared_ptr<MapStore> root, std::string prefix, int hosts = -1)
      : root_(std::move(root)), prefix_(std::move(prefix)), hosts_(hosts) {}
  void set(const std::string& key, const std::string& value) override { root_->set(prefix_ + key, value); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return root_->get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return root_->add(prefix_ + key, delta); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) root_->get(prefix_ + k, timeout);
  }
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys)
      if (!root_->check({prefix_ + k})) return false;
    return true;
  }
  bool deleteKey(const std::string& key) override { return root_->deleteKey(prefix_ + key); }
  std::shared_ptr<braid::Store> openRoot(std::string* name) override {
    *name = "maproot";
    ++rootsOpened;
    return root_;
  }
  int hostsRoot() override { return hosts_; }
  static inline std::atomic<int> rootsOpened{0};

 private:
  std::shared_ptr<MapStore> root_;
  std::string prefix_;
  int hosts_;
};

template <typename F>
void onRanks(int n, F body) {
  auto store = std::make_shared<MapStore>();
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { body(store, r); });
  for (auto& t : ts) t.join();
}

}  // namespace

TEST_CASE("C++ API: fromStore, allreduce, broadcast, async Work", "[unit]") {
  setenv("BRAID_TRANSPORT", "loopback", 1);  // ranks are threads
  const int n = 3;
  std::vector<int> ok(n, 0);
  onRanks(n, [&](std::shared_ptr<MapStore> store, int r) {
    braid::Communicator comm = braid::Communicator::fromStore(store, r, n, "cxxtest");
    REQUIRE(comm.rank() == r);
    REQUIRE(comm.size() == n);
    std::vector<float> v(100000, static_cast<float>(r + 1));
    comm.allreduce(v.data(), v.size(), braid::DataType::kFloat32, braid::ReduceOp::kSum);
    bool good = v.front() == 6.0f && v.back() == 6.0f;
    std::vector<double> d(1000, r == 2 ? 3.5 : 0.0);
    comm.broadcast(d.data(), d.size(), braid::DataType::kFloat64, /*root=*/2);
    good = good && d[999] == 3.5;
    std::vector<int32_t> a(4096, r), b(4096, 0);
    braid::Work w = comm.allreduceAsync(a.data(), b.data(), a.size(), braid::DataType::kInt32, braid::ReduceOp::kMax);
    std::vector<int64_t> c(10, r);
    braid::Work w2 = comm.broadcastAsync(c.data(), c.data(), c.size(), braid::DataType::kInt64, 0);
    w.wait();
    w2.wait();
    CHECK(w.test());
    good = good && b[0] == n - 1 && b[4095] == n - 1 && c[9] == 0;
    ok[r] = good;
  });
  for (int r = 0; r < n; ++r) CHECK(ok[r] == 1);
}

// The live view through a caller's store that has a root (torch's TCPStore under its
// per-group prefixes): each process answers at the root for every group's communicator,
// braid::liveStatus asks there, and the last communicator to go closes the view, unless the
// store says this process does not host it.
TEST_CASE("C++ API: a caller's store with a root carries the live view of every group's communicator", "[unit]") {
  setenv("BRAID_TRANSPORT", "loopback", 1);
  const int hosts = GENERATE(-1, 0, 1);
  INFO("hostsRoot " << hosts);
  auto root = std::make_shared<MapStore>();
  std::atomic<int> ready{0}, asked{0};
  std::string report;
  const int opened = PrefixedStore::rootsOpened.load();
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      braid::Communicator world =
          braid::Communicator::fromStore(std::make_shared<PrefixedStore>(root, "g0/", hosts), r, 2, "braid");
      braid::Communicator pair =
          braid::Communicator::fromStore(std::make_shared<PrefixedStore>(root, "g1/", hosts), r, 2, "braid.pg1");
      float x[4] = {1, 2, 3, 4};
      world.allreduce(x, 4, braid::DataType::kFloat32, braid::ReduceOp::kSum);
      pair.allreduce(x, 4, braid::DataType::kFloat32, braid::ReduceOp::kSum);
      ++ready;
      if (r == 0) {
        while (ready.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        // Asked through one group's store: the question goes to the root, where both answer.
        report = braid::liveStatus(std::make_shared<PrefixedStore>(root, "g1/"), 1.0);
        asked = 1;
      }
      while (asked.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  for (auto& t : ts) t.join();
  INFO(report);
  CHECK(report.find("communicator 'braid' (2 ranks, epoch 0): 2 of 2 answered within 1.0 s") != std::string::npos);
  CHECK(report.find("communicator 'braid.pg1' (2 ranks, epoch 0): 2 of 2 answered within 1.0 s") != std::string::npos);
  CHECK(report.find("not in a collective; last completed #0 allreduce count=4 float sum") != std::string::npos);
  // Each communicator's asking side, the one responder and liveStatus opened a root each.
  CHECK(PrefixedStore::rootsOpened.load() - opened == 6);
  // The last communicator to go closed the view at the root, where this process may host it.
  CHECK(root->add("braid-status/closed", 0) == (hosts == 0 ? 0 : 1));
  CHECK_THROWS_AS(braid::liveStatus(nullptr), braid::InvalidArgument);
  CHECK_THROWS_AS(braid::liveStatus(root, -1), braid::InvalidArgument);
}

TEST_CASE("C++ API: bad arguments throw InvalidArgument naming them", "[unit]") {
  setenv("BRAID_TRANSPORT", "loopback", 1);
  onRanks(2, [&](std::shared_ptr<MapStore> store, int r) {
    braid::Communicator comm = braid::Communicator::fromStore(store, r, 2, "cxxbad");
    float x[4] = {0, 0, 0, 0};
    try {
      comm.broadcast(x, 4, braid::DataType::kFloat32, /*root=*/7);
      FAIL("no exception");
    } catch (const braid::InvalidArgument& e) {
      CHECK(std::string(e.what()).find("root") != std::string::npos);
      CHECK(e.code() == braidInvalidArgument);
    }
    CHECK_THROWS_AS(comm.allreduce(nullptr, x, 4, braid::DataType::kFloat32, braid::ReduceOp::kSum),
                    braid::InvalidArgument);
    // Still usable afterwards.
    comm.allreduce(x, 4, braid::DataType::kFloat32, braid::ReduceOp::kSum);
  });
  CHECK_THROWS_AS(braid::Communicator::fromStore(nullptr, 0, 1), braid::InvalidArgument);
}

// A C caller may pass any int where the C API takes an enum (a cast, a ctypes binding). In
// C++ a value outside an enum's range is undefined unless the enum has a fixed underlying
// type, so braid.h gives its enums one in C++: these calls are refused by name, and UBSan
// (the sanitizer run of this test) finds no invalid load.
TEST_CASE("C API: a data type or op that is no value of its enum is refused, naming it", "[unit]") {
  setenv("BRAID_TRANSPORT", "loopback", 1);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  std::vector<std::string> errs(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      braidComm_t comm = nullptr;
      if (braidCommInitRank(&comm, 2, id, r) != braidSuccess) {
        errs[r] = "init failed";
        return;
      }
      float x[4] = {1, 2, 3, 4};
      auto refused = [&](braidResult_t res, const char* word, const char* what) {
        if (res != braidInvalidArgument) {
          errs[r] += std::string(" [") + what + ": result " + std::to_string(res) + "]";
        } else if (std::string(braidGetLastError(comm)).find(word) == std::string::npos) {
          errs[r] += std::string(" [") + what + ": '" + braidGetLastError(comm) + "' does not name " + word + "]";
        }
      };
      for (int bad : {42, -1, 0x7fffffff}) {
        refused(braidAllReduce(x, x, 4, static_cast<braidDataType_t>(bad), braidSum, comm, nullptr), "datatype",
                "allreduce datatype");
        refused(braidBroadcast(x, x, 4, static_cast<braidDataType_t>(bad), 0, comm, nullptr), "datatype",
                "broadcast datatype");
      }
      for (int bad : {-1, -2147483647 - 1}) {
        refused(braidAllReduce(x, x, 4, braidFloat32, static_cast<braidRedOp_t>(bad), comm, nullptr), "op",
                "allreduce op");
      }
      // Still usable afterwards, on both ranks alike.
      if (braidAllReduce(x, x, 4, braidFloat32, braidSum, comm, nullptr) != braidSuccess || x[3] != 8.0f)
        errs[r] += " [the allreduce after the refusals]";
      braidCommDestroy(comm);
    });
  }
  for (auto& t : ts) t.join();
  CHECK(errs[0] == "");
  CHECK(errs[1] == "");
}

TEST_CASE("C++ API: an aborted peer surfaces as an exception on the others", "[unit]") {
  setenv("BRAID_TRANSPORT", "loopback", 1);
  setenv("BRAID_TIMEOUT", "30", 1);
  std::vector<int> threw(3, 0);
  onRanks(3, [&](std::shared_ptr<MapStore> store, int r) {
    braid::Communicator comm = braid::Communicator::fromStore(store, r, 3, "cxxabort");
    std::vector<float> v(1000, 1.0f);
    if (r == 1) {
      comm.abort();
      threw[r] = 1;
      return;
    }
    try {
      comm.allreduce(v.data(), v.size(), braid::DataType::kFloat32, braid::ReduceOp::kSum);
    } catch (const braid::Error& e) {
      threw[r] = e.code() == braidAborted && std::string(e.what()).find("rank 1") != std::string::npos;
    }
  });
  unsetenv("BRAID_TIMEOUT");
  CHECK(threw == std::vector<int>{1, 1, 1});
}

// ---- the full collective set through the C++ API ---------------------------------------------
// Assertions run on the main thread: each rank collects what went wrong into a string (Catch2
// assertions are not thread-safe), and an exception ends that rank's body with its message.

namespace {

using braid::DataType;
using braid::ReduceOp;

template <typename F>
std::vector<std::string> onComm(int n, const std::string& prefix, F body) {
  setenv("BRAID_TRANSPORT", "loopback", 1);
  setenv("BRAID_TIMEOUT", "60", 1);  // a rank that throws early makes the others fail, not hang
  std::vector<std::string> errs(n);
  onRanks(n, [&](std::shared_ptr<MapStore> store, int r) {
    try {
      braid::Communicator comm = braid::Communicator::fromStore(store, r, n, prefix);
      body(comm, r, errs[r]);
    } catch (const std::exception& e) {
      errs[r] += std::string(" exception: ") + e.what();
    }
  });
  unsetenv("BRAID_TIMEOUT");
  return errs;
}

void expect(std::string& err, bool ok, const std::string& what) {
  if (!ok) err += " [" + what + "]";
}

int32_t v32(int r, size_t i) { return static_cast<int32_t>((r * 131 + static_cast<int>(i % 997) * 7) % 1000) - 300; }

// Runs `f` and checks that it throws InvalidArgument whose message names `word`.
template <typename F>
void expectInvalid(std::string& err, const std::string& word, F f) {
  try {
    f();
    err += " [no exception, wanted one naming " + word + "]";
  } catch (const braid::InvalidArgument& e) {
    if (std::string(e.what()).find(word) == std::string::npos || e.code() != braidInvalidArgument)
      err += " [message '" + std::string(e.what()) + "' does not name " + word + "]";
  }
}

}  // namespace

TEST_CASE("C++ API: reduce, allgather, reduceScatter, alltoall, gather, scatter, sync and async", "[unit]") {
  const int n = 4;
  const size_t count = 1003;
  auto errs = onComm(n, "cxxcoll", [&](braid::Communicator& comm, int r, std::string& err) {
    const size_t N = static_cast<size_t>(n);
    std::vector<int32_t> in(count * N), out(count * N, -7);
    for (size_t i = 0; i < in.size(); ++i) in[i] = v32(r, i);
    auto sumOver = [&](size_t i) {
      int32_t s = 0;
      for (int q = 0; q < n; ++q) s += v32(q, i);
      return s;
    };

    comm.reduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum, /*root=*/2);
    if (r == 2)
      for (size_t i = 0; i < count; ++i) expect(err, out[i] == sumOver(i), "reduce " + std::to_string(i));

    std::vector<int32_t> ag(count * N, -7);
    comm.allgather(in.data(), ag.data(), count, DataType::kInt32);
    for (size_t i = 0; i < ag.size(); ++i)
      if (ag[i] != v32(static_cast<int>(i / count), i % count)) { expect(err, false, "allgather"); break; }

    std::vector<int32_t> rs(count, -7);
    comm.reduceScatter(in.data(), rs.data(), count, DataType::kInt32, ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i)
      if (rs[i] != sumOver(r * count + i)) { expect(err, false, "reduceScatter"); break; }

    std::vector<int32_t> a2a(count * N, -7);
    comm.alltoall(in.data(), a2a.data(), count, DataType::kInt32);
    for (size_t i = 0; i < a2a.size(); ++i)
      if (a2a[i] != v32(static_cast<int>(i / count), r * count + i % count)) { expect(err, false, "alltoall"); break; }

    std::vector<int32_t> g(count * N, -7);
    comm.gather(in.data(), r == 1 ? g.data() : nullptr, count, DataType::kInt32, /*root=*/1);
    if (r == 1)
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i] != v32(static_cast<int>(i / count), i % count)) { expect(err, false, "gather"); break; }

    // root 3 scatters block j = v32(j, k)
    std::vector<int32_t> src(count * N), sc(count, -7);
    for (size_t i = 0; i < src.size(); ++i) src[i] = v32(static_cast<int>(i / count), i % count);
    comm.scatter(r == 3 ? src.data() : nullptr, sc.data(), count, DataType::kInt32, /*root=*/3);
    for (size_t i = 0; i < count; ++i)
      if (sc[i] != v32(r, i)) { expect(err, false, "scatter"); break; }

    // The Async twins, all in flight at once, completed in issue order.
    std::vector<float> f(count, static_cast<float>(r + 1)), fr(count, -1.0f);
    std::vector<int32_t> ag2(count * N, -7), rs2(count, -7), a2a2(count * N, -7), g2(count * N, -7), sc2(count, -7);
    std::vector<braid::Work> works;
    works.push_back(comm.reduceAsync(f.data(), fr.data(), count, DataType::kFloat32, ReduceOp::kMax, 0));
    works.push_back(comm.allgatherAsync(in.data(), ag2.data(), count, DataType::kInt32));
    works.push_back(comm.reduceScatterAsync(in.data(), rs2.data(), count, DataType::kInt32, ReduceOp::kSum));
    works.push_back(comm.alltoallAsync(in.data(), a2a2.data(), count, DataType::kInt32));
    works.push_back(comm.gatherAsync(in.data(), g2.data(), count, DataType::kInt32, 0));
    works.push_back(comm.scatterAsync(src.data(), sc2.data(), count, DataType::kInt32, 0));
    works.push_back(comm.barrierAsync());
    for (auto& w : works) w.wait();
    for (auto& w : works) expect(err, w.test(), "test() after wait()");
    if (r == 0) expect(err, fr[count - 1] == static_cast<float>(n), "reduceAsync");
    expect(err, ag2 == ag, "allgatherAsync");
    expect(err, rs2 == rs, "reduceScatterAsync");
    expect(err, a2a2 == a2a, "alltoallAsync");
    if (r == 0)
      for (size_t i = 0; i < g2.size(); ++i)
        if (g2[i] != v32(static_cast<int>(i / count), i % count)) { expect(err, false, "gatherAsync"); break; }
    expect(err, sc2 == sc, "scatterAsync (root 0 sends the same blocks)");
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errs[r] == "");
  }
}

TEST_CASE("C++ API: allgatherv, reduceScatterv, alltoallv, barrier", "[unit]") {
  const int n = 3;
  auto errs = onComm(n, "cxxv", [&](braid::Communicator& comm, int r, std::string& err) {
    // uneven counts, one rank contributing nothing
    std::vector<size_t> counts = {5, 0, 3001}, displs = {3010, 0, 5};
    std::vector<int32_t> mine(counts[r]);
    for (size_t k = 0; k < mine.size(); ++k) mine[k] = v32(r, k);
    std::vector<int32_t> agv(3020, -7);
    comm.allgatherv(mine.data(), counts[r], agv.data(), counts, displs, DataType::kInt32);
    for (int q = 0; q < n; ++q)
      for (size_t k = 0; k < counts[q]; ++k)
        if (agv[displs[q] + k] != v32(q, k)) { expect(err, false, "allgatherv"); break; }
    expect(err, agv[3015] == -7, "allgatherv wrote past the blocks");

    std::vector<int32_t> in(3006);
    for (size_t i = 0; i < in.size(); ++i) in[i] = v32(r, i);
    std::vector<int32_t> rsv(counts[r] + 1, -7);
    comm.reduceScatterv(in.data(), rsv.data(), counts, DataType::kInt32, ReduceOp::kSum);
    const size_t off = r == 0 ? 0 : r == 1 ? 5 : 5;
    for (size_t k = 0; k < counts[r]; ++k) {
      int32_t want = 0;
      for (int q = 0; q < n; ++q) want += v32(q, off + k);
      if (rsv[k] != want) { expect(err, false, "reduceScatterv"); break; }
    }

    // alltoallv: rank r sends (r + j + 1) * 100 elements to j, value names (from, to, k)
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t sAt = 0, rAt = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = static_cast<size_t>(r + j + 1) * 100;
      sd[j] = sAt;
      sAt += sc[j];
      rc[j] = static_cast<size_t>(j + r + 1) * 100;
      rd[j] = rAt;
      rAt += rc[j];
    }
    std::vector<int32_t> s(sAt), d(rAt, -7);
    for (int j = 0; j < n; ++j)
      for (size_t k = 0; k < sc[j]; ++k) s[sd[j] + k] = r * 1000000 + j * 10000 + static_cast<int32_t>(k);
    comm.alltoallv(s.data(), sc, sd, d.data(), rc, rd, DataType::kInt32);
    for (int i = 0; i < n; ++i)
      for (size_t k = 0; k < rc[i]; ++k)
        if (d[rd[i] + k] != i * 1000000 + r * 10000 + static_cast<int32_t>(k)) { expect(err, false, "alltoallv"); break; }

    std::vector<int32_t> d2(rAt, -7), agv2(3020, -7), rsv2(counts[r] + 1, -7);
    braid::Work w1 = comm.allgathervAsync(mine.data(), counts[r], agv2.data(), counts, displs, DataType::kInt32);
    braid::Work w2 = comm.reduceScattervAsync(in.data(), rsv2.data(), counts, DataType::kInt32, ReduceOp::kSum);
    braid::Work w3 = comm.alltoallvAsync(s.data(), sc, sd, d2.data(), rc, rd, DataType::kInt32);
    w1.wait();
    w2.wait();
    w3.wait();
    expect(err, agv2 == agv && rsv2 == rsv && d2 == d, "v-variants async");
    comm.barrier();
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errs[r] == "");
  }
}

TEST_CASE("C++ API: send, recv, sendRecv batches", "[unit]") {
  const int n = 4;
  auto errs = onComm(n, "cxxp2p", [&](braid::Communicator& comm, int r, std::string& err) {
    // blocking pairs: 0 -> 1, 2 -> 3
    std::vector<int64_t> b(100000);
    if (r % 2 == 0) {
      for (size_t k = 0; k < b.size(); ++k) b[k] = r * 1000000 + static_cast<int64_t>(k);
      comm.send(b.data(), b.size(), DataType::kInt64, r + 1);
    } else {
      comm.recv(b.data(), b.size(), DataType::kInt64, r - 1);
      expect(err, b[99999] == (r - 1) * 1000000 + 99999, "send/recv");
    }
    // every rank to every rank in one batch, mixing types
    const size_t bytes = 300001;
    std::vector<std::vector<uint8_t>> sb(n, std::vector<uint8_t>(bytes)), rb(n, std::vector<uint8_t>(bytes, 0));
    std::vector<std::vector<double>> sd(n, std::vector<double>(17)), rd(n, std::vector<double>(17, -1));
    std::vector<braid::P2POp> ops;
    for (int j = 0; j < n; ++j) {
      for (size_t k = 0; k < bytes; ++k) sb[j][k] = static_cast<uint8_t>(r * 7 + j * 3 + k);
      for (size_t k = 0; k < 17; ++k) sd[j][k] = r + 0.5 * j + static_cast<double>(k);
      ops.push_back({true, sb[j].data(), bytes, DataType::kUint8, j});
      ops.push_back({false, rb[j].data(), bytes, DataType::kUint8, j});
      ops.push_back({true, sd[j].data(), 17, DataType::kFloat64, j});
      ops.push_back({false, rd[j].data(), 17, DataType::kFloat64, j});
    }
    comm.sendRecv(ops);
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < bytes; ++k)
        if (rb[i][k] != static_cast<uint8_t>(i * 7 + r * 3 + k)) { expect(err, false, "sendRecv bytes"); break; }
      for (size_t k = 0; k < 17; ++k)
        if (rd[i][k] != i + 0.5 * r + static_cast<double>(k)) { expect(err, false, "sendRecv doubles"); break; }
    }
    // ring exchange, asynchronously
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<float> s(70001, static_cast<float>(r)), d(70001, -1.0f);
    braid::Work w = comm.sendRecvAsync({{true, s.data(), s.size(), DataType::kFloat32, next},
                                        {false, d.data(), d.size(), DataType::kFloat32, prev}});
    w.wait();
    expect(err, d.front() == static_cast<float>(prev) && d.back() == static_cast<float>(prev), "sendRecvAsync ring");
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errs[r] == "");
  }
}

TEST_CASE("C++ API: split", "[unit]") {
  const int n = 4;
  auto errs = onComm(n, "cxxsplit", [&](braid::Communicator& comm, int r, std::string& err) {
    // even and odd ranks, in reverse order
    braid::Communicator child = comm.split(r % 2, -r);
    expect(err, child.valid(), "child valid");
    expect(err, child.size() == 2, "child size");
    expect(err, child.rank() == (r < 2 ? 1 : 0), "child rank reversed");
    std::vector<int32_t> v(1000, r);
    child.allreduce(v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
    expect(err, v[999] == (r % 2 == 0 ? 2 : 4), "allreduce on the child");
    int32_t me = r, both[2] = {-1, -1};
    child.allgather(&me, both, 1, DataType::kInt32);
    expect(err, both[0] == r % 2 + 2 && both[1] == r % 2, "allgather on the child in key order");

    // rank 3 opts out
    braid::Communicator rest = comm.split(r == 3 ? -1 : 0, 0);
    expect(err, rest.valid() == (r != 3), "negative color gives an invalid communicator");
    if (rest.valid()) {
      rest.barrier();
      expect(err, rest.size() == 3 && rest.rank() == r, "rest rank and size");
    } else {
      expectInvalid(err, "not valid", [&] { (void)rest.rank(); });
      expectInvalid(err, "not valid", [&] { rest.barrier(); });
    }
    comm.barrier();  // the parent still works
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errs[r] == "");
  }
}

TEST_CASE("C++ API: Reduction::preMulSum and bitwise ops", "[unit]") {
  const int n = 3;
  auto errs = onComm(n, "cxxpremul", [&](braid::Communicator& comm, int r, std::string& err) {
    // a per-rank scalar: sum over ranks of (r + 1) * 0.5 * x
    std::vector<float> x(4099, 2.0f), y(4099, -1.0f);
    comm.allreduce(x.data(), y.data(), x.size(), DataType::kFloat32,
                   braid::Reduction::preMulSum(0.5 * (r + 1)));
    expect(err, y[4098] == 6.0f, "preMulSum allreduce");
    expect(err, x[0] == 2.0f, "preMulSum left the input alone");
    std::vector<double> d(3 * 1000, 4.0), dr(1000, -1);
    comm.reduceScatter(d.data(), dr.data(), 1000, DataType::kFloat64, braid::Reduction::preMulSum(0.25));
    expect(err, dr[999] == 3.0, "preMulSum reduceScatter");
    braid::Work w = comm.reduceAsync(x.data(), y.data(), x.size(), DataType::kFloat32,
                                     braid::Reduction::preMulSum(-1.0), 0);
    w.wait();
    if (r == 0) expect(err, y[7] == -6.0f, "preMulSum reduceAsync");

    std::vector<uint32_t> b(5000);
    for (size_t i = 0; i < b.size(); ++i) b[i] = (1u << (r + i % 7)) | 0x80000000u;
    std::vector<uint32_t> band(5000), bor(5000), bxor(5000);
    comm.allreduce(b.data(), band.data(), b.size(), DataType::kUint32, ReduceOp::kBand);
    comm.allreduce(b.data(), bor.data(), b.size(), DataType::kUint32, ReduceOp::kBor);
    comm.allreduce(b.data(), bxor.data(), b.size(), DataType::kUint32, ReduceOp::kBxor);
    for (size_t i = 0; i < b.size(); ++i) {
      uint32_t a = 0xffffffffu, o = 0, e = 0;
      for (int q = 0; q < n; ++q) {
        uint32_t v = (1u << (q + i % 7)) | 0x80000000u;
        a &= v;
        o |= v;
        e ^= v;
      }
      if (band[i] != a || bor[i] != o || bxor[i] != e) { expect(err, false, "bitwise " + std::to_string(i)); break; }
    }
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errs[r] == "");
  }
}

TEST_CASE("C++ API: bad arguments of the new methods throw InvalidArgument naming them", "[unit]") {
  const int n = 2;
  auto errs = onComm(n, "cxxbadnew", [&](braid::Communicator& comm, int r, std::string& err) {
    float f[64] = {0};
    const std::vector<size_t> ones(n, 1), idx = {0, 1}, three(3, 1);
    expectInvalid(err, "root", [&] { comm.reduce(f, f + 32, 4, DataType::kFloat32, ReduceOp::kSum, n); });
    expectInvalid(err, "op", [&] { comm.reduce(f, f + 32, 4, DataType::kFloat32, ReduceOp::kBand, 0); });
    expectInvalid(err, "recvbuff", [&] { comm.reduce(f, nullptr, 4, DataType::kFloat32, ReduceOp::kSum, r); });
    expectInvalid(err, "sendbuff", [&] { comm.allgather(nullptr, f, 4, DataType::kFloat32); });
    expectInvalid(err, "overlap", [&] { comm.allgather(f + r * 4 + 1, f, 4, DataType::kFloat32); });
    expectInvalid(err, "sendcount", [&] { comm.allgather(f, f + 32, SIZE_MAX / 4, DataType::kFloat32); });
    expectInvalid(err, "op", [&] { comm.reduceScatter(f, f + 32, 4, DataType::kFloat64, ReduceOp::kBxor); });
    expectInvalid(err, "overlap", [&] { comm.reduceScatter(f, f + r * 4 + 2, 4, DataType::kFloat32, ReduceOp::kSum); });
    expectInvalid(err, "overlap", [&] { comm.alltoall(f, f + 1, 4, DataType::kFloat32); });
    expectInvalid(err, "datatype", [&] { comm.alltoall(f, f + 32, 4, static_cast<DataType>(99)); });
    expectInvalid(err, "root", [&] { comm.gather(f, f + 32, 4, DataType::kFloat32, -1); });
    expectInvalid(err, "recvbuff", [&] { comm.gather(f, nullptr, 4, DataType::kFloat32, r); });
    expectInvalid(err, "sendbuff", [&] { comm.scatter(nullptr, f, 4, DataType::kFloat32, r); });
    expectInvalid(err, "recvcounts", [&] { comm.allgatherv(f, 2, f + 32, ones, idx, DataType::kFloat32); });
    expectInvalid(err, "recvcounts", [&] { comm.allgatherv(f, 1, f + 32, three, idx, DataType::kFloat32); });
    expectInvalid(err, "displs", [&] { comm.allgatherv(f, 1, f + 32, ones, three, DataType::kFloat32); });
    expectInvalid(err, "recvcounts", [&] { comm.reduceScatterv(f, f + 32, three, DataType::kFloat32, ReduceOp::kSum); });
    expectInvalid(err, "sdispls", [&] { comm.alltoallv(f, ones, three, f + 32, ones, idx, DataType::kFloat32); });
    expectInvalid(err, "in-place", [&] { comm.alltoallv(f, ones, idx, f, ones, idx, DataType::kFloat32); });
    expectInvalid(err, "peer", [&] { comm.send(f, 4, DataType::kFloat32, n); });
    expectInvalid(err, "peer", [&] { comm.recv(f, 4, DataType::kFloat32, -1); });
    expectInvalid(err, "recvbuff", [&] { comm.recv(nullptr, 4, DataType::kFloat32, 0); });
    expectInvalid(err, "ops[1]", [&] {
      comm.sendRecv({{true, f, 1, DataType::kFloat32, 0}, {false, nullptr, 1, DataType::kFloat32, 0}});
    });
    expectInvalid(err, "peer", [&] { (void)comm.sendRecvAsync({{true, f, 1, DataType::kFloat32, 7}}); });
    // every message names the rank
    try {
      comm.alltoall(nullptr, f, 4, DataType::kFloat32);
      expect(err, false, "alltoall NULL sendbuff");
    } catch (const braid::InvalidArgument& e) {
      expect(err, std::string(e.what()).find("rank " + std::to_string(r)) != std::string::npos, "names the rank");
    }
    comm.barrier();  // still usable: nothing above reached the wire
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errs[r] == "");
  }
}

TEST_CASE("C++ API: typed forms deduce the data type and count from vectors and spans", "[unit]") {
  setenv("BRAID_TRANSPORT", "loopback", 1);
  static_assert(braid::dataTypeOf<float>() == braid::DataType::kFloat32, "float");
  static_assert(braid::dataTypeOf<const uint16_t>() == braid::DataType::kUint16, "const uint16_t");
  static_assert(braid::dataTypeOf<int64_t>() == braid::DataType::kInt64, "int64_t");
  const int n = 3;
  std::vector<std::string> failures(n);
  onRanks(n, [&](std::shared_ptr<MapStore> store, int r) {
    braid::Communicator comm = braid::Communicator::fromStore(store, r, n, "cxxtyped");
    std::string& bad = failures[r];
    auto expect = [&](bool ok, const char* what) {
      if (!ok && bad.empty()) bad = what;
    };
    std::vector<float> f(1000, static_cast<float>(r + 1));
    comm.allreduce(f);
    expect(f[0] == 6.0f && f[999] == 6.0f, "allreduce(vector<float>&)");
    std::vector<int32_t> in(7, r), out;
    comm.allreduce(in, out, braid::ReduceOp::kMax);
    expect(out.size() == 7 && out[6] == n - 1, "allreduce(send, recv, kMax) sizes recv");
    std::vector<double> d(5, r == 1 ? 2.5 : 0.0);
    comm.broadcast(d, 1);
    expect(d[4] == 2.5, "broadcast(vector<double>&)");
    std::vector<int64_t> red(4, r + 1);
    comm.reduce(red, braid::ReduceOp::kSum, 2);
    expect(r == 2 ? red[3] == 6 : red[3] == r + 1, "reduce(vector&, op, root) in place");
    std::vector<uint16_t> mine(3, static_cast<uint16_t>(r * 10)), all;
    comm.allgather(mine, all);
    expect(all.size() == 9 && all[0] == 0 && all[3] == 10 && all[8] == 20, "allgather sizes and fills recv");
    std::vector<int32_t> rs(6, 1), part;
    comm.reduceScatter(rs, part);
    expect(part.size() == 2 && part[0] == n && part[1] == n, "reduceScatter");
    std::vector<int8_t> a2a(3), got;
    for (int d2 = 0; d2 < n; ++d2) a2a[d2] = static_cast<int8_t>(r * 3 + d2);
    comm.alltoall(a2a, got);
    expect(got.size() == 3 && got[0] == r && got[1] == 3 + r && got[2] == 6 + r, "alltoall");
    // Sizes that cannot split evenly name the argument and the rank.
    try {
      std::vector<int32_t> odd(4), o2;
      comm.reduceScatter(odd, o2);
      expect(false, "reduceScatter of 4 over 3 ranks was accepted");
    } catch (const braid::InvalidArgument& e) {
      expect(std::string(e.what()).find("not a multiple of the 3 ranks (rank " + std::to_string(r) + ")") !=
                 std::string::npos,
             "reduceScatter's error names the count and the rank");
    }
    if (r < 2) {
      std::vector<uint64_t> msg(4, 0);
      if (r == 0) {
        msg.assign(4, 77);
        comm.send(msg, 1);
      } else {
        comm.recv(msg, 0);
        expect(msg[3] == 77, "send/recv of vectors");
      }
    }
#ifdef BRAID_HAVE_SPAN
    std::vector<float> s(8, 1.0f);
    comm.allreduce(std::span<float>(s));
    expect(s[7] == 3.0f, "allreduce(span)");
    std::vector<int32_t> one(2, r), many(6);
    comm.allgather(std::span<const int32_t>(one), std::span<int32_t>(many));
    expect(many[5] == 2, "allgather(span, span)");
    try {
      std::vector<int32_t> tooSmall(5);
      comm.allgather(std::span<const int32_t>(one), std::span<int32_t>(tooSmall));
      expect(false, "a span of the wrong size was accepted");
    } catch (const braid::InvalidArgument& e) {
      expect(std::string(e.what()).find("recv has 5 elements, needs 6") != std::string::npos, "span size error");
    }
#endif
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(failures[r] == "");
  }
#ifndef BRAID_HAVE_SPAN
  WARN("std::span forms not compiled: this test is built before C++20");
#endif
}


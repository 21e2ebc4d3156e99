// The C++ API as a user sees it: a caller-provided braid::Store drives rendezvous
// (Communicator::fromStore), synchronous and asynchronous collectives, and errors as
// exceptions. Ranks are threads of this process.

#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "braid/braid.hpp"

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

// The joining ranks' heartbeats through a store that cannot tell when a client is gone
// (core/init_heartbeat.h): who is judged gone, when, and who is not.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "bootstrap/memory_store.h"
#include "common/clock.h"
#include "core/init_heartbeat.h"
#include "support/catch.h"

using namespace braid;
using braid::core::InitHeartbeat;

namespace {

constexpr double kPeriod = 0.1;
constexpr double kSilence = 1.0;

std::unique_ptr<InitHeartbeat> beat(bootstrap::Store& store, int rank, int nranks) {
  return std::make_unique<InitHeartbeat>(store, "job/beat/", rank, nranks, kSilence, kPeriod);
}

// Waits up to `sec` for `hb` to report an error; the seconds it took, or -1.
double secondsUntilError(const InitHeartbeat& hb, double sec) {
  const int64_t t0 = nowNanos();
  while (hb.status().isOk()) {
    if (nowNanos() - t0 > static_cast<int64_t>(sec * 1e9)) return -1;
    usleep(10 * 1000);
  }
  return (nowNanos() - t0) / 1e9;
}

// The in-process store, with every request held while paused: a store that stalls.
class StallingStore : public bootstrap::Store {
 public:
  std::atomic<bool> paused{false};
  Status set(const std::string& k, const std::string& v, Deadline d) override { return gate(), m_.set(k, v, d); }
  StatusOr<std::string> get(const std::string& k, Deadline d) override { return gate(), m_.get(k, d); }
  StatusOr<int64_t> add(const std::string& k, int64_t delta, Deadline d) override {
    gate();
    return m_.add(k, delta, d);
  }
  Status wait(const std::vector<std::string>& k, Deadline d) override { return gate(), m_.wait(k, d); }
  StatusOr<bool> check(const std::vector<std::string>& k, Deadline d) override { return gate(), m_.check(k, d); }
  StatusOr<bool> deleteKey(const std::string& k, Deadline d) override { return gate(), m_.deleteKey(k, d); }

 private:
  void gate() {
    while (paused.load()) usleep(5 * 1000);
  }
  bootstrap::MemoryStore m_;
};

}  // namespace

TEST_CASE("init heartbeat: a rank that stops beating is named by its watcher after the silence", "[unit]") {
  bootstrap::MemoryStore store;
  auto b0 = beat(store, 0, 3), b1 = beat(store, 1, 3), b2 = beat(store, 2, 3);
  usleep(300 * 1000);
  CHECK(b0->status().isOk());
  b1.reset();  // gone without joining: rank 0 watches it
  const double took = secondsUntilError(*b0, 6 * kSilence);
  INFO("took " << took << " s");
  CHECK(took >= kSilence - 3 * kPeriod);  // less: the two rounds since it last beat
  CHECK(took > 0);
  const Status s = b0->status();
  CHECK(s.code() == Code::kRemoteError);
  CHECK(s.rank() == 1);
  CHECK(s.message().find("rank 1 stopped while joining") != std::string::npos);
  // Rank 2 watches rank 0, which beats on.
  CHECK(b2->status().isOk());
}

TEST_CASE("init heartbeat: a rank that joined, or never beat, is not judged", "[unit]") {
  bootstrap::MemoryStore store;
  SECTION("joined") {
    auto b0 = beat(store, 0, 2), b1 = beat(store, 1, 2);
    usleep(300 * 1000);
    b1->joined(Deadline::after(1));
    CHECK(secondsUntilError(*b0, 2.5 * kSilence) < 0);
    auto v = store.add("job/beat/1", 0);
    REQUIRE(v.isOk());
    CHECK(v.value() >= InitHeartbeat::kJoined);
  }
  SECTION("never started: the timeout is its bound, not the heartbeat") {
    auto b0 = beat(store, 0, 3);  // watches rank 1, which never comes
    CHECK(secondsUntilError(*b0, 2.5 * kSilence) < 0);
  }
  SECTION("one rank alone watches nobody") {
    auto b0 = beat(store, 0, 1);
    CHECK(secondsUntilError(*b0, 1.5 * kSilence) < 0);
  }
}

TEST_CASE("init heartbeat: a stalled store is not taken for a dead rank", "[unit]") {
  StallingStore store;
  auto b0 = beat(store, 0, 2), b1 = beat(store, 1, 2);
  usleep(300 * 1000);
  store.paused = true;  // every rank's beats and reads wait, well past the silence
  usleep(static_cast<useconds_t>(2.5 * kSilence * 1e6));
  store.paused = false;
  CHECK(secondsUntilError(*b0, 1.5 * kSilence) < 0);
  CHECK(secondsUntilError(*b1, 0.1) < 0);
}

TEST_CASE("init heartbeat: the silence follows the timeout and the job's size", "[unit]") {
  CHECK(InitHeartbeat::silenceFor(300, 4) == 10.0);
  CHECK(InitHeartbeat::silenceFor(30, 4) == 5.0);
  CHECK(InitHeartbeat::silenceFor(5, 4) == 3.0);
  CHECK(InitHeartbeat::silenceFor(0, 4) == 10.0);  // no timeout
  CHECK(InitHeartbeat::periodFor(8) == 0.5);
  CHECK(InitHeartbeat::periodFor(4096) == 4.0);
  CHECK(InitHeartbeat::silenceFor(300, 4096) == 24.0);  // six periods at least
}

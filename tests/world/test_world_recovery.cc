// Going on without a failed rank, in the in-process world: revoke, shrink and agree. The
// ranks are threads, so a "failed" rank here is one that stops taking part (its process is
// the test's); tests/multiproc kills real processes.

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.h"
#include "bootstrap/memory_store.h"
#include "world/world.h"

using namespace braid;
using braid::testing::WorldOptions;

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// An in-place int32 sum of `buf` over `comm`.
Status sum(core::Communicator& comm, std::vector<int32_t>& buf) {
  algorithms::Request req;
  req.coll = algorithms::Collective::kAllReduce;
  req.count = buf.size();
  req.dtype = DataType::kInt32;
  req.op = ReduceOp::kSum;
  req.inPlace = true;
  return comm.run(req, buf.data(), buf.data());
}

// Waits until `n` ranks have arrived (a test-side barrier that needs no communicator).
void arrive(std::atomic<int>& count, int n) {
  count.fetch_add(1);
  while (count.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST_CASE("revoke fails pending and later operations on every rank, and the communicator can still be shrunk",
          "[world][recovery]") {
  for (const char* transport : {"loopback", "shm", "tcp"}) {
    INFO(transport);
    WorldOptions o;
    o.nranks = 3;
    o.timeoutSec = 30;
    o.transport = transport;
    std::mutex mu;
    std::vector<std::string> pending(3), later(3), after(3);
    std::vector<double> pendingSec(3, 0);
    std::vector<int> pendingCode(3, 0);
    std::vector<int32_t> results(3, -1);
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const int r = comm.rank();
      std::vector<int32_t> buf(1000, r + 1);
      if (r == 0) {
        // Ranks 1 and 2 are inside an allreduce that rank 0 never joins; rank 0 revokes.
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        comm.revoke();
        comm.revoke();  // idempotent
      } else {
        auto t0 = std::chrono::steady_clock::now();
        Status s = sum(comm, buf);
        std::lock_guard<std::mutex> lock(mu);
        pending[r] = s.isOk() ? "ok" : std::string(codeName(s.code())) + ": " + s.message();
        pendingCode[r] = static_cast<int>(s.code());
        pendingSec[r] = secondsSince(t0);
      }
      Status again = sum(comm, buf);
      {
        std::lock_guard<std::mutex> lock(mu);
        later[r] = again.isOk() ? "ok" : codeName(again.code());
      }
      auto child = comm.shrink({}, /*abortPending=*/false);
      if (!child.isOk()) {
        std::lock_guard<std::mutex> lock(mu);
        after[r] = child.status().toString();
        return;
      }
      std::vector<int32_t> one(5, r + 1);
      Status s = sum(*child.value(), one);
      std::lock_guard<std::mutex> lock(mu);
      after[r] = s.isOk() ? "ok" : s.toString();
      results[r] = one[4];
    });
    REQUIRE(init.isOk());
    for (int r = 0; r < 3; ++r) {
      INFO("rank " << r << ": pending " << pending[r] << ", later " << later[r] << ", after " << after[r]);
      if (r != 0) {
        CHECK(pendingCode[r] == static_cast<int>(Code::kRevoked));
        CHECK(pending[r].find("rank 0 reported: the communicator was revoked by rank 0") != std::string::npos);
        CHECK(pendingSec[r] < 5);
      }
      CHECK(later[r] == "revoked");
      CHECK(after[r] == "ok");
      CHECK(results[r] == 6);
    }
  }
}

TEST_CASE("agree gives every rank the same AND and the same failed ranks, and shrink drops them", "[world][recovery]") {
  for (const char* transport : {"loopback", "tcp"}) {
    INFO(transport);
    WorldOptions o;
    o.nranks = 4;
    o.timeoutSec = 2;
    o.transport = transport;
    std::mutex mu;
    std::vector<std::string> log(4);
    std::vector<int> flags(4, -1), lateAgree(4, -1);
    std::vector<std::vector<int>> failed(4);
    std::vector<int32_t> results(4, -1);
    std::vector<int> newRanks(4, -1);
    std::atomic<int> voted{0}, finished{0};
    std::atomic<bool> done{false};
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const int r = comm.rank();
      // First an agreement where every rank votes: the AND of 0b111 and rank 1's 0b101.
      auto all = comm.agree(r == 1 ? 0b101 : 0b111);
      arrive(voted, 4);
      if (r == 2) {
        // Rank 2 stalls: it takes part in nothing until the others are done, then votes
        // in the agreement that gave up on it.
        while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        auto late = comm.agree(1);
        std::lock_guard<std::mutex> lock(mu);
        lateAgree[r] = late.isOk() ? 0 : static_cast<int>(late.status().code());
        log[r] = late.isOk() ? "late vote accepted" : late.status().message();
        return;
      }
      std::vector<int32_t> buf(256, r + 1);
      Status s = sum(comm, buf);  // fails: rank 2 never joins (timeout, naming it)
      auto a = comm.agree(s.isOk() ? 1 : 0);
      std::unique_ptr<core::Communicator> child;
      if (a.isOk()) {
        auto c = comm.shrink(a.value().failed, /*abortPending=*/false);
        if (c.isOk()) child = std::move(c).value();
        else log[r] = c.status().toString();
      }
      std::vector<int32_t> one(7, r + 1);
      Status after = child ? sum(*child, one) : Status(Code::kInternal, "no child");
      {
        std::lock_guard<std::mutex> lock(mu);
        if (all.isOk() && a.isOk() && all.value().failed.empty()) {
          flags[r] = all.value().flag * 10 + a.value().flag;
          failed[r] = a.value().failed;
        }
        if (s.code() != Code::kTimeout || s.rank() != 2) log[r] += " sum: " + s.toString();
        if (after.isOk()) results[r] = one[6];
        else log[r] += " after: " + after.toString();
        if (child) newRanks[r] = child->rank() * 10 + child->size();
      }
      if (finished.fetch_add(1) + 1 == 3) done.store(true);
    });
    REQUIRE(init.isOk());
    for (int r : {0, 1, 3}) {
      INFO("rank " << r << ": " << log[r]);
      CHECK(flags[r] == 0b101 * 10 + 0);  // the first AND, then the vote "the step failed"
      CHECK(failed[r] == std::vector<int>{2});
      CHECK(results[r] == 1 + 2 + 4);
    }
    CHECK(newRanks[0] == 0 * 10 + 3);
    CHECK(newRanks[1] == 1 * 10 + 3);
    CHECK(newRanks[3] == 2 * 10 + 3);
    INFO("rank 2: " << log[2]);
    CHECK(lateAgree[2] == static_cast<int>(Code::kAborted));
    CHECK(log[2].find("counted as failed") != std::string::npos);
  }
}

TEST_CASE("ranks racing to count a silent rank as failed all see one outcome", "[world][recovery]") {
  // Six ranks, two of which never vote: every voter gives up on them at the timeout, each
  // trying to settle their votes; the store's compare-and-set keeps one outcome.
  WorldOptions o;
  o.nranks = 6;
  o.timeoutSec = 1;
  std::mutex mu;
  std::vector<std::vector<int>> failed(6);
  std::vector<int> flag(6, -1);
  std::atomic<int> finished{0};
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank();
    if (r == 1 || r == 4) {
      while (finished.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    auto a = comm.agree(0xff ^ (1 << r));
    std::lock_guard<std::mutex> lock(mu);
    if (a.isOk()) {
      failed[r] = a.value().failed;
      flag[r] = a.value().flag;
    }
    finished.fetch_add(1);
  });
  REQUIRE(init.isOk());
  for (int r : {0, 2, 3, 5}) {
    INFO("rank " << r);
    CHECK(failed[r] == std::vector<int>{1, 4});
    CHECK(flag[r] == (0xff & ~0b101101));
  }
}

TEST_CASE("shrink rejects bad lists and lists that differ between ranks, naming them", "[world][recovery]") {
  WorldOptions o;
  o.nranks = 3;
  o.timeoutSec = 5;
  std::mutex mu;
  std::vector<std::string> errors(3);
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank();
    std::string e;
    auto bad = [&](std::vector<int> x) {
      auto c = comm.shrink(x, false);
      e += (c.isOk() ? std::string("accepted") : c.status().toString()) + "\n";
    };
    bad({3});
    bad({1, 1});
    bad({r});
    // Ranks 0 and 2 disagree about whom to exclude (rank 1 or nobody); rank 1 sits out.
    if (r != 1) bad(r == 0 ? std::vector<int>{1} : std::vector<int>{});
    std::lock_guard<std::mutex> lock(mu);
    errors[r] = e;
  });
  REQUIRE(init.isOk());
  for (int r = 0; r < 3; ++r) {
    INFO(errors[r]);
    CHECK(errors[r].find("3 is not a rank of this 3-rank communicator") != std::string::npos);
    CHECK(errors[r].find("rank 1 is listed twice") != std::string::npos);
    CHECK(errors[r].find("lists rank " + std::to_string(r) + " itself") != std::string::npos);
    CHECK(errors[r].find("accepted") == std::string::npos);
  }
  // Rank 0 (excluding rank 1) waits for rank 2 only, which excludes nobody: it sees the
  // difference; rank 2 waits for rank 1 too, which never joins: a timeout naming rank 1.
  CHECK(errors[0].find("excludeRanks differ: rank 2 excludes [], rank 0 excludes [1]") != std::string::npos);
  CHECK(errors[2].find("rank 1 did not join the shrink") != std::string::npos);
}

TEST_CASE("grow: the ranks keep theirs, new ones join with the token, each new rank once", "[world][recovery]") {
  auto store = std::make_shared<bootstrap::MemoryStore>();
  core::CommOptions base;
  base.config.timeoutSec = 20;
  base.config.transport = "loopback";
  base.config.bind = false;
  base.nonce = 0x6709;
  constexpr uint64_t kToken = 0x1234abcd5678ef01ull;
  std::mutex mu;
  std::vector<std::string> log(5);
  std::vector<int32_t> sums(5, -1);
  std::vector<int> epochs(5, -1);
  std::atomic<bool> opened{false};
  auto runOn = [&](core::Communicator& grown, int slot) {
    std::vector<int32_t> one(3, grown.rank() + 1);
    Status s = sum(grown, one);
    std::lock_guard<std::mutex> lock(mu);
    sums[slot] = s.isOk() ? one[2] : -1;
    epochs[slot] = grown.epoch();
    if (!s.isOk()) log[slot] += s.toString();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = core::Communicator::create(store, r, 2, base);
      if (!comm.isOk()) {
        log[r] = comm.status().toString();
        return;
      }
      if (r == 0) {
        Status bad = comm.value()->openGrow(kToken + 1, 2);  // not larger
        log[r] += bad.isOk() ? "opened a grow to the same size; " : "";
        REQUIRE(comm.value()->openGrow(kToken, 4).isOk());
        opened = true;
      }
      while (!opened) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      auto wrong = comm.value()->grow(kToken, 5);
      if (wrong.isOk() || wrong.status().message().find("made for 4") == std::string::npos)
        log[r] += "a wrong newSize was not refused; ";
      auto grown = comm.value()->grow(kToken, 4);
      if (!grown.isOk()) {
        log[r] += grown.status().toString();
        return;
      }
      if (grown.value()->rank() != r) log[r] += "rank changed; ";
      runOn(*grown.value(), r);
    });
  }
  for (int r = 2; r < 4; ++r) {
    threads.emplace_back([&, r] {
      while (!opened) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      auto grown = core::Communicator::joinGrow(store, kToken, 4, r, base);
      if (!grown.isOk()) {
        log[r] = grown.status().toString();
        return;
      }
      runOn(*grown.value(), r);
    });
  }
  for (auto& t : threads) t.join();
  // A second process claiming a new rank that is taken, and a rank outside the new ones.
  auto again = core::Communicator::joinGrow(store, kToken, 4, 3, base);
  REQUIRE(!again.isOk());
  CHECK(again.status().message().find("rank 3 of this grow is taken already") != std::string::npos);
  auto old = core::Communicator::joinGrow(store, kToken, 4, 1, base);
  REQUIRE(!old.isOk());
  CHECK(old.status().message().find("must be one of the new ranks [2, 4)") != std::string::npos);
  auto unknown = core::Communicator::joinGrow(store, 42, 4, 2, base);
  REQUIRE(!unknown.isOk());
  CHECK(unknown.status().message().find("names no open grow") != std::string::npos);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << log[r]);
    CHECK(log[r].empty());
    CHECK(sums[r] == 1 + 2 + 3 + 4);
    CHECK(epochs[r] == 1);
  }
}

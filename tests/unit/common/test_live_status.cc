// The live view of a running job (braid-info --status): the records ranks answer with, the
// report that follows every wait to the rank holding the others up, and the asking side of
// the store protocol against braid's own store.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/tcp_store.h"
#include "core/live_status.h"
#include "support/catch.h"

using namespace braid;
using braid::core::LiveState;
using braid::core::renderLiveStatus;

namespace {

LiveState rankState(int rank, int nranks, int waitingOn, bool busy = true) {
  LiveState s;
  s.comm = "braid";
  s.rank = rank;
  s.nranks = nranks;
  s.pid = 100 + rank;
  s.host = "node1";
  s.busy = busy;
  s.running = busy;
  s.op = busy ? "#7 allreduce count=1000 float sum" : "#6 allreduce count=1000 float sum";
  s.opSeconds = 4.25;
  if (waitingOn >= 0) {
    s.waitingOn = waitingOn;
    s.waitWhat = "receive from";
    s.waitSeconds = 4.0;
    s.channel = 0;
  }
  return s;
}

}  // namespace

TEST_CASE("live status records survive the round trip, and malformed ones are refused", "[live]") {
  LiveState s = rankState(2, 4, 1);
  s.failed = "timed out\twaiting\nfor rank 1";
  s.hostId = "node1:boot-a";
  s.heldByPid = 101;
  s.heldByHostId = "node1:boot-a";
  auto back = LiveState::decode(s.encode());
  REQUIRE(back.isOk());
  CHECK(back.value().hostId == "node1:boot-a");
  CHECK(back.value().heldByPid == 101);
  CHECK(back.value().heldByHostId == "node1:boot-a");
  CHECK(back.value().rank == 2);
  CHECK(back.value().nranks == 4);
  CHECK(back.value().waitingOn == 1);
  CHECK(back.value().waitWhat == "receive from");
  CHECK(back.value().op == s.op);
  CHECK(back.value().opSeconds == Approx(4.25));
  // Tabs and newlines inside a value cannot split the record.
  CHECK(back.value().failed == "timed out waiting for rank 1");
  CHECK(s.encode().find('\n') == std::string::npos);

  // A newer braid's extra field is skipped.
  CHECK(LiveState::decode(s.encode() + "\tgpu=3").isOk());
  CHECK(LiveState::decode("").status().code() == Code::kInvalidArgument);
  CHECK(LiveState::decode("v=1\tcomm=x\trank=0").status().message().find("no 'nranks'") != std::string::npos);
  CHECK(LiveState::decode("v=1\tcomm=x\trank=4\tnranks=4").status().message().find("not below nranks") !=
        std::string::npos);
  CHECK(LiveState::decode("v=1\tcomm=x\trank=0\tnranks=4\twaiting_on=9").status().message().find("waiting_on") !=
        std::string::npos);
  CHECK(LiveState::decode("v=1\tcomm=x\trank=zero\tnranks=4").status().message().find("rank=zero") !=
        std::string::npos);
  CHECK(LiveState::decode("v=2\tcomm=x\trank=0\tnranks=1").status().code() == Code::kInvalidArgument);
  CHECK(LiveState::decode("v=1\tcomm=x\trank=0\tnranks=1\theld_by_pid=-1").status().message().find("held_by_pid") !=
        std::string::npos);
  // An older braid's record, without the holds: none.
  auto older = LiveState::decode("v=1\tcomm=x\trank=0\tnranks=1");
  REQUIRE(older.isOk());
  CHECK(older.value().heldByPid == 0);
  CHECK(older.value().process == 0);
  CHECK(!older.value().heldBy().known());

  // The process tokens and pid namespaces, full 64-bit values, round trip too.
  s.pidNs = 4026531836ULL;
  s.process = 0xfedcba9876543210ULL;
  s.heldByPidNs = 4026532999ULL;
  s.heldByProcess = 0x8000000000000001ULL;
  auto tokens = LiveState::decode(s.encode());
  REQUIRE(tokens.isOk());
  CHECK(tokens.value().pidNs == 4026531836ULL);
  CHECK(tokens.value().process == 0xfedcba9876543210ULL);
  CHECK(tokens.value().heldByPidNs == 4026532999ULL);
  CHECK(tokens.value().heldByProcess == 0x8000000000000001ULL);
  CHECK(tokens.value().heldBy().known());
  for (const char* bad : {"process=-1", "process=x", "pid_ns=18446744073709551616", "held_by_process="})
    CHECK(LiveState::decode(std::string("v=1\tcomm=x\trank=0\tnranks=1\t") + bad).status().code() ==
          Code::kInvalidArgument);
}

// Containers that share a host's name may number their processes apart, each rank as pid 1:
// the live view tells processes apart by their tokens, and reads a pid in /proc only within
// its own pid namespace.
TEST_CASE("the live view tells processes apart by their tokens, not their pids", "[live]") {
  using braid::core::LiveProcess;
  using braid::core::pidReadableBy;
  using braid::core::sameLiveProcess;
  const LiveProcess a{"node1:boot", 1, 11, 0xa};
  const LiveProcess b{"node1:boot", 1, 12, 0xb};  // another container's pid 1
  CHECK(sameLiveProcess(a, a));
  CHECK(!sameLiveProcess(a, b));
  CHECK(sameLiveProcess(a, LiveProcess{"node1:boot", 7, 11, 0xa}));
  // Records without tokens (an older braid's): the host and pid decide.
  CHECK(sameLiveProcess(LiveProcess{"node1:boot", 1, 0, 0}, a));
  CHECK(!sameLiveProcess(LiveProcess{"node2:boot", 1, 0, 0}, a));
  CHECK(!sameLiveProcess(LiveProcess{"node1:boot", 2, 0, 0}, a));
  // A pid is read here only for a process of this host and pid namespace.
  CHECK(pidReadableBy(LiveProcess{"node1:boot", 5, 11, 0xc}, a));
  CHECK(!pidReadableBy(b, a));
  CHECK(!pidReadableBy(LiveProcess{"node2:boot", 5, 11, 0xc}, a));
  CHECK(pidReadableBy(LiveProcess{"node1:boot", 5, 0, 0}, a));
  CHECK(!pidReadableBy(LiveProcess{"node1:boot", 0, 11, 0xc}, a));
  CHECK(!LiveProcess{}.known());
}

TEST_CASE("a rank describes its operation, its wait, or that it is not in a collective", "[live]") {
  CHECK(rankState(0, 2, 1).describe() ==
        "in #7 allreduce count=1000 float sum for 4.2 s; waiting 4.0 s to receive from rank 1 (channel 0)");
  CHECK(rankState(1, 2, -1, false).describe() ==
        "not in a collective; last completed #6 allreduce count=1000 float sum, 4.2 s ago");
  LiveState fresh;
  CHECK(fresh.describe() == "not in a collective; none completed yet");
  LiveState queued = rankState(0, 2, -1);
  queued.running = false;
  CHECK(queued.describe() == "in #7 allreduce count=1000 float sum (queued) for 4.2 s");
  LiveState failed = rankState(0, 2, -1);
  failed.failed = "timeout: rank 1 did not answer";
  CHECK(failed.describe() == "failed: timeout: rank 1 did not answer (at #7 allreduce count=1000 float sum)");
}

TEST_CASE("the report follows every chain of waits to the rank that holds the others up", "[live]") {
  // A ring: 1 waits for 0, 0 waits for 3, 3 waits for 2, and 2 is computing.
  std::vector<LiveState> v{rankState(0, 4, 3), rankState(1, 4, 0), rankState(3, 4, 2), rankState(2, 4, -1, false)};
  const std::string out = renderLiveStatus(v, 1.0);
  INFO(out);
  CHECK(out.find("communicator 'braid' (4 ranks, epoch 0): 4 of 4 answered within 1.0 s") != std::string::npos);
  CHECK(out.find("  rank 0  pid 100 on node1") != std::string::npos);
  CHECK(out.find("=> rank 2 holds up ranks 0, 1, 3: it is not in a collective") != std::string::npos);

  // The rank at the chain's end did not answer: stopped, or gone.
  std::vector<LiveState> stopped{rankState(0, 3, 2), rankState(1, 3, 0)};
  const std::string out2 = renderLiveStatus(stopped, 0.5);
  INFO(out2);
  CHECK(out2.find("2 of 3 answered within 0.5 s") != std::string::npos);
  CHECK(out2.find("  rank 2  no answer") != std::string::npos);
  CHECK(out2.find("=> rank 2 holds up ranks 0, 1: it does not answer") != std::string::npos);

  // Two ranks waiting for each other (mismatched calls) are a cycle, not a culprit.
  std::vector<LiveState> cycle{rankState(0, 2, 1), rankState(1, 2, 0)};
  const std::string out3 = renderLiveStatus(cycle, 1.0);
  INFO(out3);
  CHECK(out3.find("ranks 0, 1 wait for each other in a cycle") != std::string::npos);
  CHECK(out3.find("holds up") == std::string::npos);

  // Nobody waiting: no verdict; communicators are reported apart.
  LiveState child = rankState(0, 1, -1, false);
  child.comm = "braid.s1";
  std::vector<LiveState> idle{rankState(0, 2, -1, false), rankState(1, 2, -1, false), child};
  const std::string out4 = renderLiveStatus(idle, 1.0);
  INFO(out4);
  CHECK(out4.find("holds up") == std::string::npos);
  CHECK(out4.find("communicator 'braid.s1' (1 ranks, epoch 0)") != std::string::npos);
  CHECK(renderLiveStatus({}, 2.0) == "no rank answered within 2.0 s\n");
}

TEST_CASE("asking for live status through braid's store: answers collected, the request's keys removed", "[live]") {
  auto server = bootstrap::TcpStoreServer::start("127.0.0.1", 0, 0);
  REQUIRE(server.isOk());
  auto connect = [&] {
    auto c = bootstrap::TcpStoreClient::connect("127.0.0.1", server.value()->port(), 0, Deadline::after(5));
    REQUIRE(c.isOk());
    return std::move(c).value();
  };
  auto asker = connect();
  // Two responders answering as a process does: wait for the next request, count, answer.
  std::vector<std::thread> responders;
  std::atomic<int> ready{0};
  for (int r = 0; r < 2; ++r) {
    responders.emplace_back([&, r] {
      auto store = connect();
      const int64_t next = store->add("braid-status/seq", 0).value() + 1;
      ready++;
      auto got = store->get("braid-status/req/" + std::to_string(next), Deadline::after(10));
      if (!got.isOk()) return;
      const std::string reply = "braid-status/reply/" + std::to_string(next) + "/";
      const int64_t j = store->add(reply + "count", 1).value();
      (void)store->set(reply + std::to_string(j), rankState(r, 3, r == 0 ? 2 : 0).encode());
    });
  }
  while (ready.load() < 2) usleep(1000);
  auto states = core::askLiveStatus(*asker, 0.3);
  for (auto& t : responders) t.join();
  REQUIRE(states.isOk());
  REQUIRE(states.value().size() == 2);
  const std::string out = renderLiveStatus(states.value(), 0.3);
  INFO(out);
  CHECK(out.find("2 of 3 answered") != std::string::npos);
  CHECK(out.find("=> rank 2 holds up ranks 0, 1: it does not answer") != std::string::npos);
  // Nothing of the request is left behind; the next request gets the next number.
  CHECK_FALSE(asker->check({"braid-status/req/1"}).value());
  CHECK_FALSE(asker->check({"braid-status/reply/1/count"}).value());
  CHECK_FALSE(asker->check({"braid-status/reply/1/1"}).value());
  CHECK(asker->add("braid-status/seq", 0).value() == 1);
}

// A process that answers after the asker's wait (a loaded host) is read when the caller says
// it still needs that answer, for at most the extra time the caller gives.
TEST_CASE("collecting live status waits past its wait for an answer still needed, up to a bound", "[live]") {
  auto server = bootstrap::TcpStoreServer::start("127.0.0.1", 0, 0);
  REQUIRE(server.isOk());
  const int port = server.value()->port();
  auto asker = bootstrap::TcpStoreClient::connect("127.0.0.1", port, 0, Deadline::after(5));
  REQUIRE(asker.isOk());
  auto needsRank1 = [](const std::vector<LiveState>& got) {
    return std::none_of(got.begin(), got.end(), [](const LiveState& s) { return s.rank == 1; });
  };
  struct Got {
    size_t answers = 0;
    double seconds = 0;  // in collect
  };
  // Rank 0 answers at once, rank 1 `lateMs` after the request; the asker waits 0.1 s.
  auto ask = [&](int lateMs, double moreSeconds) {
    bootstrap::Store& store = *asker.value();
    const int64_t n = store.add("braid-status/seq", 0).value() + 1;
    std::thread late([port, n, lateMs] {
      auto c = bootstrap::TcpStoreClient::connect("127.0.0.1", port, 0, Deadline::after(5));
      if (!c.isOk()) return;
      const std::string reply = "braid-status/reply/" + std::to_string(n) + "/";
      (void)c.value()->get("braid-status/req/" + std::to_string(n), Deadline::after(10));
      for (int r : {0, 1}) {
        if (r == 1) usleep(lateMs * 1000);
        auto j = c.value()->add(reply + "count", 1);
        if (j.isOk()) (void)c.value()->set(reply + std::to_string(j.value()), rankState(r, 2, -1).encode());
      }
    });
    Got got;
    auto begun = core::beginLiveStatus(store, 0.1);
    if (begun.isOk() && begun.value().n == n) {
      const auto t0 = std::chrono::steady_clock::now();
      auto states = moreSeconds > 0
                        ? core::collectLiveStatus(store, begun.value(), Deadline::after(moreSeconds), needsRank1)
                        : core::collectLiveStatus(store, begun.value());
      got.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (states.isOk()) got.answers = states.value().size();
    }
    late.join();
    return got;
  };
  const Got plain = ask(500, 0);      // no caller asking for more: the late answer is missed
  const Got waited = ask(500, 2.0);   // waited for, and no longer than it takes
  const Got bounded = ask(1500, 0.4); // past the bound: missed, and the wait ends at the bound
  CHECK(plain.answers == 1);
  CHECK(waited.answers == 2);
  CHECK(waited.seconds < 1.5);
  CHECK(bounded.answers == 1);
  CHECK(bounded.seconds < 1.0);
}

TEST_CASE("an interrupted store client ends a blocked wait at once, quietly", "[live]") {
  auto server = bootstrap::TcpStoreServer::start("127.0.0.1", 0, 0);
  REQUIRE(server.isOk());
  auto c = bootstrap::TcpStoreClient::connect("127.0.0.1", server.value()->port(), 0, Deadline::after(5));
  REQUIRE(c.isOk());
  auto* client = c.value().get();
  client->setQuiet();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] { CHECK_FALSE(client->get("never", Deadline::after(30)).isOk()); });
  usleep(100 * 1000);
  client->interrupt();
  waiter.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(client->get("never", Deadline::after(1)).status().message().find("interrupted") != std::string::npos);
}

// A caller's store is polled: a job's checks (two requests each) stay within 2,000 requests
// a second up to 1,000 processes, and no process checks less often than once a second.
TEST_CASE("the threads on a caller's store check it less often as the job grows, at most once a second", "[live]") {
  using braid::core::callerPollInterval;
  using std::chrono::milliseconds;
  CHECK(callerPollInterval(1) == milliseconds(100));
  CHECK(callerPollInterval(100) == milliseconds(100));
  CHECK(callerPollInterval(256) == milliseconds(256));
  CHECK(callerPollInterval(1000) == milliseconds(1000));
  CHECK(callerPollInterval(100000) == milliseconds(1000));
  for (int processes : {8, 64, 256, 1024, 4096}) {
    const double perSecond = processes * 2 * 1000.0 / static_cast<double>(callerPollInterval(processes).count());
    INFO(processes << " processes: " << perSecond << " requests a second");
    CHECK(perSecond <= std::max(2000.0, processes * 2.0));
  }
  // Not registered: answers are not waited for.
  CHECK(braid::core::liveAnswerSeconds(nullptr) == 0);
}

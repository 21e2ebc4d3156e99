#pragma once
// A two-rank harness for transport tests. A scenario is one function that both ranks run,
// each with its own transport instance: as two threads of this process, or as this process
// (rank 0) and a forked child (rank 1). Blobs and cues travel over a side channel (an
// in-memory queue or a pipe), never over the transport under test.
//
// Scenarios report failure by returning a message instead of using Catch2 assertions,
// which are neither thread-safe nor meaningful in a forked child. Every wait has a
// deadline, so a broken transport fails a test instead of hanging it.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "transports/transport.h"

namespace braid::transport::test {

enum class Mode { kThreads, kProcesses };
const char* modeName(Mode m);

// Whether `f` can connect two ranks in `mode`, judged by its own canConnect: threads share
// a pid, processes do not.
bool supportsMode(const TransportFactory& f, Mode mode);

// A message pipe between the two ranks of a pair.
class SideChannel {
 public:
  virtual ~SideChannel() = default;
  // False when the other side is gone.
  virtual bool send(const std::string& msg) = 0;
  // False on deadline or when the other side is gone.
  virtual bool recv(std::string* msg, Deadline deadline) = 0;
};

// What a scenario gets: its rank, a transport, and (after setupPair) connections to and
// from the peer, one per channel.
struct Endpoint {
  int rank = 0;
  int peer = 1;
  Mode mode = Mode::kThreads;
  const TransportFactory* factory = nullptr;
  TransportConfig cfg;
  SideChannel* side = nullptr;
  std::unique_ptr<Transport> transport;
  std::vector<std::unique_ptr<Connection>> send;  // to peer, by channel
  std::vector<std::unique_ptr<Connection>> recv;  // from peer, by channel
  // A scenario where a rank dies on purpose sets this: the end-of-test barrier is skipped.
  bool skipFinalBarrier = false;
};

// Both ranks: createRecv on every channel, swap blobs, connectSend, barrier, establish.
// Returns "" or what failed.
std::string setupPair(Endpoint& ep, int channels, double timeoutSec = 20);

// A cue to the peer and the wait for it; both fail the scenario on timeout.
std::string signalPeer(Endpoint& ep, const std::string& cue);
std::string waitPeer(Endpoint& ep, const std::string& cue, double timeoutSec = 30);

using Scenario = std::function<std::string(Endpoint&)>;

// Runs `scenario` on ranks 0 and 1 with config `cfg` (rank, nranks filled in here).
// Returns "" on success, "skip: why" when the scenario skipped itself on both ranks, or the
// failures of either rank.
std::string runPair(const TransportFactory& factory, Mode mode, const TransportConfig& cfg,
                    const Scenario& scenario, double timeoutSec = 120);

// The registered transport called `name` (registry()), or nullptr.
const TransportFactory* registeredFactory(const std::string& name);

// A nonce no other test in this run (or a concurrent one) uses.
uint64_t freshNonce();

// One side of a two-rank pair for the transport-specific tests: 4 slots of 4 KiB, a 5 s
// connect timeout, on 127.0.0.1 (off the host's real network).
TransportConfig loopbackPairConfig(int rank, uint64_t nonce);

// Runs `scenario` in threads over each transport of `names` built here that pairs threads
// (ucx is a plugin that may not be), with `cfg` and a fresh nonce each: the transports it
// ran on, with runPair's result for each; scenarios that skipped themselves are left out.
std::vector<std::pair<std::string, std::string>> runOnThreadPairs(const std::vector<std::string>& names,
                                                                  const TransportConfig& cfg,
                                                                  const Scenario& scenario);

// Sleeps until `c` may be ready (forSend: to send; else to receive), at most `capMillis`.
// Uses the connection's WaitHandle: poll for an fd, futex for a futex word.
void waitReady(Connection& c, bool forSend, int capMillis);

// Blocking helpers over the non-blocking API, each bounded by `deadline`.
Status reserveSlot(Connection& c, Slot* s, Deadline deadline);
Status sendSlot(Connection& c, const void* data, size_t bytes, uint64_t tag, Deadline deadline);
// Leaves the slot unreleased.
// With `dst`: peekRecvInto, asking the payload (`bytes` long) to land there.
Status recvSlot(Connection& c, Slot* s, Deadline deadline, void* dst = nullptr, size_t bytes = 0);
Status flush(Connection& c, Deadline deadline);

// Deterministic payloads: byte i of stream `seed` is the same wherever it is generated.
void fillPattern(void* dst, size_t bytes, uint64_t seed, uint64_t offset = 0);
// Index of the first byte that differs from the pattern, or -1.
int64_t checkPattern(const void* src, size_t bytes, uint64_t seed, uint64_t offset = 0);

std::string describe(const Status& s);

// A connection that passes every call to the one it wraps.
class Forwarding : public Connection {
 public:
  explicit Forwarding(Connection* inner) : in_(inner) {}

  size_t slotBytes() const override { return in_->slotBytes(); }
  Status reserveSend(Slot* s) override { return in_->reserveSend(s); }
  Status postSend(const Slot& s, size_t bytes) override { return in_->postSend(s, bytes); }
  Status peekRecv(Slot* s) override { return in_->peekRecv(s); }
  Status peekRecvInto(Slot* s, void* dst, size_t bytes) override { return in_->peekRecvInto(s, dst, bytes); }
  Status releaseRecv(const Slot& s) override { return in_->releaseRecv(s); }
  Status expectRecv(size_t ahead, void* dst, size_t bytes) override { return in_->expectRecv(ahead, dst, bytes); }
  bool reducesOnArrival() const override { return in_->reducesOnArrival(); }
  Status peekRecvReduce(Slot* s, void* dst, size_t bytes, const ArrivalReduce& r) override {
    return in_->peekRecvReduce(s, dst, bytes, r);
  }
  Status expectReduce(size_t ahead, void* dst, size_t bytes, const ArrivalReduce& r) override {
    return in_->expectReduce(ahead, dst, bytes, r);
  }
  bool takesAnnouncements() const override { return in_->takesAnnouncements(); }
  uint64_t tagMask() const override { return in_->tagMask(); }
  size_t maxMessageBytes() const override { return in_->maxMessageBytes(); }
  Status peekTag(uint64_t* tag) override { return in_->peekTag(tag); }
  Status progress() override { return in_->progress(); }
  bool flushed() const override { return in_->flushed(); }
  bool seesPeerFailure() const override { return in_->seesPeerFailure(); }
  WaitHandle waitHandle(bool forSend) override { return in_->waitHandle(forSend); }
  void disarm(bool forSend) override { in_->disarm(forSend); }
  int peer() const override { return in_->peer(); }
  bool inReceiverMemory() const override { return in_->inReceiverMemory(); }
  MemoryRange slotMemory() const override { return in_->slotMemory(); }

 protected:
  Connection* in_;
};

// A send connection that counts the messages posted on it.
class CountedSend final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  Status postSend(const Slot& s, size_t bytes) override {
    ++posted;
    return in_->postSend(s, bytes);
  }
  size_t posted = 0;
};

}  // namespace braid::transport::test

// Scenario checks: return a message naming the file, line and condition.
#define T_EXPECT(cond, detail)                                                                       \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      return std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": expected " #cond ": " +     \
             std::string(detail);                                                                    \
    }                                                                                                \
  } while (0)

#define T_OK(expr)                                                                                   \
  do {                                                                                               \
    ::braid::Status t_status_ = (expr);                                                              \
    if (!t_status_.isOk()) {                                                                         \
      return std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #expr " failed: " +       \
             ::braid::transport::test::describe(t_status_);                                          \
    }                                                                                                \
  } while (0)

#define T_RUN(expr)                              \
  do {                                           \
    std::string t_err_ = (expr);                 \
    if (!t_err_.empty()) return t_err_;          \
  } while (0)

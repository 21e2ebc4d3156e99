// How a channel waits for its last sends to leave (the executor's flush) over a connection
// that is not a memory transport: it spins, yields and only then sleeps on the connection's
// wait handle, as every other wait does. A flush that polled the handle early slept while
// ranks outnumbered cores, when the rank that was to take the message needed the core.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <pthread.h>
#include <sched.h>

#include <cstdint>
#include <vector>

#include "common/clock.h"
#include "common/core_yield.h"
#include "exec/executor.h"
#include "support/busy_core.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::exec;
using namespace braid::transport;

namespace {

// A send connection to rank 1 whose message leaves only after `holdFor` calls of progress()
// (a rendezvous the receiver has yet to read, a socket still full), counting how often the
// executor asks for its wait handle: an eventfd that never becomes readable, so a poll on it
// sleeps its whole timeout. It also notes whether, before the first ask, two calls of
// progress() were a lost slice or more apart: the flush yields between them, and a yield
// that lost the core ends a wait's yields, which sleeps from then on (common/core_yield.h).
// A test process beside others (CI's) sees that now and then.
class HeldSend final : public Connection {
 public:
  explicit HeldSend(int holdFor) : holdFor_(holdFor), efd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~HeldSend() override {
    if (efd_ >= 0) close(efd_);
  }
  size_t slotBytes() const override { return sizeof(slot_); }
  Status reserveSend(Slot* s) override {
    s->data = slot_;
    s->bytes = sizeof(slot_);
    return Status::ok();
  }
  Status postSend(const Slot&, size_t bytes) override {
    sent += bytes;
    pending_ = holdFor_;
    return Status::ok();
  }
  Status peekRecv(Slot*) override { return Status(Code::kInternal, "a send connection receives nothing"); }
  Status releaseRecv(const Slot&) override { return Status(Code::kInternal, "a send connection receives nothing"); }
  Status progress() override {
    if (pending_ > 0) --pending_;
    const int64_t now = nowNanos();
    if (lastProgressNs_ != 0 && now - lastProgressNs_ > maxGapNs_) maxGapNs_ = now - lastProgressNs_;
    lastProgressNs_ = now;
    return Status::ok();
  }
  bool flushed() const override { return pending_ == 0; }
  WaitHandle waitHandle(bool) override {
    if (++handles == 1) firstAfterLostSlice = maxGapNs_ >= kLostSliceNs;
    WaitHandle h;
    h.fd = efd_;
    h.fdEvents = POLLIN;
    return h;
  }
  int peer() const override { return 1; }

  size_t sent = 0;
  int handles = 0;                   // waitHandle calls: the flush's sleeps
  bool firstAfterLostSlice = false;  // the first came after a yield that lost a slice
  // The flush never slept, or slept only from a yield that lost the core on.
  bool sleptOnlyAfterLostSlice() const { return handles == 0 || firstAfterLostSlice; }

 private:
  int holdFor_;
  int pending_ = 0;
  int64_t lastProgressNs_ = 0;
  int64_t maxGapNs_ = 0;  // the longest time between two calls of progress()
  int efd_;
  uint8_t slot_[4096];
};

// Rank 0 sends 64 bytes of its input to rank 1 and is done once the send has left.
Schedule sendOnly() {
  Schedule s;
  s.dtype = DataType::kFloat32;
  s.op = ReduceOp::kSum;
  s.algorithm = "send";
  s.channels.resize(1);
  s.channels[0].rounds = 1;
  Step send;
  send.prim = Prim::kSend;
  send.peerOut = 1;
  send.src = Region{Buf::kInput, 0, 64};
  s.channels[0].steps = {send};
  return s;
}

// Runs the send over `conn` under `wait`; the run's status.
Status runSend(HeldSend& conn, WaitPolicy wait) {
  const Schedule s = sendOnly();
  std::vector<float> input(16, 1.0f), output(16, 0.0f);
  Buffers b;
  b.input = input.data();
  b.output = output.data();
  ChannelLinks links;
  links.sendTo = {nullptr, &conn};
  links.recvFrom = {nullptr, nullptr};
  RunContext ctx;
  ctx.rank = 0;
  ctx.sliceBytes = conn.slotBytes();
  ctx.deadline = Deadline::after(30.0);
  ctx.wait = wait;
  return runChannel(s, 0, b, links, ctx);
}

// Ranks outnumber cores: no spinning, a yield phase far longer than a flush takes.
WaitPolicy crowded() {
  WaitPolicy w;
  w.spinMicros = 0;
  w.yieldMicros = 10 * 1000 * 1000;
  return w;
}

}  // namespace

TEST_CASE("a flush yields before it sleeps on a connection's wait handle", "[transport][executor]") {
  // Ranks outnumber cores (crowded()). The flush goes by yields alone, and sleeps on the
  // handle only from a yield that lost the core for a slice on (none on an idle machine;
  // CI's, running other tests, saw one).
  // A pause of yields left by an earlier test (a busy machine: common/foreign_load.h) would
  // have the flush sleep without one.
  braid::resetYieldPause();
  HeldSend yielding(5000);
  REQUIRE(runSend(yielding, crowded()).isOk());
  CHECK(yielding.sent == 64);
  CHECK(yielding.sleptOnlyAfterLostSlice());

  // The same with a spin phase as long: no sleep either.
  HeldSend spinning(5000);
  WaitPolicy roomy;
  roomy.spinMicros = 10 * 1000 * 1000;
  roomy.yieldMicros = 0;
  REQUIRE(runSend(spinning, roomy).isOk());
  CHECK(spinning.handles == 0);

  // Neither phase: the flush sleeps on the handle from the start, once per try.
  HeldSend sleeping(20);
  WaitPolicy none;
  none.spinMicros = 0;
  none.yieldMicros = 0;
  REQUIRE(runSend(sleeping, none).isOk());
  CHECK(sleeping.sent == 64);
  CHECK(sleeping.handles >= 10);
}

// Beside a thread that never waits, on the same core, yields lose slices: the flush sleeps
// from the first that does, and not before.
TEST_CASE("beside a busy thread a flush sleeps only after a yield that lost the core", "[transport][executor]") {
  cpu_set_t before;
  CPU_ZERO(&before);
  REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof before, &before) == 0);
  int sleeps = 0;
  {
    braid::testing::BusyCore busy;
    REQUIRE(busy.pinHere());
    for (int run = 0; run < 3; ++run) {
      // Each run from no pause: one a run before started (yields that lost slices while
      // something outside this process kept the CPUs busy, as CI's other tests do) would have
      // this one sleep at once, without a yield of its own that lost the core.
      braid::resetYieldPause();
      HeldSend held(5000);
      REQUIRE(runSend(held, crowded()).isOk());
      CHECK(held.sleptOnlyAfterLostSlice());
      sleeps += held.handles;
    }
  }
  pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  CHECK(sleeps > 0);  // the busy thread took the core at some yield
}

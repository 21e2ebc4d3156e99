// How a channel waits for its last sends to leave (the executor's flush) over a connection
// that is not a memory transport: it spins, yields and only then sleeps on the connection's
// wait handle, as every other wait does. A flush that polled the handle early slept while
// ranks outnumbered cores, when the rank that was to take the message needed the core.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "exec/executor.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::exec;
using namespace braid::transport;

namespace {

// A send connection to rank 1 whose message leaves only after `holdFor` calls of progress()
// (a rendezvous the receiver has yet to read, a socket still full), counting how often the
// executor asks for its wait handle: an eventfd that never becomes readable, so a poll on it
// sleeps its whole timeout.
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
    return Status::ok();
  }
  bool flushed() const override { return pending_ == 0; }
  WaitHandle waitHandle(bool) override {
    ++handles;
    WaitHandle h;
    h.fd = efd_;
    h.fdEvents = POLLIN;
    return h;
  }
  int peer() const override { return 1; }

  size_t sent = 0;
  int handles = 0;  // waitHandle calls: the flush's sleeps

 private:
  int holdFor_;
  int pending_ = 0;
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

}  // namespace

TEST_CASE("a flush yields before it sleeps on a connection's wait handle", "[transport][executor]") {
  // Ranks outnumber cores: no spinning, a yield phase far longer than the flush takes. The
  // flush must go by yields alone, never sleeping on the handle.
  HeldSend yielding(5000);
  WaitPolicy crowded;
  crowded.spinMicros = 0;
  crowded.yieldMicros = 10 * 1000 * 1000;
  REQUIRE(runSend(yielding, crowded).isOk());
  CHECK(yielding.sent == 64);
  CHECK(yielding.handles == 0);

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

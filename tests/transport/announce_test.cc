// How the executor announces receives ahead (Connection::expectRecv), over real transport
// pairs: it keeps the contract a transport relies on when it lands a message early. A
// receive connection wrapped here scribbles over every announced landing the moment it is
// announced, as a transport that lands the message then may, and checks that each peek asks
// for what was announced. A ring allreduce and allgather still come out exact, in place or
// not, in one round or several; and a landing that the slice before it still reads is not
// announced early, or the scribble would show in the result. A channel's first receive is
// announced before its first step, unless a step before it reads or writes its landing.
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "exec/executor.h"
#include "harness.h"
#include "pair_channel.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::exec;
using namespace braid::transport;
using namespace braid::transport::test;

namespace {

class Announced final : public Forwarding {
 public:
  using Forwarding::Forwarding;

  // A run starts: its first message counts as announced before any send when it is
  // announced while `sent` still reads what it reads now.
  void markRun(const size_t* sent) {
    sent_ = sent;
    sentAtMark_ = sent ? *sent : 0;
    runFirst_ = released_;
  }

  Status peekRecv(Slot* s) override { return peek(s, nullptr, 0); }
  Status peekRecvInto(Slot* s, void* dst, size_t bytes) override { return peek(s, dst, bytes); }
  Status releaseRecv(const Slot& s) override {
    words_.erase(released_++);
    return in_->releaseRecv(s);
  }
  Status expectRecv(size_t ahead, void* dst, size_t bytes) override {
    const uint64_t m = released_ + ahead;
    if (ahead > 0 && !words_.count(m - 1)) fault("message " + std::to_string(m) + " announced before the one before it");
    auto it = words_.find(m);
    if (it != words_.end()) {
      if (it->second.dst != dst || it->second.bytes != bytes)
        fault("message " + std::to_string(m) + " announced again with other words");
      return in_->expectRecv(ahead, dst, bytes);
    }
    words_[m] = Word{dst, bytes};
    if (ahead > 0) ++aheadCount;
    if (m == runFirst_ && sent_ && *sent_ == sentAtMark_) ++beforeSends;
    if (dst) std::memset(dst, 0xA5, bytes);
    return in_->expectRecv(ahead, dst, bytes);
  }
  bool takesAnnouncements() const override { return true; }  // it scribbles on every landing
  // Receives announced as they are (expectRecv); those of reductions handed to the
  // transport are arrival_test.cc's.
  bool reducesOnArrival() const override { return false; }

  size_t aheadCount = 0;  // messages first announced while another was still to be taken
  size_t beforeSends = 0;  // runs whose first message was announced before they sent any
  std::string faults;

 private:
  struct Word {
    void* dst;
    size_t bytes;
  };
  Status peek(Slot* s, void* dst, size_t bytes) {
    auto it = words_.find(released_);
    // peekRecv carries no length; peekRecvInto the one announced.
    if (it != words_.end() && (it->second.dst != dst || (dst && it->second.bytes != bytes)))
      fault("message " + std::to_string(released_) + " asked for with other words than announced");
    return dst ? in_->peekRecvInto(s, dst, bytes) : in_->peekRecv(s);
  }
  void fault(const std::string& f) {
    if (faults.empty()) faults = f;
  }
  uint64_t released_ = 0;
  std::map<uint64_t, Word> words_;
  const size_t* sent_ = nullptr;
  size_t sentAtMark_ = 0;
  uint64_t runFirst_ = ~uint64_t{0};
};

algorithms::Layout layoutOf(int rank, size_t roundBytes) { return pairRingLayout(rank, roundBytes); }
float valueOf(int rank, int run, size_t i) { return pairValue(rank, run, i); }
Schedule oneChannel(const char* name, std::vector<Step> steps) { return oneChannelSum(name, std::move(steps)); }

// A schedule whose second receive lands where the first one's reduction reads: one slice of
// `bytes` each, the output's second half read by step 2 and then overwritten by step 3.
Schedule readThenLand(int peer, size_t bytes) {
  return oneChannel("read then land",
                    {Step{Prim::kSend, -1, peer, Region{Buf::kInput, 0, bytes}, {}},
                     Step{Prim::kSend, -1, peer, Region{Buf::kInput, bytes, bytes}, {}},
                     Step{Prim::kRecvReduce, peer, -1, Region{Buf::kOutput, bytes, bytes}, Region{Buf::kOutput, 0, bytes}},
                     Step{Prim::kRecv, peer, -1, {}, Region{Buf::kOutput, bytes, bytes}}});
}

// A schedule whose first receive lands where the send before it reads: the rank's output
// is sent, then overwritten with the peer's.
Schedule sendThenLand(int peer, size_t bytes) {
  return oneChannel("send then land", {Step{Prim::kSend, -1, peer, Region{Buf::kOutput, 0, bytes}, {}},
                                       Step{Prim::kRecv, peer, -1, {}, Region{Buf::kOutput, 0, bytes}}});
}

std::string runCases(Endpoint& ep) {
  std::string err = setupPair(ep, 1);
  if (!err.empty()) return err;
  Announced in(ep.recv[0].get());
  CountedSend out(ep.send[0].get());
  PairChannel channel(ep, &in, &out, 16 * 1024);
  auto run = [&](const Schedule& s, const std::string& what, const void* input, void* output, bool prepared) {
    std::string e = channel.run(s, what, input, output, prepared, [&] { in.markRun(&out.posted); });
    if (e.empty() && !in.faults.empty()) e = what + ": " + in.faults;
    return e;
  };

  // Ring allreduce, 2 ranks: slices of 16 KiB, two per step in one round, or four per step
  // in rounds of one slice. A round sends at most half the FIFO's messages ahead.
  struct Shape {
    size_t count;
    size_t roundBytes;
  };
  for (const Shape& shape : {Shape{2 * 6000, 32 << 10}, Shape{3 * 8192 + 12, 16 << 10}}) {
    std::string e = ringAllreduceRuns(ep.rank, shape.count, shape.roundBytes, run);
    if (!e.empty()) return e;
  }
  if (in.aheadCount == 0) return "the ring allreduce announced no receive ahead";
  // Each rank sends its first slice before it receives one: 16 runs, every first receive
  // announced before it.
  if (in.beforeSends != 16)
    return "the ring allreduce announced " + std::to_string(in.beforeSends) + " of 16 first receives before its sends";

  // Ring allgather: the peer's block lands in the output, slice by slice.
  for (bool inPlace : {false, true}) {
    const size_t count = 2 * 4096 + 5;  // blocks of 2 slices and a bit, in rounds of 2
    algorithms::Request req;
    req.coll = algorithms::Collective::kAllGather;
    req.count = count;
    req.inPlace = inPlace;
    auto s = algorithms::allgatherRing(req, layoutOf(ep.rank, 32 << 10));
    if (!s.isOk()) return "allgatherRing: " + s.status().toString();
    const std::string what = std::string("allgather") + (inPlace ? ", in place" : "");
    std::vector<float> output(2 * count, -1.0f), own(count);
    for (size_t i = 0; i < count; ++i) own[i] = valueOf(ep.rank, 5, i);
    float* input = own.data();
    if (inPlace) {
      std::memcpy(output.data() + ep.rank * count, own.data(), count * sizeof(float));
      input = output.data() + ep.rank * count;
    }
    const size_t early = in.beforeSends;
    std::string e = run(s.value(), what, input, output.data(), false);
    if (!e.empty()) return e;
    if (in.beforeSends != early + 1) return what + ": the first receive was not announced before the first send";
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < count; ++i)
        if (output[r * count + i] != valueOf(r, 5, i))
          return what + ": rank " + std::to_string(r) + "'s element " + std::to_string(i) + " is " +
                 std::to_string(output[r * count + i]);
  }

  // The landing the slice before it reads.
  const size_t half = 4096;  // floats: one 16 KiB slice
  const Schedule s = readThenLand(ep.peer, half * sizeof(float));
  for (bool prepared : {false, true}) {
    std::vector<float> input(2 * half), output(2 * half);
    for (size_t i = 0; i < 2 * half; ++i) {
      input[i] = valueOf(ep.rank, 7, i);
      output[i] = 0.5f;
    }
    const std::string what = std::string("a landing read by the slice before") + (prepared ? ", prepared" : "");
    std::string e = run(s, what, input.data(), output.data(), prepared);
    if (!e.empty()) return e;
    for (size_t i = 0; i < half; ++i) {
      if (output[i] != valueOf(ep.peer, 7, i) + 0.5f)
        return what + ": element " + std::to_string(i) + " is " + std::to_string(output[i]);
      if (output[half + i] != valueOf(ep.peer, 7, half + i))
        return what + ": element " + std::to_string(half + i) + " is " + std::to_string(output[half + i]);
    }
  }

  // The first landing a send before it reads: announced only by its own step.
  for (bool prepared : {false, true}) {
    std::vector<float> input(1), output(half);
    for (size_t i = 0; i < half; ++i) output[i] = valueOf(ep.rank, 8, i);
    const std::string what = std::string("a first landing the send before it reads") + (prepared ? ", prepared" : "");
    const size_t early = in.beforeSends;
    std::string e = run(sendThenLand(ep.peer, half * sizeof(float)), what, input.data(), output.data(), prepared);
    if (!e.empty()) return e;
    if (in.beforeSends != early) return what + ": announced before the send";
    for (size_t i = 0; i < half; ++i)
      if (output[i] != valueOf(ep.peer, 8, i))
        return what + ": element " + std::to_string(i) + " is " + std::to_string(output[i]);
  }
  return "";
}

}  // namespace

TEST_CASE("receives announced ahead leave alone what the steps before them read", "[transport][executor]") {
  TransportConfig cfg = loopbackPairConfig(0, 0);
  cfg.slotBytes = 64 * 1024;  // UCX posts receives on demand from this size, and acts on announcements
  cfg.nslots = 4;
  for (const auto& [name, result] : runOnThreadPairs({"shm", "ucx"}, cfg, runCases)) {
    INFO(name);
    CHECK(result == "");
  }
}

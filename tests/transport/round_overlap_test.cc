// How the executor runs a ring's rounds (ChannelPlan::overlapRounds), over real transport
// pairs: round r+1's leading send goes out before round r's last receive, so that the ring
// does not drain between rounds, but only where both rounds' slices fit in the FIFO
// (RunContext::fifoSlots) and where that send reads nothing round r's last receive
// writes. Each case checks the result and, from the messages posted by the time a receive
// is taken, which order the executor chose.
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "exec/executor.h"
#include "harness.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::exec;
using namespace braid::transport;
using namespace braid::transport::test;

namespace {

// A receive connection that notes, for each message it releases, how many messages this
// rank had posted by then.
class NotedRecv final : public Forwarding {
 public:
  NotedRecv(Connection* inner, const size_t* posted) : Forwarding(inner), posted_(posted) {}
  Status releaseRecv(const Slot& s) override {
    postedAt.push_back(*posted_);
    return in_->releaseRecv(s);
  }
  std::vector<size_t> postedAt;

 private:
  const size_t* posted_;
};

constexpr size_t kSlot = 4096;  // the harness's slots, and the executor's slices here

float valueOf(int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 17)); }

Schedule oneChannel(std::vector<Step> steps, int rounds) {
  Schedule s;
  s.dtype = DataType::kFloat32;
  s.op = ReduceOp::kSum;
  s.algorithm = "rounds";
  s.channels.resize(1);
  s.channels[0].steps = std::move(steps);
  s.channels[0].rounds = rounds;
  s.channels[0].overlapRounds = true;
  return s;
}

std::string runCases(Endpoint& ep) {
  std::string err = setupPair(ep, 1);
  if (!err.empty()) return err;
  CountedSend out(ep.send[0].get());
  NotedRecv in(ep.recv[0].get(), &out.posted);
  ChannelLinks links;
  links.sendTo.assign(2, nullptr);
  links.recvFrom.assign(2, nullptr);
  links.sendTo[ep.peer] = &out;
  links.recvFrom[ep.peer] = &in;
  auto run = [&](const Schedule& s, int fifoSlots, const void* input, void* output) {
    out.posted = 0;
    in.postedAt.clear();
    RunContext ctx;
    ctx.rank = ep.rank;
    ctx.sliceBytes = kSlot;
    ctx.fifoSlots = fifoSlots;
    ctx.tag = (static_cast<uint64_t>(fifoSlots + 1) << 32) | 5;
    ctx.deadline = Deadline::after(30);
    Buffers b;
    b.input = input;
    b.output = output;
    return runChannel(s, 0, b, links, ctx);
  };

  // A 2-rank ring allreduce whose chunks take 2 rounds of 2 slices: send, receive-reduce-
  // send, receive. This rank takes the peer's messages 0-1 in round 0's middle step and 2-3
  // in its last; by message 2, it has posted its 4 of round 0 and, running ahead, round
  // 1's first 2. Where the FIFO (4 slots) cannot hold both rounds' 2, or the depth is not
  // known, it has not.
  {
    algorithms::Layout layout;
    layout.rank = ep.rank;
    layout.nranks = 2;
    layout.rings = {{0, 1}};
    layout.hostOf = {0, 0};
    layout.roundBytes = 2 * kSlot;
    algorithms::Request req;
    req.coll = algorithms::Collective::kAllReduce;
    req.count = 8 * kSlot / sizeof(float);
    for (bool inPlace : {false, true}) {
      req.inPlace = inPlace;
      auto s = algorithms::allreduceRing(req, layout);
      if (!s.isOk()) return "allreduceRing: " + s.status().toString();
      T_EXPECT(s.value().channels[0].rounds == 2, "rounds " + std::to_string(s.value().channels[0].rounds));
      for (int fifo : {4, 3, 0}) {
        const std::string what =
            std::string("ring allreduce") + (inPlace ? " in place" : "") + ", FIFO of " + std::to_string(fifo);
        std::vector<float> input(req.count), output(req.count, -1.0f);
        for (size_t i = 0; i < req.count; ++i) input[i] = valueOf(ep.rank, i);
        float* res = inPlace ? input.data() : output.data();
        T_OK(run(s.value(), fifo, input.data(), res));
        for (size_t i = 0; i < req.count; ++i)
          T_EXPECT(res[i] == valueOf(0, i) + valueOf(1, i), what + ": element " + std::to_string(i));
        T_EXPECT(in.postedAt.size() == 8, what + ": " + std::to_string(in.postedAt.size()) + " messages taken");
        const size_t want = fifo == 4 ? 6 : 4;
        T_EXPECT(in.postedAt[2] == want, what + ": " + std::to_string(in.postedAt[2]) + " posted by message 2");
      }
    }
  }

  // Each rank sends [0, 2h) of its output in two rounds and receives into [h, 3h): round
  // 1 sends what round 0 received, so it must wait for that receive. The same with the
  // receive into [2h, 4h), which round 1's send does not read, runs ahead.
  const size_t h = kSlot / sizeof(float);
  for (bool clash : {true, false}) {
    const size_t landing = (clash ? 1 : 2) * h * sizeof(float);
    const Schedule s = oneChannel({Step{Prim::kSend, -1, ep.peer, Region{Buf::kOutput, 0, 2 * kSlot}, {}},
                                   Step{Prim::kRecv, ep.peer, -1, {}, Region{Buf::kOutput, landing, 2 * kSlot}}},
                                  2);
    const std::string what = clash ? "a send of what the receive before it lands" : "a send clear of the landing";
    std::vector<float> buf(4 * h, -1.0f);
    for (size_t i = 0; i < 2 * h; ++i) buf[i] = valueOf(ep.rank, i);
    T_OK(run(s, 4, nullptr, buf.data()));
    T_EXPECT(in.postedAt.size() == 2, what + ": " + std::to_string(in.postedAt.size()) + " messages taken");
    T_EXPECT(in.postedAt[0] == (clash ? 1u : 2u), what + ": " + std::to_string(in.postedAt[0]) + " posted by message 0");
    for (size_t i = 0; i < h; ++i) {
      if (clash) {
        // [h, 2h): the peer's first h; [2h, 3h): this rank's own first h, back from the peer.
        T_EXPECT(buf[h + i] == valueOf(ep.peer, i), what + ": element " + std::to_string(h + i));
        T_EXPECT(buf[2 * h + i] == valueOf(ep.rank, i), what + ": element " + std::to_string(2 * h + i));
      } else {
        T_EXPECT(buf[2 * h + i] == valueOf(ep.peer, i), what + ": element " + std::to_string(2 * h + i));
        T_EXPECT(buf[3 * h + i] == valueOf(ep.peer, h + i), what + ": element " + std::to_string(3 * h + i));
      }
    }
  }
  return "";
}

}  // namespace

TEST_CASE("a ring's next round sends before its last receive where the FIFO holds both", "[transport][executor]") {
  TransportConfig cfg = loopbackPairConfig(0, 0);
  cfg.slotBytes = kSlot;
  cfg.nslots = 4;
  const auto ran = runOnThreadPairs({"shm", "tcp", "ucx"}, cfg, runCases);
  for (const auto& [name, result] : ran) {
    INFO(name);
    CHECK(result == "");
  }
  CHECK(ran.size() >= 2);  // shm and tcp are built in
}

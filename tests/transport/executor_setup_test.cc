// exec::prepareChannel: a channel worked out once and run again and again (the way the
// communicator runs a loop of small calls) moves the same bytes as runChannel working
// everything out on each call, over real transport pairs; and the setup says when a channel
// is not one slice per step, or lacks a connection.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "harness.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::exec;
using namespace braid::transport;
using namespace braid::transport::test;

namespace {

// One rank's half of a two-rank float sum: send the input to the peer, then add the peer's
// input to ours into the output, in `rounds` rounds.
Schedule exchange(int peer, size_t bytes, int rounds) {
  Schedule s;
  s.dtype = DataType::kFloat32;
  s.op = ReduceOp::kSum;
  s.algorithm = "exchange";
  s.channels.resize(1);
  ChannelPlan& ch = s.channels[0];
  ch.rounds = rounds;
  Step send;
  send.prim = Prim::kSend;
  send.peerOut = peer;
  send.src = Region{Buf::kInput, 0, bytes};
  Step recv;
  recv.prim = Prim::kRecvReduce;
  recv.peerIn = peer;
  recv.src = Region{Buf::kInput, 0, bytes};
  recv.dst = Region{Buf::kOutput, 0, bytes};
  ch.steps = {send, recv};
  return s;
}

struct Case {
  size_t bytes;
  int rounds;
  bool singleSlices;  // what prepareChannel must find with 4 KiB slices
};

// Runs every case on one rank: the prepared channel three times and the unprepared one
// once, each with new values, checking every element. "" or what went wrong.
std::string runCases(Endpoint& ep) {
  std::string err = setupPair(ep, 1);
  if (!err.empty()) return err;
  ChannelLinks links;
  links.sendTo.assign(2, nullptr);
  links.recvFrom.assign(2, nullptr);
  links.sendTo[ep.peer] = ep.send[0].get();
  links.recvFrom[ep.peer] = ep.recv[0].get();
  RunContext ctx;
  ctx.rank = ep.rank;
  ctx.sliceBytes = ep.cfg.slotBytes;
  const Case cases[] = {{8, 1, true}, {4096, 1, true}, {12288, 1, false}, {8, 2, false}, {1024, 2, false}};
  uint64_t seq = 0;
  for (const Case& c : cases) {
    const std::string what = std::to_string(c.bytes) + " B in " + std::to_string(c.rounds) + " round(s)";
    const Schedule s = exchange(ep.peer, c.bytes, c.rounds);
    const ChannelSetup setup = prepareChannel(s, 0, links, ctx);
    if (!setup.links.isOk()) return what + ": setup refused the links: " + setup.links.toString();
    if (setup.singleSlices != c.singleSlices) return what + ": singleSlices is " + std::to_string(setup.singleSlices);
    if (setup.active.size() != 2) return what + ": " + std::to_string(setup.active.size()) + " active connections";
    // This schedule reduces, so a memory transport's sends never come from the caller's
    // memory (the executor's directPays); a stream transport's may.
    const auto fromUser = [](const Connection& c) { return c.sendsFromUser() && !c.inReceiverMemory(); };
    const bool anyFromUser = fromUser(*ep.send[0]) || fromUser(*ep.recv[0]);
    if (setup.userSends != anyFromUser) return what + ": userSends disagrees with the connections";
    const size_t n = c.bytes / sizeof(float);
    for (int run = 0; run < 4; ++run) {
      std::vector<float> in(n), out(n, -1.0f);
      // Both ranks' values for this run, so each can check the sum.
      auto value = [&](int rank, size_t i) { return static_cast<float>(rank * 1000 + run * 10 + static_cast<int>(i % 7)); };
      for (size_t i = 0; i < n; ++i) in[i] = value(ep.rank, i);
      Buffers b;
      b.input = in.data();
      b.output = out.data();
      RunContext rc = ctx;
      rc.tag = (++seq << 32) | 7;
      rc.deadline = Deadline::after(20);
      // The last run works everything out itself, as a call without a setup does.
      Status st = runChannel(s, 0, b, links, rc, run < 3 ? &setup : nullptr);
      if (!st.isOk()) return what + ", run " + std::to_string(run) + ": " + st.toString();
      for (size_t i = 0; i < n; ++i) {
        if (out[i] != value(0, i) + value(1, i))
          return what + ", run " + std::to_string(run) + ": element " + std::to_string(i) + " is " +
                 std::to_string(out[i]);
      }
    }
  }
  // The sends' decisions kept between runs (DirectSends): reused while the buffers stay,
  // worked out again when they move; in place, the send's bytes are written later by the
  // receive, so it must not be sent from the caller's memory.
  {
    const size_t n = 1024;
    const Schedule s = exchange(ep.peer, n * sizeof(float), 1);
    const ChannelSetup setup = prepareChannel(s, 0, links, ctx);
    const bool direct = ep.send[0]->sendsFromUser() && !ep.send[0]->inReceiverMemory();
    DirectSends kept;
    std::vector<float> a(n), b(n), c(n);
    struct Run {
      float* in;
      float* out;
      uint64_t workedOut;  // after the run
      bool sendsDirect;
    };
    const Run runs[] = {{a.data(), b.data(), 1, direct}, {a.data(), b.data(), 1, direct},
                        {c.data(), c.data(), 2, false},  {a.data(), c.data(), 3, direct},
                        {a.data(), c.data(), 3, direct}};
    int k = 0;
    for (const Run& r : runs) {
      const std::string what = "kept decisions, run " + std::to_string(k++);
      auto value = [&](int rank, size_t i) { return static_cast<float>(rank * 100 + k * 10 + static_cast<int>(i % 5)); };
      for (size_t i = 0; i < n; ++i) r.in[i] = value(ep.rank, i);
      if (r.out != r.in) std::fill(r.out, r.out + n, -1.0f);
      Buffers bufs;
      bufs.input = r.in;
      bufs.output = r.out;
      RunContext rc = ctx;
      rc.tag = (++seq << 32) | 7;
      rc.deadline = Deadline::after(20);
      rc.directSends = &kept;
      Status st = runChannel(s, 0, bufs, links, rc, &setup);
      if (!st.isOk()) return what + ": " + st.toString();
      for (size_t i = 0; i < n; ++i) {
        if (r.out[i] != value(0, i) + value(1, i))
          return what + ": element " + std::to_string(i) + " is " + std::to_string(r.out[i]);
      }
      if (!setup.userSends) continue;  // nothing to decide: the executor keeps nothing
      if (!kept.valid || kept.buffers.input != r.in || kept.buffers.output != r.out)
        return what + ": the kept decisions are not for this run's buffers";
      if (kept.workedOut != r.workedOut) return what + ": worked out " + std::to_string(kept.workedOut) + " times";
      if (((kept.bits & 1) != 0) != r.sendsDirect) return what + ": the send from the caller's memory is " +
                                                          std::to_string(kept.bits & 1);
    }
  }
  // A step whose connection is missing: the setup keeps the reason, and a run with it fails
  // with that reason before moving a byte.
  ChannelLinks none;
  none.sendTo.assign(2, nullptr);
  none.recvFrom.assign(2, nullptr);
  const Schedule s = exchange(ep.peer, 8, 1);
  const ChannelSetup bad = prepareChannel(s, 0, none, ctx);
  if (bad.links.isOk()) return "a setup without connections was accepted";
  if (bad.links.message().find("no connection to rank " + std::to_string(ep.peer)) == std::string::npos)
    return "the missing connection was reported as: " + bad.links.toString();
  float x = 1, y = 0;
  Buffers b;
  b.input = &x;
  b.output = &y;
  RunContext rc = ctx;
  rc.deadline = Deadline::after(5);
  Status st = runChannel(s, 0, b, none, rc, &bad);
  if (st.isOk() || st.message() != bad.links.message()) return "a run with the refused setup gave: " + st.toString();
  return "";
}

}  // namespace

TEST_CASE("a channel prepared once runs each call like one worked out per call", "[transport][executor]") {
  for (const auto& [name, result] : runOnThreadPairs({"shm", "tcp", "ucx"}, loopbackPairConfig(0, 0), runCases)) {
    INFO(name);
    CHECK(result == "");
  }
}

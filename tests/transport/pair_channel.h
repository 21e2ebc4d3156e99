#pragma once
// For tests that run executor schedules over a transport pair (harness.h): one channel
// whose two connections the test wraps, ring layouts of the two ranks, and the values each
// rank contributes.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "exec/executor.h"
#include "harness.h"

namespace braid::transport::test {

// A ring of the two ranks with rounds of `roundBytes`.
inline algorithms::Layout pairRingLayout(int rank, size_t roundBytes) {
  algorithms::Layout l;
  l.rank = rank;
  l.nranks = 2;
  l.rings = {{0, 1}};
  l.hostOf = {0, 0};
  l.roundBytes = roundBytes;
  return l;
}

// This rank's value of element i in run `run`.
inline float pairValue(int rank, int run, size_t i) {
  return static_cast<float>(rank * 1000 + run * 10 + static_cast<int>(i % 13));
}

// A float sum of one channel with these steps.
inline exec::Schedule oneChannelSum(const char* name, std::vector<exec::Step> steps) {
  exec::Schedule s;
  s.dtype = DataType::kFloat32;
  s.op = ReduceOp::kSum;
  s.algorithm = name;
  s.channels.resize(1);
  s.channels[0].steps = std::move(steps);
  return s;
}

// Runs schedules on one channel between this rank and its peer, receiving through `in` and
// sending through `out` (the test's wrappers of the pair's connections), in slices of
// `sliceBytes`, with the FIFO's depth known (a ring's rounds overlap); each run with the
// next tag, a 30 s deadline and scratch of its own; `prepared`: through prepareChannel's
// setup. `beforeRun` runs just before each. Returns "" or what failed, prefixed by `what`.
class PairChannel {
 public:
  PairChannel(const Endpoint& ep, Connection* in, Connection* out, size_t sliceBytes) {
    links_.sendTo.assign(2, nullptr);
    links_.recvFrom.assign(2, nullptr);
    links_.sendTo[ep.peer] = out;
    links_.recvFrom[ep.peer] = in;
    ctx_.rank = ep.rank;
    ctx_.sliceBytes = sliceBytes;
    ctx_.fifoSlots = ep.cfg.nslots;
  }

  std::string run(const exec::Schedule& s, const std::string& what, const void* input, void* output, bool prepared,
                  const std::function<void()>& beforeRun = {}) {
    exec::RunContext rc = ctx_;
    rc.tag = (++seq_ << 32) | 9;
    rc.deadline = Deadline::after(30);
    std::vector<char> scratch(s.scratchBytes);
    exec::Buffers b;
    b.input = input;
    b.output = output;
    b.scratch = scratch.data();
    const exec::ChannelSetup setup = exec::prepareChannel(s, 0, links_, ctx_);
    if (beforeRun) beforeRun();
    Status st = exec::runChannel(s, 0, b, links_, rc, prepared ? &setup : nullptr);
    return st.isOk() ? std::string() : what + ": " + st.toString();
  }

 private:
  exec::ChannelLinks links_;
  exec::RunContext ctx_;
  uint64_t seq_ = 0;
};

using RunFn = std::function<std::string(const exec::Schedule&, const std::string& what, const void* input,
                                        void* output, bool prepared)>;

// A ring allreduce of `count` floats in rounds of `roundBytes`, out of place and in place,
// each run straight and prepared, twice: every run through `run`, every result checked.
// Returns "" or what failed.
inline std::string ringAllreduceRuns(int rank, size_t count, size_t roundBytes, const RunFn& run) {
  for (bool inPlace : {false, true}) {
    for (bool prepared : {false, true}) {
      algorithms::Request req;
      req.coll = algorithms::Collective::kAllReduce;
      req.count = count;
      req.inPlace = inPlace;
      auto s = algorithms::allreduceRing(req, pairRingLayout(rank, roundBytes));
      if (!s.isOk()) return "allreduceRing: " + s.status().toString();
      const std::string what = "allreduce of " + std::to_string(count) + " floats, rounds of " +
                               std::to_string(roundBytes) + " B" + (inPlace ? ", in place" : "") +
                               (prepared ? ", prepared" : "");
      for (int r = 0; r < 2; ++r) {
        std::vector<float> input(count), output(count, -1.0f);
        for (size_t i = 0; i < count; ++i) input[i] = pairValue(rank, r, i);
        float* out = inPlace ? input.data() : output.data();
        std::string e = run(s.value(), what, input.data(), out, prepared);
        if (!e.empty()) return e;
        for (size_t i = 0; i < count; ++i) {
          if (out[i] != pairValue(0, r, i) + pairValue(1, r, i))
            return what + ": element " + std::to_string(i) + " is " + std::to_string(out[i]);
        }
      }
    }
  }
  return "";
}

}  // namespace braid::transport::test

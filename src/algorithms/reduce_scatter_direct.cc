// Direct reduce-scatter on the mesh: every rank sends block j of its input to rank j and
// reduces the n contributions to its own block in rank order, x0 (op) x1 (op) ... (op) x(n-1),
// whatever its own rank, so the association never depends on who computes it. One hop, n-1
// messages per rank: for small messages and moderate n.
//
// Each round a rank sends one part to every peer (half a FIFO at most per peer) and then
// receives one part from every peer: the pattern of a point-to-point group, which cannot
// deadlock.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> reduceScatterDirect(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t blockBytes = req.count * es;
  Schedule s = meshSchedule(req, "direct");
  exec::ChannelPlan& plan = s.channels[0];
  plan.rounds = roundsFor(blockBytes, layout.smallRoundBytes);
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges = {{Region{Buf::kOutput, 0, blockBytes}}};
  }
  if (blockBytes == 0) return s;

  auto in = [&](int j) { return Region{Buf::kInput, static_cast<size_t>(j) * blockBytes, blockBytes}; };
  const Region out{Buf::kOutput, 0, blockBytes};
  for (int j = 0; j < n; ++j)
    if (j != r) plan.steps.push_back(Step{Prim::kSend, -1, j, in(j), {}});

  // The running sum. In place, the output is this rank's own input block, which must not
  // be overwritten before it is added in its turn, so the sum runs in scratch there.
  Region acc = out;
  if (req.inPlace && r != 0) {
    s.scratchBytes = blockBytes;
    acc = Region{Buf::kScratch, 0, blockBytes};
  }
  for (int j = 0; j < n; ++j) {
    if (j == 0) {
      if (r == 0) {
        if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in(r), acc});
      } else {
        plan.steps.push_back(Step{Prim::kRecv, 0, -1, {}, acc});
      }
    } else if (j == r) {
      plan.steps.push_back(Step{Prim::kLocalReduce, -1, -1, in(r), acc});  // acc = acc (op) own
    } else {
      plan.steps.push_back(Step{Prim::kRecvReduce, j, -1, acc, acc});
    }
  }
  if (acc.buf != Buf::kOutput) plan.steps.push_back(Step{Prim::kCopy, -1, -1, acc, out});
  return s;
}

}  // namespace braid::algorithms

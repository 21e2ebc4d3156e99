// Pipelined chain reduce along each channel's ring, ending at the root: the rank after the
// root starts by sending its input, every following rank adds its own and forwards the
// running sum slice by slice, and the root adds its input last. Like the chain broadcast
// (its mirror image), the time approaches (n-1) slice latencies plus one pass of the buffer,
// and several channels each carry their own share of the buffer around their own ring.
//
// Each rank only receives from its ring predecessor and sends to its successor, one part
// per round; the chain is open at the root, so no wait can close a cycle.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> reduceChain(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int nch = static_cast<int>(layout.rings.size());
  if (req.root < 0 || req.root >= n) return invalidArgument("reduceChain: root out of range");
  const size_t es = dataTypeSize(req.dtype);
  const bool isRoot = layout.rank == req.root;

  BRAID_ASSIGN_OR_RETURN(Schedule s, ringSchedule(req, "chain", layout));
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges.resize(nch);
  }
  size_t maxChannelBytes = (req.count + nch - 1) / nch * es;
  const int rounds = roundsFor(maxChannelBytes, layout.roundBytes);

  for (int c = 0; c < nch; ++c) {
    exec::ChannelPlan& plan = s.channels[c];
    plan.rounds = rounds;
    size_t cb = channelBegin(req.count, c, nch);
    size_t ce = channelBegin(req.count, c + 1, nch);
    if (ce == cb) continue;
    Region in{Buf::kInput, cb * es, (ce - cb) * es};
    Region out{Buf::kOutput, cb * es, (ce - cb) * es};
    if (s.divisor && isRoot) s.divideRanges[c].push_back(out);

    const std::vector<int>& ring = layout.rings[c];
    RingPos rootPos = ringPosition(ring, req.root);
    RingPos pos = ringPosition(ring, layout.rank);
    int q = (pos.index - rootPos.index + n) % n;  // the chain runs q = 1, 2, ..., n-1, then 0
    if (n == 1) {
      if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out});
    } else if (q == 0) {
      plan.steps.push_back(Step{Prim::kRecvReduce, pos.prev, -1, in, out});
    } else if (q == 1) {
      plan.steps.push_back(Step{Prim::kSend, -1, pos.next, in, {}});
    } else {
      plan.steps.push_back(Step{Prim::kRecvReduceSend, pos.prev, pos.next, in, {}});
    }
  }
  return s;
}

}  // namespace braid::algorithms

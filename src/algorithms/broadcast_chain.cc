// Pipelined chain broadcast: along each channel's ring starting at the root, every rank
// stores what it receives and forwards it at once, slice by slice, so the time approaches
// (n-1) slice latencies plus one pass of the buffer rather than n-1 passes.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> broadcastChain(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int nch = static_cast<int>(layout.rings.size());
  const size_t es = dataTypeSize(req.dtype);

  BRAID_ASSIGN_OR_RETURN(Schedule s, ringSchedule(req, "chain", layout));
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

    const std::vector<int>& ring = layout.rings[c];
    RingPos rootPos = ringPosition(ring, req.root);
    RingPos pos = ringPosition(ring, layout.rank);
    int q = (pos.index - rootPos.index + n) % n;  // distance from the root along the chain
    if (q == 0) {
      if (n > 1) plan.steps.push_back(Step{Prim::kSend, -1, pos.next, in, {}});
      if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out, /*finalOut=*/true});
    } else if (q < n - 1) {
      plan.steps.push_back(Step{Prim::kRecvCopySend, pos.prev, pos.next, {}, out});
    } else {
      plan.steps.push_back(Step{Prim::kRecv, pos.prev, -1, {}, out});
    }
  }
  return s;
}

}  // namespace braid::algorithms

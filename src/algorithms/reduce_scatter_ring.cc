// Ring reduce-scatter (and reduce-scatterv): the first half of the ring allreduce. Every
// channel carries its share of each block. At step k the rank at ring position p sends the
// running sum of the block owned k+1 positions upstream of it, so after n-1 hops every
// block's partial sum reaches its owner, which adds its own input and stores the result.
// The middle hops use recvReduceSend: incoming slice (op) local input goes straight into the
// next rank's slot without touching memory in between.
//
// Block sizes may differ (reduce-scatterv); a step's size is that of its block, known to
// both ends from the global counts, and the rounds come from the largest block.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

namespace {

// Block b has `counts[b]` elements at element `displs[b]` of the input; this rank's result
// (counts[rank] elements) goes to the start of the output.
StatusOr<Schedule> ringReduceScatter(const Request& req, const Layout& layout, const std::vector<size_t>& counts,
                                     const std::vector<size_t>& displs) {
  const int n = layout.nranks;
  const int rank = layout.rank;
  const int nch = static_cast<int>(layout.rings.size());
  const size_t es = dataTypeSize(req.dtype);

  BRAID_ASSIGN_OR_RETURN(Schedule s, ringSchedule(req, "ring", layout));
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges.resize(nch);
  }

  size_t maxCount = 0;
  for (size_t c : counts) maxCount = std::max(maxCount, c);
  const int rounds = roundsFor((maxCount + nch - 1) / nch * es, layout.roundBytes);

  for (int c = 0; c < nch; ++c) {
    exec::ChannelPlan& plan = s.channels[c];
    plan.rounds = rounds;
    plan.overlapRounds = true;
    auto range = [&](int b) {
      size_t lo = channelBegin(counts[b], c, nch);
      size_t hi = channelBegin(counts[b], c + 1, nch);
      return std::make_pair(lo, hi - lo);
    };
    auto inShare = [&](int b) {
      auto [lo, len] = range(b);
      return Region{Buf::kInput, (displs[b] + lo) * es, len * es};
    };
    auto [ownLo, ownLen] = range(rank);
    const Region out{Buf::kOutput, ownLo * es, ownLen * es};
    if (s.divisor && ownLen) s.divideRanges[c].push_back(out);

    if (n == 1) {
      if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, inShare(rank), out});
      continue;
    }
    RingPos pos = ringPosition(layout.rings[c], rank);
    const std::vector<int>& ring = layout.rings[c];
    auto blockAt = [&](int k) { return ring[((pos.index - k) % n + n) % n]; };  // k hops upstream
    // Step k carries block blockAt(k+1); the upstream neighbour sent its partial of that
    // block one step earlier, so this rank adds its own input and passes it on.
    plan.steps.push_back(Step{Prim::kSend, -1, pos.next, inShare(blockAt(1)), {}});
    for (int k = 1; k < n - 1; ++k)
      plan.steps.push_back(Step{Prim::kRecvReduceSend, pos.prev, pos.next, inShare(blockAt(k + 1)), {}});
    // blockAt(n) is this rank: its own block arrives with every other rank's share added.
    plan.steps.push_back(Step{Prim::kRecvReduce, pos.prev, -1, inShare(rank), out});
  }
  return s;
}

}  // namespace

StatusOr<Schedule> reduceScatterRing(const Request& req, const Layout& layout) {
  const size_t n = static_cast<size_t>(layout.nranks);
  std::vector<size_t> counts(n, req.count), displs(n);
  for (size_t b = 0; b < n; ++b) displs[b] = b * req.count;
  return ringReduceScatter(req, layout, counts, displs);
}

StatusOr<Schedule> reduceScatterVRing(const Request& req, const Layout& layout) {
  const size_t n = static_cast<size_t>(layout.nranks);
  if (req.counts.size() != n)
    return invalidArgument("reduce_scatterv: counts needs one entry per rank (" + std::to_string(n) + "), got " +
                           std::to_string(req.counts.size()));
  if (!req.displs.empty()) {
    if (req.displs.size() != n)
      return invalidArgument("reduce_scatterv: displs needs one entry per rank (" + std::to_string(n) + "), got " +
                             std::to_string(req.displs.size()));
    return ringReduceScatter(req, layout, req.counts, req.displs);
  }
  // The input holds the blocks back to back, in rank order.
  std::vector<size_t> displs(n);
  for (size_t b = 1; b < n; ++b) displs[b] = displs[b - 1] + req.counts[b - 1];
  return ringReduceScatter(req, layout, req.counts, displs);
}

}  // namespace braid::algorithms

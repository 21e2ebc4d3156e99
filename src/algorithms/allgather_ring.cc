// Ring allgather (and allgatherv). Every channel carries its share of each rank's block;
// around the ring every rank sends its own share once and then forwards, n-2 times, the
// share it just received (recvCopySend stores and forwards a slice in one pass), so each
// block travels once around the ring: the allgather half of the ring allreduce.
//
// Blocks may differ in size (allgatherv), so a step's size is that of the block it carries,
// which both ends of a connection know from the global counts; the round count comes from
// the largest block so that no step sends more than one round's budget ahead.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

namespace {

// The ring schedule over blocks `counts[b]` placed at `displs[b]` of the output (elements).
// The own block is read from the input, or from its place in the output when in place.
StatusOr<Schedule> ringAllgather(const Request& req, const Layout& layout, const std::vector<size_t>& counts,
                                 const std::vector<size_t>& displs) {
  const int n = layout.nranks;
  const int rank = layout.rank;
  const int nch = static_cast<int>(layout.rings.size());
  const size_t es = dataTypeSize(req.dtype);

  BRAID_ASSIGN_OR_RETURN(Schedule s, ringSchedule(req, "ring", layout));
  // Every rank sends its block at once and forwards each block whole: no step waits on a
  // piece of another, so each step's round may travel as one message.
  s.wholeBlocks = layout.wholeBlocksInRings;

  size_t maxCount = 0;
  for (size_t c : counts) maxCount = std::max(maxCount, c);
  const int rounds = roundsFor((maxCount + nch - 1) / nch * es, wholeBlockRound(layout, s, layout.roundBytes));

  for (int c = 0; c < nch; ++c) {
    exec::ChannelPlan& plan = s.channels[c];
    plan.rounds = rounds;
    plan.overlapRounds = true;
    // Channel c's share of block b, in the output.
    auto share = [&](int b) {
      b = ((b % n) + n) % n;
      size_t lo = channelBegin(counts[b], c, nch);
      size_t hi = channelBegin(counts[b], c + 1, nch);
      return Region{Buf::kOutput, (displs[b] + lo) * es, (hi - lo) * es};
    };
    Region own = share(rank);
    Region ownIn{Buf::kInput, own.offset - displs[rank] * es, own.bytes};
    if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, ownIn, own});
    if (n == 1) continue;

    RingPos pos = ringPosition(layout.rings[c], rank);
    const std::vector<int>& ring = layout.rings[c];
    auto blockAt = [&](int k) { return ring[((pos.index - k) % n + n) % n]; };  // k hops upstream
    plan.steps.push_back(Step{Prim::kSend, -1, pos.next, req.inPlace ? own : ownIn, {}});
    for (int k = 1; k < n - 1; ++k) plan.steps.push_back(Step{Prim::kRecvCopySend, pos.prev, pos.next, {}, share(blockAt(k))});
    plan.steps.push_back(Step{Prim::kRecv, pos.prev, -1, {}, share(blockAt(n - 1))});
  }
  return s;
}

}  // namespace

StatusOr<Schedule> allgatherRing(const Request& req, const Layout& layout) {
  const size_t n = static_cast<size_t>(layout.nranks);
  std::vector<size_t> counts(n, req.count), displs(n);
  for (size_t b = 0; b < n; ++b) displs[b] = b * req.count;
  return ringAllgather(req, layout, counts, displs);
}

StatusOr<Schedule> allgatherVRing(const Request& req, const Layout& layout) {
  const size_t n = static_cast<size_t>(layout.nranks);
  if (req.counts.size() != n || req.displs.size() != n)
    return invalidArgument("allgatherv: counts and displs need one entry per rank (" + std::to_string(n) + "), got " +
                           std::to_string(req.counts.size()) + " and " + std::to_string(req.displs.size()));
  return ringAllgather(req, layout, req.counts, req.displs);
}

}  // namespace braid::algorithms

// A group of point-to-point sends and receives, run as one Schedule on the mesh.
//
// The two ends of a message may sit in groups of different content, so nothing about the
// group may decide how a message is cut: every message is cut into parts of at most
// `smallRoundBytes` (half a mesh FIFO) computed from its own size alone, and both ends
// agree. The steps go part by part: all sends of part k, then all receives of part k. A send
// of part k can only wait for its receiver to drain parts before k-1, which that receiver
// does without waiting for anything of part k or later, so no cycle of waits can form —
// the ring exchange (send to rank+1, receive from rank-1) and all-to-all groups included.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> sendRecvGroup(const Request& req, const Layout& layout) {
  const size_t es = dataTypeSize(req.dtype);
  Schedule s = meshSchedule(req, "p2p");
  s.wholeBlocks = true;
  exec::ChannelPlan& plan = s.channels[0];
  // With large messages on (Layout::wholeBlockBytes) a part is one message, one slot.
  const size_t partElems = std::max<size_t>(1, wholeBlockRound(layout, s, layout.smallRoundBytes) / es);

  size_t maxParts = 0;
  for (const P2POp& m : req.p2p) {
    if (m.peer < 0 || m.peer >= layout.nranks)
      return invalidArgument("peer=" + std::to_string(m.peer) + " is outside [0, " + std::to_string(layout.nranks) + ")");
    maxParts = std::max(maxParts, (m.count + partElems - 1) / partElems);
  }
  for (size_t k = 0; k < maxParts; ++k) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool sends = pass == 0;
      for (size_t i = 0; i < req.p2p.size(); ++i) {
        const P2POp& m = req.p2p[i];
        if (m.isSend != sends) continue;
        size_t lo = k * partElems;
        if (lo >= m.count) continue;
        size_t hi = std::min(m.count, lo + partElems);
        Region r{exec::extraBuf(i), lo * es, (hi - lo) * es};
        if (m.peer == layout.rank) {
          // To self: pair the k-th part of this send with the matching receive's part.
          if (!sends) continue;
          int nth = 0;
          for (size_t j = 0; j < i; ++j) nth += req.p2p[j].isSend && req.p2p[j].peer == m.peer;
          size_t match = req.p2p.size();
          for (size_t j = 0, seen = 0; j < req.p2p.size(); ++j) {
            if (req.p2p[j].isSend || req.p2p[j].peer != m.peer) continue;
            if (static_cast<int>(seen++) == nth) { match = j; break; }
          }
          if (match == req.p2p.size())
            return invalidArgument("a send to self (rank " + std::to_string(m.peer) + ") has no matching receive in the group");
          if (req.p2p[match].count != m.count)
            return invalidArgument("a send to self of " + std::to_string(m.count) + " elements meets a receive of " +
                                   std::to_string(req.p2p[match].count));
          Region d{exec::extraBuf(match), lo * es, (hi - lo) * es};
          plan.steps.push_back(Step{Prim::kCopy, -1, -1, r, d});
          continue;
        }
        if (sends) plan.steps.push_back(Step{Prim::kSend, -1, m.peer, r, {}});
        else plan.steps.push_back(Step{Prim::kRecv, m.peer, -1, {}, r});
      }
    }
  }
  // Receives from self without a send are the mirror of the check above.
  int selfSends = 0, selfRecvs = 0;
  for (const P2POp& m : req.p2p)
    if (m.peer == layout.rank) (m.isSend ? selfSends : selfRecvs)++;
  if (selfSends != selfRecvs)
    return invalidArgument("the group has " + std::to_string(selfSends) + " sends to self but " +
                           std::to_string(selfRecvs) + " receives from self");
  return s;
}

}  // namespace braid::algorithms

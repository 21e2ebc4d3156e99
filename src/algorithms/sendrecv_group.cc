// A group of point-to-point sends and receives, run as one Schedule on the mesh.
//
// The two ends of a message may sit in groups of different content, or one in a group and
// the other in a call of its own, so nothing about the group may decide how a message is
// cut or where it goes among the pair's messages: every message is cut into parts of at
// most `smallRoundBytes` (half a mesh FIFO) computed from its own size alone, and the steps
// go message by message, in the group's order, so the messages between a pair follow each
// other on the wire in issue order. The executor runs the steps to one peer and those from
// one as lanes of their own (Schedule::lanes): a send that waits for a receiver busy with a
// later call of its own never holds up the group's other messages, so every pattern that
// nonblocking sends and receives completed together would finish, finishes here; the ring
// exchange and all-to-all groups included.

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
  s.lanes = true;
  exec::ChannelPlan& plan = s.channels[0];
  // With large messages on (Layout::wholeBlockBytes) a part is one message, one slot.
  const size_t partElems = std::max<size_t>(1, wholeBlockRound(layout, s, layout.smallRoundBytes) / es);

  for (const P2POp& m : req.p2p)
    if (m.peer < 0 || m.peer >= layout.nranks)
      return invalidArgument("peer=" + std::to_string(m.peer) + " is outside [0, " + std::to_string(layout.nranks) + ")");
  for (size_t i = 0; i < req.p2p.size(); ++i) {
    const P2POp& m = req.p2p[i];
    // A receive from self is written by its send's copies.
    if (m.peer == layout.rank && !m.isSend) continue;
    size_t match = req.p2p.size();
    if (m.peer == layout.rank) {
      // To self: the k-th send to self meets the k-th receive from self.
      int nth = 0;
      for (size_t j = 0; j < i; ++j) nth += req.p2p[j].isSend && req.p2p[j].peer == m.peer;
      for (size_t j = 0, seen = 0; j < req.p2p.size(); ++j) {
        if (req.p2p[j].isSend || req.p2p[j].peer != m.peer) continue;
        if (static_cast<int>(seen++) == nth) {
          match = j;
          break;
        }
      }
      if (match == req.p2p.size())
        return invalidArgument("a send to self (rank " + std::to_string(m.peer) + ") has no matching receive in the group");
      if (req.p2p[match].count != m.count)
        return invalidArgument("a send to self of " + std::to_string(m.count) + " elements meets a receive of " +
                               std::to_string(req.p2p[match].count));
    }
    for (size_t lo = 0; lo < m.count; lo += partElems) {
      const size_t hi = std::min(m.count, lo + partElems);
      Region r{exec::extraBuf(i), lo * es, (hi - lo) * es};
      if (match < req.p2p.size())
        plan.steps.push_back(Step{Prim::kCopy, -1, -1, r, Region{exec::extraBuf(match), lo * es, (hi - lo) * es}});
      else if (m.isSend) plan.steps.push_back(Step{Prim::kSend, -1, m.peer, r, {}});
      else plan.steps.push_back(Step{Prim::kRecv, m.peer, -1, {}, r});
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

// Recursive-doubling allgather on the mesh: log2(p) exchanges, p the largest power of two
// not above n, each doubling what a rank holds; for small messages, where hops cost more
// than bytes.
//
// Non-powers of two fold: "extra" rank p+i first hands its block to rank i, the p core
// ranks run recursive doubling as if rank i owned blocks i and p+i, and at the end rank i
// gives extra p+i everything else. A group of core ranks [a, a+d) then owns output blocks
// [a, a+d) and [a+p, a+d+p) clipped to n: two contiguous regions, sent as two steps.
//
// Each exchange is its own phase (what a rank sends at level d includes what it received at
// level d/2, which rounds of one phase would not keep in step). Inside a phase a rank sends
// to its partner before receiving from it, at most half a FIFO per round in all, so no
// partner can wait on a full FIFO for data that is itself stuck behind this rank.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> allgatherRecursiveDoubling(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t blockBytes = req.count * es;
  Schedule s = meshSchedule(req, "recursive-doubling");
  exec::ChannelPlan& plan = s.channels[0];
  if (blockBytes == 0) return s;

  auto blocks = [&](int first, int last) {  // output blocks [first, last) clipped to n
    last = std::min(last, n);
    first = std::min(first, last);
    return Region{Buf::kOutput, static_cast<size_t>(first) * blockBytes, static_cast<size_t>(last - first) * blockBytes};
  };
  const Region own = blocks(r, r + 1);
  const Region ownSrc = req.inPlace ? own : Region{Buf::kInput, 0, blockBytes};
  // A phase of steps; `parts` steps go to the same peer in one round, so each gets an equal
  // share of the round budget.
  auto phase = [&](std::vector<Step> steps, size_t maxStepBytes, int parts) {
    if (steps.empty()) return;
    plan.phases.push_back(exec::Phase{plan.steps.size(), steps.size(),
                                      roundsFor(maxStepBytes, layout.smallRoundBytes / static_cast<size_t>(parts))});
    for (Step& st : steps) plan.steps.push_back(st);
  };

  if (!req.inPlace) phase({Step{Prim::kCopy, -1, -1, ownSrc, own}}, blockBytes, 1);
  if (n == 1) return s;
  int p = 1;
  while (p * 2 <= n) p *= 2;

  if (r >= p) {  // an extra rank: hand over the block, get everything else back
    phase({Step{Prim::kSend, -1, r - p, ownSrc, {}}}, blockBytes, 1);
    phase({Step{Prim::kRecv, r - p, -1, {}, blocks(0, r)}, Step{Prim::kRecv, r - p, -1, {}, blocks(r + 1, n)}},
          static_cast<size_t>(n) * blockBytes, 2);
    return s;
  }
  if (r + p < n) phase({Step{Prim::kRecv, r + p, -1, {}, blocks(r + p, r + p + 1)}}, blockBytes, 1);
  for (int d = 1; d < p; d *= 2) {
    const int partner = r ^ d;
    const int mine = r & ~(d - 1), theirs = partner & ~(d - 1);  // the groups each side holds
    phase({Step{Prim::kSend, -1, partner, blocks(mine, mine + d), {}},
           Step{Prim::kSend, -1, partner, blocks(mine + p, mine + p + d), {}},
           Step{Prim::kRecv, partner, -1, {}, blocks(theirs, theirs + d)},
           Step{Prim::kRecv, partner, -1, {}, blocks(theirs + p, theirs + p + d)}},
          static_cast<size_t>(d) * blockBytes, 2);
  }
  if (r + p < n) {
    const int e = r + p;
    phase({Step{Prim::kSend, -1, e, blocks(0, e), {}}, Step{Prim::kSend, -1, e, blocks(e + 1, n), {}}},
          static_cast<size_t>(n) * blockBytes, 2);
  }
  return s;
}

}  // namespace braid::algorithms

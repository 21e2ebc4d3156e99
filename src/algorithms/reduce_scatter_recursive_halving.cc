// Recursive-halving reduce-scatter on the mesh: log2(p) exchanges, p the largest power of
// two not above n. At distance d (p/2 down to 1) a rank and its partner r^d each keep half
// of the blocks they are still responsible for, send the other half to the partner and add
// the partner's half into their own; the bytes sent halve at every step.
//
// Non-powers of two fold: "extra" rank p+i first sends its whole input to rank i, which
// reduces it into its working copy and from then on stands for both; a group of core ranks
// [a, a+d) is responsible for blocks [a, a+d) and [a+p, a+d+p) clipped to n, two contiguous
// regions. At the end rank i sends extra p+i its finished block.
//
// Partial sums live in scratch (n blocks) because the input is read-only; the last step
// writes this rank's block straight into the output. Every exchange is its own phase and
// sends before it receives, at most half a FIFO per round in all (see allgather's twin).

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> reduceScatterRecursiveHalving(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t blockBytes = req.count * es;
  Schedule s = meshSchedule(req, "recursive-halving");
  exec::ChannelPlan& plan = s.channels[0];
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges = {{Region{Buf::kOutput, 0, blockBytes}}};
  }
  if (blockBytes == 0) return s;

  const Region out{Buf::kOutput, 0, blockBytes};
  auto blocks = [&](Buf buf, int first, int last) {  // blocks [first, last) clipped to n
    last = std::min(last, n);
    first = std::min(first, last);
    return Region{buf, static_cast<size_t>(first) * blockBytes, static_cast<size_t>(last - first) * blockBytes};
  };
  auto phase = [&](std::vector<Step> steps, size_t maxStepBytes, int parts) {
    plan.phases.push_back(exec::Phase{plan.steps.size(), steps.size(),
                                      roundsFor(maxStepBytes, layout.smallRoundBytes / static_cast<size_t>(parts))});
    for (Step& st : steps) plan.steps.push_back(st);
  };

  if (n == 1) {
    if (!req.inPlace) phase({Step{Prim::kCopy, -1, -1, blocks(Buf::kInput, 0, 1), out}}, blockBytes, 1);
    return s;
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const size_t allBytes = static_cast<size_t>(n) * blockBytes;

  if (r >= p) {  // an extra rank: hand over everything, get the own block back
    phase({Step{Prim::kSend, -1, r - p, blocks(Buf::kInput, 0, n), {}}}, allBytes, 1);
    phase({Step{Prim::kRecv, r - p, -1, {}, out}}, blockBytes, 1);
    return s;
  }
  s.scratchBytes = allBytes;
  Buf cur = Buf::kInput;  // where this rank's partial sums are
  if (r + p < n) {
    phase({Step{Prim::kRecvReduce, r + p, -1, blocks(Buf::kInput, 0, n), blocks(Buf::kScratch, 0, n)}}, allBytes, 1);
    cur = Buf::kScratch;
  }
  for (int d = p / 2; d >= 1; d /= 2) {
    const int partner = r ^ d;
    const int keep = r & ~(d - 1), give = partner & ~(d - 1);
    // The last step finishes block r: it goes to the output; block r+p (for the extra)
    // stays in scratch.
    Region keepLow = d == 1 ? out : blocks(Buf::kScratch, keep, keep + d);
    phase({Step{Prim::kSend, -1, partner, blocks(cur, give, give + d), {}},
           Step{Prim::kSend, -1, partner, blocks(cur, give + p, give + p + d), {}},
           Step{Prim::kRecvReduce, partner, -1, blocks(cur, keep, keep + d), keepLow},
           Step{Prim::kRecvReduce, partner, -1, blocks(cur, keep + p, keep + p + d), blocks(Buf::kScratch, keep + p, keep + p + d)}},
          static_cast<size_t>(d) * blockBytes, 2);
    cur = Buf::kScratch;
  }
  if (r + p < n) phase({Step{Prim::kSend, -1, r + p, blocks(Buf::kScratch, r + p, r + p + 1), {}}}, blockBytes, 1);
  return s;
}

}  // namespace braid::algorithms

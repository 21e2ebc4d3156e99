// Bruck allgather on the mesh: ceil(log2 n) steps for any n, no fold. Rank r keeps the
// blocks it has in a scratch buffer in rotated order, tmp[i] = block (r+i) mod n. At step k
// (distance d = 2^k) it holds tmp[0, d), sends the first min(d, n-d) of them to rank r-d and
// receives as many from rank r+d, which are exactly tmp[d, ...]: both sides are contiguous,
// so every step is one send and one receive. A final local rotation puts the blocks in rank
// order in the output.
//
// Each step is its own phase (it forwards what the previous one received); inside it a rank
// sends before it receives, at most half a FIFO per round, which keeps the exchange free of
// deadlock for any message size.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> allgatherBruck(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t blockBytes = req.count * es;
  Schedule s = meshSchedule(req, "bruck");
  exec::ChannelPlan& plan = s.channels[0];
  if (blockBytes == 0) return s;

  auto out = [&](int first, int num) {
    return Region{Buf::kOutput, static_cast<size_t>(first) * blockBytes, static_cast<size_t>(num) * blockBytes};
  };
  auto tmp = [&](int first, int num) {
    return Region{Buf::kScratch, static_cast<size_t>(first) * blockBytes, static_cast<size_t>(num) * blockBytes};
  };
  auto phase = [&](std::vector<Step> steps, size_t maxStepBytes) {
    plan.phases.push_back(exec::Phase{plan.steps.size(), steps.size(), roundsFor(maxStepBytes, layout.smallRoundBytes)});
    for (Step& st : steps) plan.steps.push_back(st);
  };

  const Region ownSrc = req.inPlace ? out(r, 1) : Region{Buf::kInput, 0, blockBytes};
  if (n == 1) {
    if (!req.inPlace) phase({Step{Prim::kCopy, -1, -1, ownSrc, out(0, 1)}}, blockBytes);
    return s;
  }
  s.scratchBytes = static_cast<size_t>(n) * blockBytes;
  phase({Step{Prim::kCopy, -1, -1, ownSrc, tmp(0, 1)}}, blockBytes);
  for (int d = 1; d < n; d *= 2) {
    const int num = std::min(d, n - d);
    phase({Step{Prim::kSend, -1, (r - d + n) % n, tmp(0, num), {}},
           Step{Prim::kRecv, (r + d) % n, -1, {}, tmp(d, num)}},
          static_cast<size_t>(num) * blockBytes);
  }
  // Undo the rotation: tmp[i] is block (r+i) mod n; the own block comes from its source.
  std::vector<Step> unrotate;
  if (!req.inPlace) unrotate.push_back(Step{Prim::kCopy, -1, -1, ownSrc, out(r, 1)});
  if (r + 1 < n) unrotate.push_back(Step{Prim::kCopy, -1, -1, tmp(1, n - r - 1), out(r + 1, n - r - 1)});
  if (r > 0) unrotate.push_back(Step{Prim::kCopy, -1, -1, tmp(n - r, r), out(0, r)});
  if (!unrotate.empty()) phase(std::move(unrotate), static_cast<size_t>(n) * blockBytes);
  return s;
}

}  // namespace braid::algorithms

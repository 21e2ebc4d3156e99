// Linear scatter on the mesh: the root sends block j of its input straight to rank j. One
// hop; the root's link carries everything, so it suits small messages or few ranks.
//
// Only the root sends and it never receives, so no cycle of waits can form; in rounds the
// root hands every rank a part before the next part of anyone, so all receivers progress
// together.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> scatterDirect(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  BRAID_RETURN_IF_ERROR(checkRoot("scatter", req.root, n));
  BRAID_RETURN_IF_ERROR(checkBlockDispls("scatter", req, n));
  const size_t blockBytes = req.count * dataTypeSize(req.dtype);
  Schedule s = meshSchedule(req, "direct");
  exec::ChannelPlan& plan = s.channels[0];
  plan.rounds = roundsFor(blockBytes, layout.smallRoundBytes);
  if (blockBytes == 0) return s;

  const Region out{Buf::kOutput, 0, blockBytes};
  if (r != req.root) {
    plan.steps.push_back(Step{Prim::kRecv, req.root, -1, {}, out});
    return s;
  }
  auto in = [&](int j) { return Region{Buf::kInput, blockAt(req, j) * dataTypeSize(req.dtype), blockBytes}; };
  for (int j = 0; j < n; ++j) {
    if (j != r) plan.steps.push_back(Step{Prim::kSend, -1, j, in(j), {}});
    else if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in(j), out});
  }
  return s;
}

}  // namespace braid::algorithms

// Linear gather on the mesh: every rank sends its block straight to the root, which stores
// the blocks in rank order. One hop; the root's link carries everything, so it suits small
// messages or few ranks.
//
// Only the root receives and it never sends, so no cycle of waits can form: a sender whose
// FIFO is full simply waits for the root to reach it.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> gatherDirect(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  BRAID_RETURN_IF_ERROR(checkRoot("gather", req.root, n));
  BRAID_RETURN_IF_ERROR(checkBlockDispls("gather", req, n));
  const size_t blockBytes = req.count * dataTypeSize(req.dtype);
  Schedule s = meshSchedule(req, "direct");
  exec::ChannelPlan& plan = s.channels[0];
  plan.rounds = roundsFor(blockBytes, layout.smallRoundBytes);
  if (blockBytes == 0) return s;

  const Region in{Buf::kInput, 0, blockBytes};
  if (r != req.root) {
    plan.steps.push_back(Step{Prim::kSend, -1, req.root, in, {}});
    return s;
  }
  auto out = [&](int j) { return Region{Buf::kOutput, blockAt(req, j) * dataTypeSize(req.dtype), blockBytes}; };
  for (int j = 0; j < n; ++j) {
    if (j != r) plan.steps.push_back(Step{Prim::kRecv, j, -1, {}, out(j)});
    else if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out(j)});
  }
  return s;
}

}  // namespace braid::algorithms

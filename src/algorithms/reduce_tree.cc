// Pipelined binary-tree reduce to the root over the mesh: every rank combines its
// children's partial results with its own input and passes the sum to its parent slice by
// slice, so the time approaches log2(n) slice latencies plus one pass of the buffer. The
// tree is tree 0 of the double binary tree rooted at the root (binaryTree).
//
// Only the root has an output buffer, so a rank with two children keeps the first child's
// partial in scratch before adding the second's on its way up. Each connection carries one
// part per round and waits only go from parents to children, so no cycle can form.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> reduceTree(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  if (req.root < 0 || req.root >= n) return invalidArgument("reduceTree: root out of range");
  const bool isRoot = layout.rank == req.root;
  Schedule s = meshSchedule(req, "tree");
  exec::ChannelPlan& plan = s.channels[0];
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges = {isRoot ? std::vector<Region>{Region{Buf::kOutput, 0, bytes}} : std::vector<Region>{}};
  }
  if (bytes == 0) return s;
  plan.rounds = roundsFor(bytes, layout.smallRoundBytes);
  const Region in{Buf::kInput, 0, bytes};
  const Region out{Buf::kOutput, 0, bytes};
  const TreeNode t = binaryTree(layout.rank, n, req.root, /*mirror=*/false);
  int first = -1, second = -1;
  for (int c : t.child) {
    if (c < 0) continue;
    (first < 0 ? first : second) = c;
  }

  if (isRoot) {
    if (first < 0) {
      if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out});
      return s;
    }
    plan.steps.push_back(Step{Prim::kRecvReduce, first, -1, in, out});
    if (second >= 0) plan.steps.push_back(Step{Prim::kRecvReduce, second, -1, out, out});
    return s;
  }
  if (first < 0) {
    plan.steps.push_back(Step{Prim::kSend, -1, t.parent, in, {}});
  } else if (second < 0) {
    plan.steps.push_back(Step{Prim::kRecvReduceSend, first, t.parent, in, {}});
  } else {
    s.scratchBytes = bytes;
    const Region partial{Buf::kScratch, 0, bytes};
    plan.steps.push_back(Step{Prim::kRecvReduce, first, -1, in, partial});
    plan.steps.push_back(Step{Prim::kRecvReduceSend, second, t.parent, partial, {}});
  }
  return s;
}

}  // namespace braid::algorithms

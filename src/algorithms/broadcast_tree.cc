// Pipelined binary-tree broadcast from the root over the mesh: every rank stores what its
// parent sends and forwards it to its children slice by slice, so the time approaches
// log2(n) slice latencies plus one pass of the buffer (a chain needs n-1 latencies). The tree
// is tree 0 of the double binary tree rooted at the root (binaryTree), whose root has a
// single child.
//
// Each connection carries one part per round and a rank only forwards what it received, so
// no wait can close a cycle.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> broadcastTree(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  if (req.root < 0 || req.root >= n) return invalidArgument("broadcastTree: root out of range");
  Schedule s = meshSchedule(req, "tree");
  exec::ChannelPlan& plan = s.channels[0];
  if (bytes == 0) return s;
  plan.rounds = roundsFor(bytes, layout.smallRoundBytes);
  const Region in{Buf::kInput, 0, bytes};
  const Region out{Buf::kOutput, 0, bytes};
  const TreeNode t = binaryTree(layout.rank, n, req.root, /*mirror=*/false);

  if (layout.rank == req.root) {
    for (int c : t.child)
      if (c >= 0) plan.steps.push_back(Step{Prim::kSend, -1, c, in, {}});
    if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out, /*finalOut=*/true});
    return s;
  }
  int first = -1, second = -1;
  for (int c : t.child) {
    if (c < 0) continue;
    (first < 0 ? first : second) = c;
  }
  if (first < 0) {
    plan.steps.push_back(Step{Prim::kRecv, t.parent, -1, {}, out});
  } else {
    plan.steps.push_back(Step{Prim::kRecvCopySend, t.parent, first, {}, out});
    if (second >= 0) plan.steps.push_back(Step{Prim::kSend, -1, second, out, {}});
  }
  return s;
}

}  // namespace braid::algorithms

// Binomial-tree gather on the mesh: ceil(log2 n) levels instead of the root receiving n-1
// messages one after another. Ranks are numbered relative to the root, v = (r - root) mod n;
// rank v collects the blocks of its subtree, relative ranks [v, v + min(lowbit(v), n-v)),
// contiguously in relative order (scratch), then sends them to its parent v - lowbit(v) in
// one message. The root receives the same way and rotates relative order into rank order;
// with root 0 the two orders agree and it receives straight into the output.
//
// Steps run one after the other (one round): data only flows up the tree, so a child whose
// FIFO is full just waits for its parent to reach it, and no cycle of waits exists.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> gatherTree(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const int root = req.root;
  BRAID_RETURN_IF_ERROR(checkRoot("gather", root, n));
  BRAID_RETURN_IF_ERROR(checkBlockDispls("gather", req, n));
  const size_t blockBytes = req.count * dataTypeSize(req.dtype);
  Schedule s = meshSchedule(req, "tree");
  exec::ChannelPlan& plan = s.channels[0];
  if (blockBytes == 0) return s;

  auto at = [&](Buf buf, int firstBlock, int num) {
    return Region{buf, static_cast<size_t>(firstBlock) * blockBytes, static_cast<size_t>(num) * blockBytes};
  };
  auto real = [&](int rel) { return (rel + root) % n; };
  const int v = (r - root + n) % n;
  const int low = v == 0 ? n : (v & -v);  // children are v+m for powers of two m < low
  const int size = std::min(low, n - v);   // blocks in this rank's subtree
  const Region in{Buf::kInput, 0, blockBytes};
  // Block b of the root's output (apart from the others with displs).
  auto outBlock = [&](int b) { return Region{Buf::kOutput, blockAt(req, b) * dataTypeSize(req.dtype), blockBytes}; };

  if (size == 1) {  // a leaf sends its input as it is
    if (v != 0) plan.steps.push_back(Step{Prim::kSend, -1, real(v - low), in, {}});
    else if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, outBlock(root)});
    return s;
  }
  // Where the subtree's blocks collect, in relative order: straight into the output only at
  // root 0 with the blocks back to back.
  const Buf collect = v == 0 && root == 0 && req.displs.empty() ? Buf::kOutput : Buf::kScratch;
  if (collect == Buf::kScratch) s.scratchBytes = static_cast<size_t>(size) * blockBytes;
  if (v != 0) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, at(Buf::kScratch, 0, 1)});
  for (int m = 1; m < low && v + m < n; m *= 2)
    plan.steps.push_back(Step{Prim::kRecv, real(v + m), -1, {}, at(collect, m, std::min(m, n - v - m))});
  if (v != 0) {
    plan.steps.push_back(Step{Prim::kSend, -1, real(v - low), at(Buf::kScratch, 0, size), {}});
    return s;
  }
  // The root: its own block, then relative block i to output block (root+i) mod n.
  if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, outBlock(root)});
  if (collect == Buf::kScratch && !req.displs.empty()) {
    for (int i = 1; i < n; ++i) plan.steps.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kScratch, i, 1), outBlock(real(i))});
  } else if (collect == Buf::kScratch) {
    if (root + 1 < n) plan.steps.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kScratch, 1, n - root - 1), at(Buf::kOutput, root + 1, n - root - 1)});
    plan.steps.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kScratch, n - root, root), at(Buf::kOutput, 0, root)});
  }
  return s;
}

}  // namespace braid::algorithms

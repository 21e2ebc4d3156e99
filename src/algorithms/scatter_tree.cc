// Binomial-tree scatter on the mesh: the mirror of the binomial gather. Ranks are numbered
// relative to the root, v = (r - root) mod n; rank v receives the blocks of its whole
// subtree, relative ranks [v, v + min(lowbit(v), n-v)), in one message from its parent
// v - lowbit(v), keeps the first and passes each child v+m its share, largest first so the
// deepest subtree starts soonest. The root first rotates its input into relative order
// (scratch); with root 0 the orders agree and it sends straight from the input.
//
// Steps run one after the other (one round): data only flows down the tree, so no cycle of
// waits exists.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> scatterTree(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const int root = req.root;
  BRAID_RETURN_IF_ERROR(checkRoot("scatter", root, n));
  BRAID_RETURN_IF_ERROR(checkBlockDispls("scatter", req, n));
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
  const Region out{Buf::kOutput, 0, blockBytes};
  // Block b of the root's input (apart from the others with displs).
  auto inBlock = [&](int b) { return Region{Buf::kInput, blockAt(req, b) * dataTypeSize(req.dtype), blockBytes}; };

  if (v != 0 && size == 1) {  // a leaf receives its block where it belongs
    plan.steps.push_back(Step{Prim::kRecv, real(v - low), -1, {}, out});
    return s;
  }
  // Where the subtree's blocks are, in relative order.
  Buf from = Buf::kScratch;
  if (v == 0) {
    if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, inBlock(root), out});
    if (root == 0 && req.displs.empty()) {
      from = Buf::kInput;
    } else if (!req.displs.empty()) {
      // Relative block i to scratch block i, one at a time: the blocks are apart.
      s.scratchBytes = static_cast<size_t>(n) * blockBytes;
      for (int i = 1; i < n; ++i) plan.steps.push_back(Step{Prim::kCopy, -1, -1, inBlock(real(i)), at(Buf::kScratch, i, 1)});
    } else {
      s.scratchBytes = static_cast<size_t>(n) * blockBytes;
      if (root + 1 < n) plan.steps.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kInput, root + 1, n - root - 1), at(Buf::kScratch, 1, n - root - 1)});
      plan.steps.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kInput, 0, root), at(Buf::kScratch, n - root, root)});
    }
  } else {
    s.scratchBytes = static_cast<size_t>(size) * blockBytes;
    plan.steps.push_back(Step{Prim::kRecv, real(v - low), -1, {}, at(Buf::kScratch, 0, size)});
    plan.steps.push_back(Step{Prim::kCopy, -1, -1, at(Buf::kScratch, 0, 1), out});
  }
  int top = 1;
  while (top * 2 < low) top *= 2;
  for (int m = top; m >= 1; m /= 2)
    if (m < low && v + m < n) plan.steps.push_back(Step{Prim::kSend, -1, real(v + m), at(from, m, std::min(m, n - v - m)), {}});
  return s;
}

}  // namespace braid::algorithms

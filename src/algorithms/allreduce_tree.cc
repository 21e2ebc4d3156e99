// Double binary tree allreduce (NCCL's): the buffer is cut in two halves, half t reduced
// up tree t (binaryTree(..., mirror = t == 1)) to its root and broadcast back down. The two
// trees are complementary, so a rank that is a leaf in one is an inner node in the other and
// every rank moves about one buffer's worth of data each way, in ~2 log2(n) hops.
//
// Two phases, each with its own rounds: the reduction flows up both trees, pipelined part by
// part, and then the results flow down. Within a phase every rank runs all of its tree-0
// steps before its tree-1 steps, so with unbounded FIFOs no rank waits in a cycle (each tree
// is acyclic and tree 0 never waits on tree 1). A rank pair may be linked in both trees, so a
// connection can carry two steps per round: parts are kept to a quarter of the FIFO (half a
// round budget), which bounds what any round puts on a connection by half the FIFO; a send
// can then only wait on a receiver that is rounds behind, which never waits back on it.
//
// The root's result is broadcast, so every rank ends with the same bits whatever order
// the inner nodes reduced in.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

namespace {

// Appends the reduction of `in` up `t` (partials land in `out`; the root's `out` ends final).
void treeUp(const TreeNode& t, const Region& in, const Region& out, std::vector<Step>* steps) {
  const int c0 = t.child[0], c1 = t.child[1];
  const int nchild = (c0 >= 0) + (c1 >= 0);
  const int first = c0 >= 0 ? c0 : c1;
  const int second = c0 >= 0 ? c1 : -1;
  if (t.parent < 0) {  // the root
    if (nchild == 0) return;
    steps->push_back(Step{Prim::kRecvReduce, first, -1, in, out});
    if (second >= 0) steps->push_back(Step{Prim::kRecvReduce, second, -1, out, out});
    return;
  }
  if (nchild == 0) {
    steps->push_back(Step{Prim::kSend, -1, t.parent, in, {}});
  } else if (nchild == 1) {
    steps->push_back(Step{Prim::kRecvReduceSend, first, t.parent, in, {}});
  } else {
    steps->push_back(Step{Prim::kRecvReduce, first, -1, in, out});
    steps->push_back(Step{Prim::kRecvReduceSend, second, t.parent, out, {}});
  }
}

// Appends the broadcast of the root's `out` down `t` into every rank's `out`.
void treeDown(const TreeNode& t, const Region& out, std::vector<Step>* steps) {
  const int c0 = t.child[0], c1 = t.child[1];
  const int first = c0 >= 0 ? c0 : c1;
  const int second = c0 >= 0 ? c1 : -1;
  if (t.parent < 0) {
    if (first >= 0) steps->push_back(Step{Prim::kSend, -1, first, out, {}});
    if (second >= 0) steps->push_back(Step{Prim::kSend, -1, second, out, {}});
    return;
  }
  if (first < 0) {
    steps->push_back(Step{Prim::kRecv, t.parent, -1, {}, out});
    return;
  }
  steps->push_back(Step{Prim::kRecvCopySend, t.parent, first, {}, out});
  if (second >= 0) steps->push_back(Step{Prim::kSend, -1, second, out, {}});
}

}  // namespace

StatusOr<Schedule> allreduceTree(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  Schedule s;
  s.dtype = req.dtype;
  s.op = req.op;
  s.algorithm = "tree";
  s.connectionSet = 1;
  s.channels.resize(1);
  exec::ChannelPlan& plan = s.channels[0];
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges = {{Region{Buf::kOutput, 0, bytes}}};
  }
  if (bytes == 0) return s;
  if (n == 1) {
    if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, {Buf::kInput, 0, bytes}, {Buf::kOutput, 0, bytes}});
    return s;
  }

  // Half 0 is the lower half (possibly empty), half 1 the rest.
  const size_t split = req.count / 2 * es;
  const Region in[2] = {{Buf::kInput, 0, split}, {Buf::kInput, split, bytes - split}};
  const Region out[2] = {{Buf::kOutput, 0, split}, {Buf::kOutput, split, bytes - split}};
  TreeNode tree[2];
  for (int t = 0; t < 2; ++t) tree[t] = binaryTree(layout.rank, n, 0, t == 1);

  const int rounds = roundsFor(bytes - split, std::max(es, layout.smallRoundBytes / 2 / es * es));
  const size_t upBegin = plan.steps.size();
  for (int t = 0; t < 2; ++t)
    if (in[t].bytes) treeUp(tree[t], in[t], out[t], &plan.steps);
  const size_t downBegin = plan.steps.size();
  for (int t = 0; t < 2; ++t)
    if (out[t].bytes) treeDown(tree[t], out[t], &plan.steps);
  plan.phases.push_back(exec::Phase{upBegin, downBegin - upBegin, rounds});
  plan.phases.push_back(exec::Phase{downBegin, plan.steps.size() - downBegin, rounds});
  plan.rounds = rounds;
  return s;
}

}  // namespace braid::algorithms

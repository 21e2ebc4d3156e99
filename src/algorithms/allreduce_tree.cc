// Double binary tree allreduce (NCCL's): the buffer is cut in two halves, half t reduced
// up tree t to its root and broadcast back down. The trees are the topology's
// (Layout::treeParent: chains inside hosts, NCCL's double binary tree across them, any
// number of children per rank) when rank 0 published them, else binaryTree(..., mirror =
// t == 1). The two trees are complementary, so a rank that is a leaf in one is an inner
// node in the other and every rank moves about one buffer's worth of data each way, in
// ~2 log2(n) hops.
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
// the inner nodes reduced in. Nothing here depends on the trees being binary: each is acyclic,
// and a connection carries at most one step per tree per round (a rank sends only to its
// parent going up and once to each child going down).

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

namespace {

// One rank's place in a tree: its parent (-1 at the root) and its children, in the order
// data flows down (and partials are received up).
struct Node {
  int parent = -1;
  std::vector<int> children;
};

// Appends the reduction of `in` up the tree (partials land in `out`; the root's `out` ends
// final). Children are folded in their order: the first into `in` -> `out`, the others
// into `out`; an inner node forwards with its last child's fold.
void treeUp(const Node& t, const Region& in, const Region& out, std::vector<Step>* steps) {
  const size_t k = t.children.size();
  if (k == 0) {
    if (t.parent >= 0) steps->push_back(Step{Prim::kSend, -1, t.parent, in, {}});
    return;
  }
  for (size_t i = 0; i < k; ++i) {
    const Region& src = i == 0 ? in : out;
    if (i + 1 == k && t.parent >= 0)
      steps->push_back(Step{Prim::kRecvReduceSend, t.children[i], t.parent, src, {}});
    else
      steps->push_back(Step{Prim::kRecvReduce, t.children[i], -1, src, out});
  }
}

// Appends the broadcast of the root's `out` down the tree into every rank's `out`.
void treeDown(const Node& t, const Region& out, std::vector<Step>* steps) {
  size_t i = 0;
  if (t.parent >= 0) {
    if (t.children.empty()) {
      steps->push_back(Step{Prim::kRecv, t.parent, -1, {}, out});
      return;
    }
    steps->push_back(Step{Prim::kRecvCopySend, t.parent, t.children[0], {}, out});
    i = 1;
  }
  for (; i < t.children.size(); ++i) steps->push_back(Step{Prim::kSend, -1, t.children[i], out, {}});
}

// Tree `t` (0 or 1) as this rank sees it: the topology's when the layout has it, else
// binaryTree() rooted at 0 (mirrored for tree 1).
Node treeOf(const Layout& layout, int t) {
  Node node;
  const std::vector<int>& parent = layout.treeParent[t];
  if (static_cast<int>(parent.size()) == layout.nranks) {
    node.parent = parent[layout.rank];
    node.children = treeChildren(parent, layout.hostOf)[layout.rank];
    return node;
  }
  TreeNode b = binaryTree(layout.rank, layout.nranks, 0, t == 1);
  node.parent = b.parent;
  for (int c : b.child)
    if (c >= 0) node.children.push_back(c);
  return node;
}

}  // namespace

StatusOr<Schedule> allreduceTree(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  Schedule s = meshSchedule(req, "tree");
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
  Node tree[2];
  for (int t = 0; t < 2; ++t) tree[t] = treeOf(layout, t);

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

// Binary trees for the tree algorithms, shaped as NCCL's double binary tree.
//
// Tree 0 numbers the ranks by their distance v from the root and links them in "in-order
// bit" fashion: a node whose lowest set bit is b has children v - b/2 and v + b/2 (the right
// one shrunk to v + b/4, v + b/8, ... while it falls outside 0..n-1), and node 0, the root,
// has the single child P/2 where P is the smallest power of two >= n. About half the nodes
// (the odd v) are leaves and the depth is ~log2(n).
//
// Tree 1 is the complement: for even n the mirror image (v -> n-1-v), for odd n the tree
// shifted by one (v -> v-1). Either way the odd v, leaves of tree 0, become inner nodes of
// tree 1 and the other way round, so when each tree carries half the data every rank sends
// and receives about the same amount — the reason NCCL pairs them.

#include "algorithms/algorithm.h"

namespace braid::algorithms {
namespace {

// Parent and children of `v` in tree 0 over nodes 0..n-1 rooted at 0.
TreeNode inOrderTree(int v, int n) {
  TreeNode t;
  if (n <= 1) return t;
  int bit = 1;
  while (bit < n && !(bit & v)) bit <<= 1;
  if (v == 0) {
    t.child[0] = bit >> 1;  // bit is the smallest power of two >= n here
    return t;
  }
  int up = (v ^ bit) | (bit << 1);
  if (up >= n) up = v ^ bit;  // no node at v's would-be parent: attach to the one above
  t.parent = up;
  int low = bit >> 1;
  if (low > 0) {
    t.child[0] = v - low;
    int right = low;
    while (right > 0 && v + right >= n) right >>= 1;
    if (right > 0) t.child[1] = v + right;
  }
  return t;
}

}  // namespace

TreeNode binaryTree(int rank, int nranks, int root, bool mirror) {
  const int n = nranks;
  if (n <= 1) return TreeNode{};
  const int v = ((rank - root) % n + n) % n;
  // `to` maps a node of tree 0 to this tree's node numbering, `from` back.
  auto to = [&](int x) {
    if (!mirror) return x;
    return n % 2 == 0 ? n - 1 - x : (x + 1) % n;
  };
  auto from = [&](int x) {
    if (!mirror) return x;
    return n % 2 == 0 ? n - 1 - x : (x - 1 + n) % n;
  };
  TreeNode t0 = inOrderTree(from(v), n);
  auto toRank = [&](int x) { return x < 0 ? -1 : (to(x) + root) % n; };
  TreeNode t;
  t.parent = toRank(t0.parent);
  t.child[0] = toRank(t0.child[0]);
  t.child[1] = toRank(t0.child[1]);
  return t;
}


std::vector<std::vector<int>> treeChildren(const std::vector<int>& parent, const std::vector<int>& hostOf) {
  const size_t n = parent.size();
  std::vector<std::vector<int>> children(n);
  auto host = [&](int r) { return static_cast<size_t>(r) < hostOf.size() ? hostOf[r] : 0; };
  for (bool remote : {true, false})
    for (size_t r = 0; r < n; ++r) {
      const int p = parent[r];
      if (p < 0 || static_cast<size_t>(p) >= n) continue;
      if ((host(p) != host(static_cast<int>(r))) == remote) children[p].push_back(static_cast<int>(r));
    }
  return children;
}

}  // namespace braid::algorithms

#pragma once
// Orderings the planner builds collectives on, computed from the host graphs:
//   - ring order: ranks of one host are contiguous; inside a host, GPUs follow each other so
//     that consecutive GPUs share the fastest path (NVLink before PCIe switch before CPU),
//     and the host's segment is cut at its weakest hop, where the network takes over;
//   - double binary tree: NCCL's pair of complementary binary trees over hosts, with a
//     chain inside each host, so each host is an inner node in at most one tree;
//   - NIC per channel: channel i of a rank uses NIC (i mod k) of the k NICs nearest to its
//     GPU (or NUMA node), after BRAID_NET_IF / BRAID_IB_HCA-style include/exclude lists.
// All functions are pure: they read the graphs, touch no environment and do not block.

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "common/nic_filter.h"
#include "common/status.h"
#include "topology/graph.h"

namespace braid::topology {

// Where one rank runs.
struct RankPlace {
  int host = 0;   // index into the `hosts` vector given to the functions below
  int gpu = -1;   // GPU index on that host (Graph::gpus()[gpu]); -1 for a CPU rank
  int numa = -1;  // NUMA node (OS index) a CPU rank is bound to; -1 when unknown
};

// Ring order: ring[k] is the rank at position k; the ring closes from the last back to the
// first. Hosts appear in order of their lowest rank. kInvalidArgument when a rank names a
// host or GPU that does not exist. Ranks sharing a GPU are kept adjacent.
[[nodiscard]] StatusOr<std::vector<int>> ringOrder(const std::vector<const Graph*>& hosts,
                                                   const std::vector<RankPlace>& ranks);

// The ring for `channel`: even channels use ringOrder(), odd channels the same ring
// reversed, so that both directions of every link carry traffic.
[[nodiscard]] StatusOr<std::vector<int>> ringForChannel(const std::vector<const Graph*>& hosts,
                                                        const std::vector<RankPlace>& ranks, int channel);

// GPU indices of one host in the order a ring visits them (a cycle; position 0 is the
// lowest-index GPU unless `cutAtWeakest`, which rotates the cycle so that its weakest hop is
// the one between the last and the first, i.e. the hop a multi-host ring replaces by the
// network). `gpus` lists GPU indices of `g`; duplicates are not allowed.
std::vector<int> orderGpusForRing(const Graph& g, const std::vector<int>& gpus, bool cutAtWeakest);

// One spanning tree over all ranks, indexed by rank.
struct Tree {
  int root = -1;
  std::vector<int> parent;                 // -1 for the root
  std::vector<std::vector<int>> children;  // in the order data flows down
};

// NCCL's double binary tree. Inside each host the ranks form a chain in ring order (tree 0
// enters a host at the first rank of its ring segment, tree 1 at the last); across hosts,
// tree 0 is a binary tree over host positions and tree 1 its mirror (even host count) or
// its shift by one (odd), so that no host is an inner node in both.
[[nodiscard]] StatusOr<std::array<Tree, 2>> doubleBinaryTree(const std::vector<const Graph*>& hosts,
                                                             const std::vector<RankPlace>& ranks);

// NCCL's binary tree over positions 0..n-1 (ncclGetBtree): parent of `pos` (-1 for the
// root, position 0) and its up to two children (-1 when absent).
void btreeNeighbours(int n, int pos, int* parent, int* child0, int* child1);

// NIC lists in NCCL's syntax (common/nic_filter.h).
using NicFilter = ::braid::NicFilter;

// Which NICs a job may use. RDMA NICs (those with an HCA name) are judged by `ibHca` on
// their HCA name and port; plain Ethernet NICs by `netIf` on their interface name. The two
// lists mirror BRAID_IB_HCA and BRAID_NET_IF; the caller reads those, not this code.
struct NicPolicy {
  NicFilter netIf;
  NicFilter ibHca;
  bool allows(const Node& nic) const;
};

// NICs of `g` allowed by `policy` that are closest to node `from` (best path type, then
// highest path bandwidth), in canonical NIC order.
std::vector<int> nearestAllowedNics(const Graph& g, int from, const NicPolicy& policy);

// The graph node a rank's traffic starts from: its GPU, or the CPU node of its NUMA node
// (the first CPU when unknown). -1 when the place does not exist in `g`.
int rankNode(const Graph& g, const RankPlace& place);

// The NIC (node index in `g`) that channel `channel` of a rank placed at `place` uses:
// NIC (channel mod k) of its k nearest allowed NICs. -1 when no NIC is allowed.
int nicForChannel(const Graph& g, const RankPlace& place, int channel, const NicPolicy& policy);

}  // namespace braid::topology

#pragma once
// Algorithms turn a collective request into a Schedule for one rank. They are pure
// functions of their arguments: every rank computes its own part, and the parts agree
// because they are derived from the same global quantities.

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "exec/schedule.h"

namespace braid::algorithms {

enum class Collective : int {
  kAllReduce = 0,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kGather,
  kScatter,
  kAllGatherV,
  kReduceScatterV,
  kAllToAllV,
  kBarrier,
  kSendRecv,  // a group of point-to-point sends and receives (Request::p2p)
};
constexpr int kNumCollectives = 13;
const char* collectiveName(Collective c);  // "allreduce", "reduce_scatter", ... as the perf tools

// One send or receive of a point-to-point group. Its buffer is Buffers::extra[index].
struct P2POp {
  bool isSend = true;
  int peer = 0;
  size_t count = 0;  // elements
};

// A collective call as every algorithm sees it. Counts are in elements; buffers are
//   kInput / kOutput  the user's send / receive buffers (identical pointers when in place),
// sized per collective as below (n = nranks):
//   allreduce          in count,                out count
//   broadcast          in count (root),         out count
//   reduce             in count,                out count (root)
//   allgather          in count,                out n*count          (in place: in == out + rank*count)
//   reduce_scatter     in n*count,              out count            (in place: out == in + rank*count)
//   alltoall           in n*count,              out n*count          (count per peer)
//   gather             in count,                out n*count (root)   (in place at root: in == out + root*count)
//   scatter            in n*count (root),       out count            (in place at root: out == in + root*count)
//     (gather and scatter: with displs, the root's block b is at element displs[b] instead
//     of b*count, as a device call's pieces run them; the API's calls leave it empty)
//   allgatherv         in counts[rank],         out max(displs+counts)
//   reduce_scatterv    in sum(counts),          out counts[rank]
//   alltoallv          in max(sendDispls+sendCounts), out max(displs+counts)
//   barrier            nothing
//   sendrecv           Request::p2p, each op on its own buffer
struct Request {
  Collective coll = Collective::kAllReduce;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool inPlace = false;
  // v-variants: receive counts and displacements per rank (alltoallv: also send side;
  // reduce-scatterv: the blocks' displacements in the input, back to back when empty).
  std::vector<size_t> counts, displs, sendCounts, sendDispls;
  std::vector<P2POp> p2p;
  // A pre-multiplied sum (PyTorch's PREMUL_SUM): the communicator scales this rank's input
  // by `preMulScalar` into a private copy, then runs `op` (kSum) on it. Algorithms ignore it.
  bool preMul = false;
  double preMulScalar = 1.0;
};

// The size of a call as the perf tools' size column counts it (allreduce/broadcast/reduce:
// count; allgather/reduce_scatter/alltoall/gather/scatter: nranks*count; v-variants: the
// total), in bytes. BRAID_ALGO ranges and the planner's tables use it.
size_t requestBytes(const Request& req, int nranks);

// Bytes of the input and output buffers `req` reads and writes on `rank` (see Request).
size_t inputElems(const Request& req, int rank, int nranks);
size_t outputElems(const Request& req, int rank, int nranks);

struct Layout {
  int rank = 0;
  int nranks = 1;
  // Ring order per channel (a permutation of all ranks). Channel count = rings.size().
  std::vector<std::vector<int>> rings;
  // Host index of every rank (0..nhosts-1, numbered by lowest rank); all 0 on one host.
  std::vector<int> hostOf;
  // Most bytes a step may send in one round without risking deadlock: half of a
  // connection's FIFO (the other half absorbs the next round while this one drains).
  size_t roundBytes = 2 * 1024 * 1024;
  // The same for the mesh connection set (Schedule::connectionSet 1).
  size_t smallRoundBytes = 64 * 1024;
  // Where every connection carries messages larger than a slot (Connection::
  // maxMessageBytes, agreed by all ranks at init), the largest message; 0 elsewhere. A
  // schedule marked wholeBlocks may then move up to this many bytes per step and round as
  // one message, which takes one slot of the FIFO whatever its size: its rounds and parts
  // are cut by wholeBlockRound() instead of roundBytes/smallRoundBytes.
  size_t wholeBlockBytes = 0;
  // Whether the rings' schedules (allgather) may go in whole blocks too, or only the mesh's
  // (alltoall, point-to-point groups): false over UCX's paced tcp on one host
  // (core::Communicator).
  bool wholeBlocksInRings = true;
  // Whether a whole block moves through memory after a handshake of both sides (UCX's
  // rendezvous over its shared memory on one host), rather than through a socket: where
  // each step pays that handshake, fewer steps pay (the planner's rendezvousHalving). It
  // also marks UCX's shared memory for the planner's ucxMemoryTwoShot, whose messages go
  // eager.
  bool rendezvousInMemory = false;
  // Allreduces up to this many bytes use the small-message algorithm (0 = never).
  size_t smallMaxBytes = 0;
  // The topology's double binary tree (topology::doubleBinaryTree, published by rank 0):
  // parent of every rank in each tree, -1 at its root. Empty when no topology is known:
  // the tree allreduce then uses binaryTree(). Each must be a spanning tree of all ranks.
  std::array<std::vector<int>, 2> treeParent;
  // Link bandwidths from the topology (GB/s, 0 = unknown: the transport table's value):
  // the slowest rank's nearest NIC, and the slowest GPU-to-GPU hop inside a host.
  double netGBps = 0;
  double intraGBps = 0;
};

// Every algorithm has this shape: a pure function of the request and the layout.
using Builder = StatusOr<exec::Schedule> (*)(const Request& req, const Layout& layout);

// Ring allreduce: reduce-scatter then allgather around each channel's ring, with the fused
// primitives so every element is read and written once per hop.
StatusOr<exec::Schedule> allreduceRing(const Request& req, const Layout& layout);

// Recursive doubling (with a fold for non-powers of two): log2(n) full-buffer exchanges;
// for small messages, where hops cost more than bytes. Uses connection set 1.
StatusOr<exec::Schedule> allreduceRecursiveDoubling(const Request& req, const Layout& layout);
// The peers `rank` exchanges with in recursive doubling (fold partner first).
std::vector<int> recursiveDoublingPeers(int rank, int nranks);

// Pipelined chain broadcast along each channel's ring, starting at the root.
StatusOr<exec::Schedule> broadcastChain(const Request& req, const Layout& layout);

// ---- allreduce
// Double binary tree (two complementary trees, each reducing and broadcasting half the
// data, pipelined); mesh connections.
StatusOr<exec::Schedule> allreduceTree(const Request& req, const Layout& layout);
// Recursive halving (reduce-scatter) then recursive doubling (allgather), Rabenseifner,
// with the non-power-of-two fold; mesh connections.
StatusOr<exec::Schedule> allreduceRabenseifner(const Request& req, const Layout& layout);
// One shot: every rank sends its whole buffer to every other and reduces locally.
StatusOr<exec::Schedule> allreduceDirect(const Request& req, const Layout& layout);
// Two shot: direct reduce-scatter of n shards, then direct allgather.
StatusOr<exec::Schedule> allreduceTwoShot(const Request& req, const Layout& layout);
// Several hosts: reduce-scatter inside each host, allreduce of each shard across hosts,
// allgather inside each host.
StatusOr<exec::Schedule> allreduceHierarchical(const Request& req, const Layout& layout);

// ---- broadcast / reduce
StatusOr<exec::Schedule> broadcastTree(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> reduceChain(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> reduceTree(const Request& req, const Layout& layout);

// ---- allgather / reduce-scatter (and their v-variants)
StatusOr<exec::Schedule> allgatherRing(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> allgatherRecursiveDoubling(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> allgatherBruck(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> reduceScatterRing(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> reduceScatterRecursiveHalving(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> reduceScatterDirect(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> allgatherVRing(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> reduceScatterVRing(const Request& req, const Layout& layout);

// ---- alltoall, gather, scatter
StatusOr<exec::Schedule> alltoallPairwise(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> alltoallBruck(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> alltoallVPairwise(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> gatherDirect(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> gatherTree(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> scatterDirect(const Request& req, const Layout& layout);
StatusOr<exec::Schedule> scatterTree(const Request& req, const Layout& layout);

// ---- barrier and point-to-point
// Dissemination barrier: ceil(log2 n) rounds of one-byte messages.
StatusOr<exec::Schedule> barrierDissemination(const Request& req, const Layout& layout);
// A group of sends and receives, each message cut into parts of a size that depends on the
// message alone, all sends of part k before all receives of part k: deadlock-free whatever
// the peers' groups contain, with FIFOs of two parts.
StatusOr<exec::Schedule> sendRecvGroup(const Request& req, const Layout& layout);

// ---- the table the planner chooses from
struct AlgorithmInfo {
  Collective coll;
  const char* name;  // as BRAID_ALGO spells it
  Builder build;
};
// Every algorithm, grouped by collective; the first entry of a collective is its default.
const std::vector<AlgorithmInfo>& algorithmTable();
// nullptr when `coll` has no algorithm called `name`.
const AlgorithmInfo* findAlgorithm(Collective coll, const std::string& name);

// Binary tree helpers shared by the tree algorithms: the tree over ranks 0..n-1 rooted at
// `root` in which rank r's parent and children are returned (-1 = none). `mirror` gives the
// complementary tree of a double binary tree (every leaf of one is inner in the other
// where n allows).
struct TreeNode {
  int parent = -1;
  int child[2] = {-1, -1};
};
TreeNode binaryTree(int rank, int nranks, int root, bool mirror);

// Children of every rank in the tree given by `parent` (-1 at the root): children on
// another host than their parent first (the network hop is the slow one, so it starts
// first), then those on the same host, each group by rank. `hostOf` may be empty (one host).
std::vector<std::vector<int>> treeChildren(const std::vector<int>& parent, const std::vector<int>& hostOf);

// The empty Schedule every builder starts from, with the request's type and op and the
// algorithm's name: on the mesh (connection set 1, one channel) or on the rings (set 0, one
// channel per ring of the layout; kInvalidArgument when the layout has none); every channel
// runs one round until the builder says otherwise.
exec::Schedule meshSchedule(const Request& req, const char* name);
StatusOr<exec::Schedule> ringSchedule(const Request& req, const char* name, const Layout& layout);

// kInvalidArgument "<coll>: root=R is outside [0, n)" unless 0 <= root < n.
Status checkRoot(const char* coll, int root, int n);
// Gather's and scatter's blocks at the root: block b at element displs[b], or b*count when
// displs is empty (checked: one entry per rank, or none).
Status checkBlockDispls(const char* coll, const Request& req, int n);
inline size_t blockAt(const Request& req, int b) {
  return req.displs.empty() ? static_cast<size_t>(b) * req.count : req.displs[static_cast<size_t>(b)];
}

// Elements of channel `c` out of `count` split over `nchannels`: [begin, end).
inline size_t channelBegin(size_t count, int c, int nchannels) {
  return count * static_cast<size_t>(c) / static_cast<size_t>(nchannels);
}

// The ring neighbours of `rank` in `ring`.
struct RingPos {
  int index = 0;
  int prev = 0;
  int next = 0;
};
RingPos ringPosition(const std::vector<int>& ring, int rank);

// Rounds needed so that no step moves more than `roundBytes` per round.
int roundsFor(size_t maxStepBytes, size_t roundBytes);
// The round budget of schedule `s`: `roundBytes` (its connection set's slot-cut budget),
// or, for a schedule marked wholeBlocks where large messages are on, Layout::wholeBlockBytes.
size_t wholeBlockRound(const Layout& layout, const exec::Schedule& s, size_t roundBytes);

}  // namespace braid::algorithms

#pragma once
// Algorithms turn a collective request into a Schedule for one rank. They are pure
// functions of their arguments: every rank computes its own part, and the parts agree
// because they are derived from the same global quantities.

#include <cstddef>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "exec/schedule.h"

namespace braid::algorithms {

enum class Collective : int { kAllReduce = 0, kBroadcast };

struct Request {
  Collective coll = Collective::kAllReduce;
  size_t count = 0;  // elements
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool inPlace = false;
};

struct Layout {
  int rank = 0;
  int nranks = 1;
  // Ring order per channel (a permutation of all ranks). Channel count = rings.size().
  std::vector<std::vector<int>> rings;
  // Most bytes a step may send in one round without risking deadlock: half of a
  // connection's FIFO (the other half absorbs the next round while this one drains).
  size_t roundBytes = 2 * 1024 * 1024;
  // The same for the small-message connection set (Schedule::connectionSet 1).
  size_t smallRoundBytes = 64 * 1024;
  // Allreduces up to this many bytes use the small-message algorithm (0 = never).
  size_t smallMaxBytes = 0;
};

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

}  // namespace braid::algorithms

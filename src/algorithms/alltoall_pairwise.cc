// Pairwise-exchange alltoall (and alltoallv) on the mesh: in step k = 1..n-1 rank r sends
// its block for rank r+k and receives the block from rank r-k, so every step every rank
// sends one message and receives one, and no peer is ever asked for two at once.
//
// The two ends of a message know its size (rank i's send count to j is rank j's receive
// count from i) but not each other's other counts, so nothing else may decide how a message
// is cut: every message goes in parts of at most half a mesh FIFO computed from its own
// size, and the schedule runs part by part, steps in order within a part. A send of part q
// can then only wait for a peer to drain parts before q, which that peer does without
// waiting for anything of part q or later: no cycle of waits, whatever the counts.
//
// In place the input is the output, and a block received early would overwrite one not yet
// sent, so the blocks for the peers are first copied to scratch (at their own offsets: gaps
// between them are not copied) and sent from there.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

namespace {

// Element counts and offsets per peer for both directions.
StatusOr<Schedule> pairwise(const Request& req, const Layout& layout, const std::vector<size_t>& sendCounts,
                            const std::vector<size_t>& sendDispls, const std::vector<size_t>& recvCounts,
                            const std::vector<size_t>& recvDispls) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  Schedule s = meshSchedule(req, "pairwise");
  // Out of place every block goes straight from the input; in place it is sent from a
  // scratch copy, which whole blocks would have to copy once more.
  s.wholeBlocks = !req.inPlace;
  exec::ChannelPlan& plan = s.channels[0];

  if (sendCounts[r] != recvCounts[r])
    return invalidArgument("alltoall: this rank sends itself " + std::to_string(sendCounts[r]) + " elements but receives " +
                           std::to_string(recvCounts[r]));
  Buf src = Buf::kInput;
  if (req.inPlace) {
    size_t extent = 0;
    for (int j = 0; j < n; ++j)
      if (sendCounts[j]) extent = std::max(extent, sendDispls[j] + sendCounts[j]);
    s.scratchBytes = extent * es;
    for (int j = 0; j < n; ++j) {
      // The own block is read before anything is received only where it moves.
      if (!sendCounts[j] || (j == r && sendDispls[r] == recvDispls[r])) continue;
      const Region block{Buf::kInput, sendDispls[j] * es, sendCounts[j] * es};
      plan.steps.push_back(Step{Prim::kCopy, -1, -1, block, Region{Buf::kScratch, block.offset, block.bytes}});
    }
    src = Buf::kScratch;
  }
  auto sendRegion = [&](int j) { return Region{src, sendDispls[j] * es, sendCounts[j] * es}; };
  auto recvRegion = [&](int j) { return Region{Buf::kOutput, recvDispls[j] * es, recvCounts[j] * es}; };
  // In place the own block is already where it belongs unless the displacements move it.
  if (recvCounts[r] && !(req.inPlace && sendDispls[r] == recvDispls[r]))
    plan.steps.push_back(Step{Prim::kCopy, -1, -1, sendRegion(r), recvRegion(r)});
  if (n == 1) return s;

  const size_t partElems = std::max<size_t>(1, wholeBlockRound(layout, s, layout.smallRoundBytes) / es);
  size_t maxParts = 0;
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    maxParts = std::max(maxParts, (sendCounts[j] + partElems - 1) / partElems);
    maxParts = std::max(maxParts, (recvCounts[j] + partElems - 1) / partElems);
  }
  auto part = [&](Region g, size_t q) {  // part q of region g, empty past its end
    size_t elems = g.bytes / es;
    size_t lo = std::min(elems, q * partElems), hi = std::min(elems, lo + partElems);
    return Region{g.buf, g.offset + lo * es, (hi - lo) * es};
  };
  for (size_t q = 0; q < maxParts; ++q) {
    for (int k = 1; k < n; ++k) {
      const int to = (r + k) % n, from = (r - k + n) % n;
      Region out = part(sendRegion(to), q), in = part(recvRegion(from), q);
      if (out.bytes) plan.steps.push_back(Step{Prim::kSend, -1, to, out, {}});
      if (in.bytes) plan.steps.push_back(Step{Prim::kRecv, from, -1, {}, in});
    }
  }
  return s;
}

}  // namespace

StatusOr<Schedule> alltoallPairwise(const Request& req, const Layout& layout) {
  const size_t n = static_cast<size_t>(layout.nranks);
  std::vector<size_t> counts(n, req.count), displs(n);
  for (size_t j = 0; j < n; ++j) displs[j] = j * req.count;
  return pairwise(req, layout, counts, displs, counts, displs);
}

StatusOr<Schedule> alltoallVPairwise(const Request& req, const Layout& layout) {
  const size_t n = static_cast<size_t>(layout.nranks);
  if (req.counts.size() != n || req.displs.size() != n || req.sendCounts.size() != n || req.sendDispls.size() != n)
    return invalidArgument("alltoallv: sendCounts, sendDispls, counts and displs need one entry per rank (" +
                           std::to_string(n) + ")");
  return pairwise(req, layout, req.sendCounts, req.sendDispls, req.counts, req.displs);
}

}  // namespace braid::algorithms

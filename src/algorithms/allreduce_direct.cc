// Direct allreduces over the mesh, for small messages where one hop beats log2(n) hops.
//
// One shot: every rank sends its whole buffer to every other and reduces all n buffers
// itself. Floating-point reduction is not associative, so each rank folds them in the
// same order, ((x0 op x1) op x2) op ..., and all ranks end with the same bits.
//
// Two shot: a direct reduce-scatter (shard j of every rank goes to rank j, which alone
// reduces it) and then a direct allgather of the reduced shards. Each rank sends 2(n-1)/n
// of the buffer instead of n-1 buffers, still in two hops.
//
// In both, every rank posts all its sends of a round before any of its receives, so with
// unbounded FIFOs nobody waits in a cycle; a connection carries at most two parts per round
// (two shot: a shard to reduce and a reduced shard), each kept to half a round budget.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

namespace {

// A mesh schedule that divides the result by n for AVG.
Schedule averagingSchedule(const Request& req, const Layout& layout, const char* name) {
  Schedule s = meshSchedule(req, name);
  if (req.op == ReduceOp::kAvg && layout.nranks > 1) {
    s.divisor = layout.nranks;
    s.divideRanges = {{Region{Buf::kOutput, 0, req.count * dataTypeSize(req.dtype)}}};
  }
  return s;
}

}  // namespace

StatusOr<Schedule> allreduceDirect(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  Schedule s = averagingSchedule(req, layout, "direct");
  exec::ChannelPlan& plan = s.channels[0];
  if (bytes == 0) return s;
  plan.rounds = roundsFor(bytes, layout.smallRoundBytes);
  const Region in{Buf::kInput, 0, bytes};
  const Region out{Buf::kOutput, 0, bytes};

  for (int q = 0; q < n; ++q)
    if (q != r) plan.steps.push_back(Step{Prim::kSend, -1, q, in, {}});
  // In place, receiving x0 into `out` would destroy this rank's own input before its turn
  // in the fold: keep a copy. Within a round the sends above have already read the part.
  Region mine = in;
  if (req.inPlace && r != 0) {
    s.scratchBytes = bytes;
    mine = Region{Buf::kScratch, 0, bytes};
    plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, mine});
  }
  // The running result x0 op x1 op ...: rank 0's starts in its input (the first reduction
  // reads it there, so nothing is copied), every other rank's in `out`.
  Region partial = out;
  for (int q = 0; q < n; ++q) {
    if (q == 0) {
      if (r == 0) {
        partial = in;
        if (n == 1 && !req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out});
      } else {
        plan.steps.push_back(Step{Prim::kRecv, 0, -1, {}, out});
      }
    } else if (q == r) {
      plan.steps.push_back(Step{Prim::kLocalReduce, -1, -1, mine, out});  // out = out op x_r
    } else {
      plan.steps.push_back(Step{Prim::kRecvReduce, q, -1, partial, out});  // out = partial op x_q
      partial = out;
    }
  }
  return s;
}

StatusOr<Schedule> allreduceTwoShot(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  Schedule s = averagingSchedule(req, layout, "two-shot");
  exec::ChannelPlan& plan = s.channels[0];
  if (bytes == 0) return s;
  if (n == 1) {
    if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, {Buf::kInput, 0, bytes}, {Buf::kOutput, 0, bytes}});
    return s;
  }
  auto shard = [&](Buf buf, int j) {
    size_t lo = req.count * static_cast<size_t>(j) / static_cast<size_t>(n);
    size_t hi = req.count * static_cast<size_t>(j + 1) / static_cast<size_t>(n);
    return Region{buf, lo * es, (hi - lo) * es};
  };
  const size_t maxShardBytes = (req.count + n - 1) / n * es;
  plan.rounds = roundsFor(maxShardBytes, std::max(es, layout.smallRoundBytes / 2 / es * es));
  const Region own = shard(Buf::kOutput, r);

  // Reduce-scatter. Only this rank reduces shard r, so any fixed order gives every rank
  // the same bits once the shard is copied out: start from our own part. In place, the
  // receives into other shards only come in the allgather, after their sends in the round.
  for (int q = 0; q < n; ++q)
    if (q != r && shard(Buf::kInput, q).bytes) plan.steps.push_back(Step{Prim::kSend, -1, q, shard(Buf::kInput, q), {}});
  if (own.bytes) {
    // The first reduction reads our own part from the input, so out of place nothing is
    // copied: own = x_r op x_q, then own op the rest.
    Region partial = shard(Buf::kInput, r);
    for (int q = 0; q < n; ++q)
      if (q != r) {
        plan.steps.push_back(Step{Prim::kRecvReduce, q, -1, partial, own});
        partial = own;
      }
    // Allgather: our reduced shard to everyone.
    for (int q = 0; q < n; ++q)
      if (q != r) plan.steps.push_back(Step{Prim::kSend, -1, q, own, {}});
  }
  for (int q = 0; q < n; ++q)
    if (q != r && shard(Buf::kOutput, q).bytes) plan.steps.push_back(Step{Prim::kRecv, q, -1, {}, shard(Buf::kOutput, q)});
  return s;
}

}  // namespace braid::algorithms

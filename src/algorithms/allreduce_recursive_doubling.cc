// Recursive-doubling allreduce for small messages: log2(p) exchange steps instead of the
// ring's 2(n-1), where p is the largest power of two not above n. The n - p extra ranks
// first fold their data into a partner and get the result back at the end.
//
// At every level both partners combine the same two partial results (a op b on one side,
// b op a on the other), and IEEE addition, multiplication, max and min are commutative, so
// every rank ends with bit-identical values.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

std::vector<int> recursiveDoublingPeers(int rank, int nranks) {
  std::vector<int> peers;
  int p = 1;
  while (p * 2 <= nranks) p *= 2;
  if (rank >= p) return {rank - p};
  if (rank + p < nranks) peers.push_back(rank + p);
  for (int d = 1; d < p; d *= 2) peers.push_back(rank ^ d);
  return peers;
}

StatusOr<Schedule> allreduceRecursiveDoubling(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t bytes = req.count * dataTypeSize(req.dtype);
  Schedule s = meshSchedule(req, "recursive-doubling");
  exec::ChannelPlan& plan = s.channels[0];
  plan.rounds = roundsFor(bytes, layout.smallRoundBytes);
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges = {{Region{Buf::kOutput, 0, bytes}}};
  }
  if (bytes == 0) return s;

  const Region in{Buf::kInput, 0, bytes};
  const Region out{Buf::kOutput, 0, bytes};
  int p = 1;
  while (p * 2 <= n) p *= 2;

  if (r >= p) {  // an extra rank: fold in, wait for the result
    plan.steps.push_back(Step{Prim::kSend, -1, r - p, in, {}});
    plan.steps.push_back(Step{Prim::kRecv, r - p, -1, {}, out});
    return s;
  }
  // This rank's partial result: in `in` until a step first writes `out`. The first exchange
  // sends from `in` and reduces it into `out`, so an out-of-place call copies nothing.
  Region partial = in;
  if (r + p < n) {
    plan.steps.push_back(Step{Prim::kRecvReduce, r + p, -1, in, out});  // out = extra's data op ours
    partial = out;
  } else if (!req.inPlace && p == 1) {
    plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out});
  }
  for (int d = 1; d < p; d *= 2) {
    int partner = r ^ d;
    plan.steps.push_back(Step{Prim::kSend, -1, partner, partial, {}});
    plan.steps.push_back(Step{Prim::kRecvReduce, partner, -1, partial, out});  // out = theirs op ours
    partial = out;
  }
  if (r + p < n) plan.steps.push_back(Step{Prim::kSend, -1, r + p, out, {}});
  return s;
}

}  // namespace braid::algorithms

// Rabenseifner's allreduce: a reduce-scatter by recursive halving, then an allgather by
// recursive doubling, over p = the largest power of two not above n. Each rank sends
// 2(p-1)/p of the buffer (like the ring) in 2 log2(p) steps (unlike the ring's 2(n-1)), so
// it suits the middle sizes where the ring's hop count still shows.
//
// The n - p extra ranks first fold their whole buffer into partner rank - p and get the
// result back at the end. Block j of p blocks is reduced by rank j alone and then copied
// to everyone, so all ranks end with the same bits.
//
// Every level reads what the level before it wrote, over a range of another size, so each
// level is a phase of its own (a round of one level would otherwise read parts the level
// before has not produced yet); every rank has the same phases, with rounds from the
// largest range of that level anywhere. Within a phase each rank exchanges with one
// partner, "send, then receive", so with unbounded FIFOs nothing waits in a cycle and a
// connection carries one part per round.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> allreduceRabenseifner(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  Schedule s = meshSchedule(req, "rabenseifner");
  exec::ChannelPlan& plan = s.channels[0];
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges = {{Region{Buf::kOutput, 0, bytes}}};
  }
  if (bytes == 0) return s;
  const Region in{Buf::kInput, 0, bytes};
  const Region out{Buf::kOutput, 0, bytes};
  const size_t budget = std::max(es, layout.smallRoundBytes / es * es);
  if (n == 1) {
    plan.rounds = roundsFor(bytes, budget);
    if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, in, out});
    return s;
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const bool extra = r >= p;
  const bool folds = !extra && r + p < n;

  // Blocks [a, b) of p as a region of `buf`.
  auto blockLo = [&](int a) { return req.count * static_cast<size_t>(a) / static_cast<size_t>(p); };
  auto blocks = [&](Buf buf, int a, int b) { return Region{buf, blockLo(a) * es, (blockLo(b) - blockLo(a)) * es}; };
  // Rounds of a level that moves aligned runs of d blocks: from the largest run anywhere.
  auto levelRounds = [&](int d) {
    size_t most = 0;
    for (int a = 0; a < p; a += d) most = std::max(most, blockLo(a + d) - blockLo(a));
    return roundsFor(most * es, budget);
  };
  size_t phaseBegin = 0;
  auto endPhase = [&](int rounds) {
    plan.phases.push_back(exec::Phase{phaseBegin, plan.steps.size() - phaseBegin, rounds});
    phaseBegin = plan.steps.size();
  };
  auto push = [&](Prim prim, int peerIn, int peerOut, Region src, Region dst) {
    if ((prim == Prim::kRecv ? dst.bytes : src.bytes) == 0) return;  // both ends skip it
    plan.steps.push_back(Step{prim, peerIn, peerOut, src, dst});
  };

  // Fold: the extra ranks hand their data to their partners.
  const int foldRounds = roundsFor(bytes, budget);
  if (extra) plan.steps.push_back(Step{Prim::kSend, -1, r - p, in, {}});
  if (folds) plan.steps.push_back(Step{Prim::kRecvReduce, r + p, -1, in, out});  // out = extra's data op ours
  endPhase(foldRounds);

  // Reduce-scatter: halve the owned range each level, keeping the half that holds block r.
  // Until the first exchange has written `out`, this rank's data is still in `in` (unless
  // the fold put the partial result in `out`).
  Buf have = folds ? Buf::kOutput : Buf::kInput;
  int lo = 0, hi = p;
  for (int d = p / 2; d >= 1; d /= 2) {
    if (!extra) {
      const int partner = r ^ d;
      const int mid = lo + d;
      const bool upper = (r & d) != 0;
      const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
      const int sendLo = upper ? lo : mid, sendHi = upper ? mid : hi;
      push(Prim::kSend, -1, partner, blocks(have, sendLo, sendHi), {});
      push(Prim::kRecvReduce, partner, -1, blocks(have, keepLo, keepHi), blocks(Buf::kOutput, keepLo, keepHi));
      have = Buf::kOutput;
      lo = keepLo;
      hi = keepHi;
    }
    endPhase(levelRounds(d));
  }
  // Now lo == r, hi == r + 1: block r is final in `out`.

  // Allgather: double the owned range each level by swapping with the partner.
  for (int d = 1; d < p; d *= 2) {
    if (!extra) {
      const int partner = r ^ d;
      const int mine = r / d * d, theirs = partner / d * d;
      push(Prim::kSend, -1, partner, blocks(Buf::kOutput, mine, mine + d), {});
      push(Prim::kRecv, partner, -1, {}, blocks(Buf::kOutput, theirs, theirs + d));
    }
    endPhase(levelRounds(d));
  }

  // Unfold: the result back to the extra ranks.
  if (folds) plan.steps.push_back(Step{Prim::kSend, -1, r + p, out, {}});
  if (extra) plan.steps.push_back(Step{Prim::kRecv, r - p, -1, {}, out});
  endPhase(foldRounds);
  plan.rounds = foldRounds;
  return s;
}

}  // namespace braid::algorithms

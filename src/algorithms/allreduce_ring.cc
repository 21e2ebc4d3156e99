// Ring allreduce. Each channel's share of the buffer is cut into n chunks. In n-1
// reduce-scatter steps every rank forwards a running partial sum to its successor,
// so after them the rank at ring position p holds the full result for chunk p+1; in n-1
// allgather steps the results travel once around the ring. Each rank sends 2(n-1)/n of the
// buffer, the bandwidth-optimal amount, and touches each element once per step thanks to
// the fused primitives (recvReduceSend, recvReduceCopySend, recvCopySend).

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> allreduceRing(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int nch = static_cast<int>(layout.rings.size());
  const size_t es = dataTypeSize(req.dtype);

  BRAID_ASSIGN_OR_RETURN(Schedule s, ringSchedule(req, "ring", layout));
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges.resize(nch);
  }

  // The largest chunk of any channel bounds the per-round share on every rank alike.
  size_t maxChannelElems = (req.count + nch - 1) / nch;
  size_t maxChunkBytes = (maxChannelElems + n - 1) / n * es;
  const int rounds = roundsFor(maxChunkBytes, layout.roundBytes);

  for (int c = 0; c < nch; ++c) {
    exec::ChannelPlan& plan = s.channels[c];
    plan.rounds = rounds;
    plan.overlapRounds = true;
    size_t cb = channelBegin(req.count, c, nch);
    size_t ce = channelBegin(req.count, c + 1, nch);
    size_t elems = ce - cb;
    if (elems == 0) continue;
    if (s.divisor) s.divideRanges[c].push_back(Region{Buf::kOutput, cb * es, elems * es});

    auto chunk = [&](int j, Buf buf) {
      j = ((j % n) + n) % n;
      size_t lo = elems * static_cast<size_t>(j) / n;
      size_t hi = elems * static_cast<size_t>(j + 1) / n;
      return Region{buf, (cb + lo) * es, (hi - lo) * es};
    };

    if (n == 1) {
      if (!req.inPlace) plan.steps.push_back(Step{Prim::kCopy, -1, -1, chunk(0, Buf::kInput), chunk(0, Buf::kOutput)});
      continue;
    }

    RingPos pos = ringPosition(layout.rings[c], layout.rank);
    const int p = pos.index;
    auto step = [&](Prim prim, int j) {
      Step st;
      st.prim = prim;
      st.peerIn = pos.prev;
      st.peerOut = pos.next;
      st.src = chunk(j, Buf::kInput);
      st.dst = chunk(j, Buf::kOutput);
      plan.steps.push_back(st);
    };

    // Reduce-scatter.
    step(Prim::kSend, p);
    for (int k = 1; k < n - 1; ++k) step(Prim::kRecvReduceSend, p - k);
    step(Prim::kRecvReduceCopySend, p + 1);
    // Allgather: the finished chunks go once around the ring.
    for (int k = 1; k < n - 1; ++k) step(Prim::kRecvCopySend, p - k + 1);
    step(Prim::kRecv, p + 2);
  }
  return s;
}

}  // namespace braid::algorithms

// Dissemination barrier on the mesh: in round k every rank sends one byte to rank r+2^k and
// waits for one from rank r-2^k. After round k a rank has heard, directly or through
// others, from the 2^(k+1) ranks before it, so after ceil(log2 n) rounds from all of them:
// nobody leaves before everybody has entered. The bytes carry nothing (the slot's operation
// tag already tells a barrier from any other collective); they live in scratch because a
// barrier has no buffers.
//
// A round sends one slot to one peer and then receives, so no FIFO ever holds more than a
// round's worth from a sender that is ahead: no deadlock.

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> barrierDissemination(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  Schedule s = meshSchedule(req, "dissemination");
  s.dtype = DataType::kUint8;  // one-byte elements
  exec::ChannelPlan& plan = s.channels[0];
  if (n == 1) return s;
  s.scratchBytes = 2;
  const Region token{Buf::kScratch, 0, 1}, heard{Buf::kScratch, 1, 1};
  for (int d = 1; d < n; d *= 2) {
    plan.steps.push_back(Step{Prim::kSend, -1, (r + d) % n, token, {}});
    plan.steps.push_back(Step{Prim::kRecv, (r - d + n) % n, -1, {}, heard});
  }
  return s;
}

}  // namespace braid::algorithms

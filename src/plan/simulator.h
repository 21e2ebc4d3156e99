#pragma once
// The cost simulator: runs real Schedules, one per rank, through a model of the machine
// and reports when the last rank finishes. It follows the executor's semantics exactly
// (phases, rounds, steps in order, each part cut into slices, a FIFO of slots per
// connection, one thread per channel) but moves time stamps instead of bytes, so a
// 512-rank job simulates in well under a second.
//
// Timing model, per slice of `b` bytes:
//   - a rank-channel (one executor thread) runs its slices one after the other; a slice
//     starts when its incoming slice has arrived and the outgoing FIFO has a free slot;
//   - local work costs b / reduceBeta for the reducing primitives and b / copyBeta for
//     every copy (into an outgoing slot, out of an incoming one, local copies), plus the
//     link's per-message overhead for each connection the slice touches;
//   - a sent slice occupies its link for b / beta and arrives alpha later. Links inside a
//     host are per connection (shared memory: every pair has its own memory path); links
//     between hosts share the sending host's egress and the receiving host's ingress NIC,
//     so ranks of one host sending off-host at once divide its bandwidth;
//   - the receiver frees the slot when it has consumed the slice.
// Agents are processed in time order, so NIC reservations happen in the order they would
// on the machine.

#include <cstddef>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/status.h"
#include "exec/schedule.h"
#include "plan/cost_model.h"

namespace braid::plan {

// Statistics of one simulation.
struct SimResult {
  double seconds = 0;       // when the last rank-channel finished
  size_t slices = 0;        // slice events simulated
  size_t simSliceBytes = 0; // the slice size used on the ring connection set (resolution)
};

// Simulation knobs beyond the machine.
struct SimOptions {
  // Upper bound on simulated slices: when a run would need more, it is simulated at a
  // coarser grain (f real slots per simulated slice, f rounds merged into one, the same
  // number of slots per FIFO), which keeps huge messages fast at the cost of some
  // pipeline-fill accuracy. 0 = exact.
  size_t maxSlices = 2u << 20;
};

// Simulates `schedules` (index = rank) on `machine`. Fails on a schedule that would
// deadlock or whose ends disagree on slice sizes.
StatusOr<SimResult> simulate(const std::vector<exec::Schedule>& schedules, const Machine& machine,
                             const SimOptions& opts = {});

// Builds `algo`'s schedule for every rank of `machine` (layouts as the communicator builds
// them) and simulates it. A builder error comes back as that error.
StatusOr<SimResult> simulateAlgorithm(const algorithms::AlgorithmInfo& algo, const algorithms::Request& req,
                                      const Machine& machine, const SimOptions& opts = {});

// The layout rank `rank` of `machine` plans with (host-contiguous rings, one per channel).
algorithms::Layout simLayout(const Machine& machine, int rank);

}  // namespace braid::plan

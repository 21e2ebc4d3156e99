#pragma once
// The planner picks, per call, the algorithm, the channel count and the slice a Schedule
// is built and run with: a BRAID_ALGO rule that matches wins; otherwise the alpha-beta cost
// model (cost_model.h) ranks every algorithm of the collective and the cheapest that
// builds is taken. Every input is global (the layout, the request, the static link tables),
// so every rank makes the same choice.

#include <array>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "plan/algo_override.h"
#include "plan/cost_model.h"
#include "common/status.h"
#include "exec/schedule.h"

namespace braid::plan {

struct World {
  int rank = 0;
  int nranks = 1;
  std::vector<std::string> hostIds;  // per rank
  int nchannels = 1;
  size_t roundBytes = 2 * 1024 * 1024;
  size_t smallRoundBytes = 64 * 1024;
  size_t smallMaxBytes = 0;  // 0: no small-message connection set
  // Per-channel rings computed from the topology (every rank the same); empty: the
  // host-contiguous ring on every channel. A list shorter than nchannels repeats.
  std::vector<std::vector<int>> rings;
  // The topology's double binary tree (parents by rank, -1 at the root; every rank the
  // same) for the tree allreduce; empty: binaryTree(). Copied to Layout::treeParent.
  std::array<std::vector<int>, 2> treeParent;
  // Link bandwidths from the topology, GB/s (0 = unknown); see Layout.
  double netGBps = 0;
  double intraGBps = 0;
};

// A ring visiting all ranks with the ranks of each host contiguous (hosts in order of their
// lowest rank, ranks ascending inside a host), so that at most one hop per host crosses the
// network.
std::vector<int> hostContiguousRing(const std::vector<std::string>& hostIds);

// The per-channel rings for `world`: world.rings when given, else hostContiguousRing();
// the topology's trees and bandwidths as given.
algorithms::Layout layoutFor(const World& world);

// What the planner chose for one call.
struct Plan {
  const algorithms::AlgorithmInfo* algo = nullptr;
  int channels = 1;          // ring channels the schedule uses
  size_t sliceBytes = 0;     // the slot the executor slices steps into
  double predicted = -1;     // seconds by the cost model (-1: not modelled)
  bool overridden = false;   // chosen by BRAID_ALGO
};

// On a single host the long-tuned defaults (recursive doubling up to smallMaxBytes, then
// ring, for allreduce; the table's first entry elsewhere) stay unless another algorithm is
// predicted to take at most this fraction of its time: the model is coarse, the defaults
// are measured.
constexpr double kSwitchFactor = 0.5;

// Chooses for `req` on `machine` and builds this rank's schedule into `*schedule` (when
// not null). An algorithm whose builder fails counts as unavailable and the next cheapest
// is tried; a BRAID_ALGO choice is built as is and its error returned.
StatusOr<Plan> choosePlan(const algorithms::Request& req, const algorithms::Layout& layout, const Machine& machine,
                          const std::vector<AlgoRule>* rules, exec::Schedule* schedule);

// Builds this rank's Schedule for `req`; a BRAID_ALGO rule in `rules` that matches wins.
// The machine is machineForLayout(layout) unless given.
StatusOr<exec::Schedule> planCollective(const algorithms::Request& req, const algorithms::Layout& layout,
                                        const std::vector<AlgoRule>* rules = nullptr);
StatusOr<exec::Schedule> planCollective(const algorithms::Request& req, const algorithms::Layout& layout,
                                        const std::vector<AlgoRule>* rules, const Machine& machine);

}  // namespace braid::plan

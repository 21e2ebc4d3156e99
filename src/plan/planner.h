#pragma once
// The planner picks, per call, the algorithm and the ring layout a Schedule is built from.
// So far braid has one algorithm per collective (ring allreduce, chain broadcast); the cost
// model and BRAID_ALGO overrides plug in here.

#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "plan/algo_override.h"
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
};

// A ring visiting all ranks with the ranks of each host contiguous (hosts in order of their
// lowest rank, ranks ascending inside a host), so that at most one hop per host crosses the
// network.
std::vector<int> hostContiguousRing(const std::vector<std::string>& hostIds);

// The per-channel rings for `world`.
algorithms::Layout layoutFor(const World& world);

// Builds this rank's Schedule for `req`; a BRAID_ALGO rule in `rules` that matches wins.
StatusOr<exec::Schedule> planCollective(const algorithms::Request& req, const algorithms::Layout& layout,
                                        const std::vector<AlgoRule>* rules = nullptr);

}  // namespace braid::plan

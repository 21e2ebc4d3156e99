#pragma once
// BRAID_ALGO: the user's word on which algorithm runs, by collective and message size.
//
//   BRAID_ALGO="allreduce:0-64K:tree,64K-inf:ring;broadcast:chain"
//
// Collectives are separated by ';', a collective's rules by ','. A rule is `lo-hi:algo`
// (bytes, as the perf tools' size column counts them: the whole message, [lo, hi), K/M/G
// suffixes, `inf` for no upper bound) or just `algo` for every size. The first rule that
// matches wins; sizes no rule covers are left to the planner.

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/status.h"

namespace braid::plan {

struct AlgoRule {
  algorithms::Collective coll;
  size_t lo = 0;
  size_t hi = static_cast<size_t>(-1);  // exclusive; SIZE_MAX = inf
  const algorithms::AlgorithmInfo* algo = nullptr;
};

// Parses `spec`; a malformed string is kInvalidArgument quoting the part that is wrong and
// listing what would be accepted there.
StatusOr<std::vector<AlgoRule>> parseAlgoOverride(const std::string& spec);

// The rule for (`coll`, `bytes`), or nullptr.
const AlgoRule* findRule(const std::vector<AlgoRule>& rules, algorithms::Collective coll, size_t bytes);

}  // namespace braid::plan

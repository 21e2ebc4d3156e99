// BRAID_ALGO, the algorithm override grammar (src/plan/algo_override.h), e.g.
// "allreduce:0-64K:tree,64K-inf:ring;broadcast:chain". Property: no crash, and every rule
// of a spec that parses has an ordered size range.

#include <string>

#include "fuzz_check.h"
#include "plan/algo_override.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  auto rules = braid::plan::parseAlgoOverride(spec);
  if (rules.isOk())
    for (const auto& r : rules.value()) FUZZ_CHECK(r.lo < r.hi && r.algo != nullptr);
  return 0;
}

// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> alltoallPairwise(const Request&, const Layout&) { return Status(Code::kInternal, "alltoallPairwise: not built yet"); }
StatusOr<exec::Schedule> alltoallVPairwise(const Request&, const Layout&) { return Status(Code::kInternal, "alltoallVPairwise: not built yet"); }
}  // namespace braid::algorithms

// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> gatherTree(const Request&, const Layout&) { return Status(Code::kInternal, "gatherTree: not built yet"); }
}  // namespace braid::algorithms

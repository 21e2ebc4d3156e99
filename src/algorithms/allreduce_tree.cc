// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> allreduceTree(const Request&, const Layout&) { return Status(Code::kInternal, "allreduceTree: not built yet"); }
}  // namespace braid::algorithms

// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> allreduceHierarchical(const Request&, const Layout&) { return Status(Code::kInternal, "allreduceHierarchical: not built yet"); }
}  // namespace braid::algorithms

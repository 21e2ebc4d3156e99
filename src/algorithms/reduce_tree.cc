// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> reduceTree(const Request&, const Layout&) { return Status(Code::kInternal, "reduceTree: not built yet"); }
}  // namespace braid::algorithms

// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> scatterTree(const Request&, const Layout&) { return Status(Code::kInternal, "scatterTree: not built yet"); }
}  // namespace braid::algorithms

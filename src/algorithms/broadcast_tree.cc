// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> broadcastTree(const Request&, const Layout&) { return Status(Code::kInternal, "broadcastTree: not built yet"); }
}  // namespace braid::algorithms

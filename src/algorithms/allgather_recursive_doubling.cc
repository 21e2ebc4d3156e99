// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> allgatherRecursiveDoubling(const Request&, const Layout&) { return Status(Code::kInternal, "allgatherRecursiveDoubling: not built yet"); }
}  // namespace braid::algorithms

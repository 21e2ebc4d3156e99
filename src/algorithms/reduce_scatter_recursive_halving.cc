// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> reduceScatterRecursiveHalving(const Request&, const Layout&) { return Status(Code::kInternal, "reduceScatterRecursiveHalving: not built yet"); }
}  // namespace braid::algorithms

// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> reduceChain(const Request&, const Layout&) { return Status(Code::kInternal, "reduceChain: not built yet"); }
}  // namespace braid::algorithms

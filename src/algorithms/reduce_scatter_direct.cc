// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> reduceScatterDirect(const Request&, const Layout&) { return Status(Code::kInternal, "reduceScatterDirect: not built yet"); }
}  // namespace braid::algorithms

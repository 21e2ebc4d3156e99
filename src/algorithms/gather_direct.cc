// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> gatherDirect(const Request&, const Layout&) { return Status(Code::kInternal, "gatherDirect: not built yet"); }
}  // namespace braid::algorithms

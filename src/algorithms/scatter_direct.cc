// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> scatterDirect(const Request&, const Layout&) { return Status(Code::kInternal, "scatterDirect: not built yet"); }
}  // namespace braid::algorithms

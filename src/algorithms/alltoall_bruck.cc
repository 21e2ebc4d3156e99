// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> alltoallBruck(const Request&, const Layout&) { return Status(Code::kInternal, "alltoallBruck: not built yet"); }
}  // namespace braid::algorithms

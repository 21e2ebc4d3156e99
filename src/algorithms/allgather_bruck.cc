// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> allgatherBruck(const Request&, const Layout&) { return Status(Code::kInternal, "allgatherBruck: not built yet"); }
}  // namespace braid::algorithms

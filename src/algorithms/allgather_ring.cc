// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> allgatherRing(const Request&, const Layout&) { return Status(Code::kInternal, "allgatherRing: not built yet"); }
StatusOr<exec::Schedule> allgatherVRing(const Request&, const Layout&) { return Status(Code::kInternal, "allgatherVRing: not built yet"); }
}  // namespace braid::algorithms

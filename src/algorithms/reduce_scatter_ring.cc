// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> reduceScatterRing(const Request&, const Layout&) { return Status(Code::kInternal, "reduceScatterRing: not built yet"); }
StatusOr<exec::Schedule> reduceScatterVRing(const Request&, const Layout&) { return Status(Code::kInternal, "reduceScatterVRing: not built yet"); }
}  // namespace braid::algorithms

// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> allreduceDirect(const Request&, const Layout&) { return Status(Code::kInternal, "allreduceDirect: not built yet"); }
StatusOr<exec::Schedule> allreduceTwoShot(const Request&, const Layout&) { return Status(Code::kInternal, "allreduceTwoShot: not built yet"); }
}  // namespace braid::algorithms

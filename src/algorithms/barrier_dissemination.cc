// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> barrierDissemination(const Request&, const Layout&) { return Status(Code::kInternal, "barrierDissemination: not built yet"); }
}  // namespace braid::algorithms

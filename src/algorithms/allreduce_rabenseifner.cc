// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
StatusOr<exec::Schedule> allreduceRabenseifner(const Request&, const Layout&) { return Status(Code::kInternal, "allreduceRabenseifner: not built yet"); }
}  // namespace braid::algorithms

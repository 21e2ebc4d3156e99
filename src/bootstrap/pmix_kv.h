#pragma once
// The rendezvous store's address through the launcher's PMIx server, for mpirun across hosts
// (OpenMPI's variables do not say where rank 0 runs, but every rank is a PMIx client of its
// host's daemon). libpmix is opened at run time, so libbraid does not depend on it.

#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace braid::bootstrap {

// Every rank of the PMIx namespace calls this together (it fences): the rank passing
// `value` (the store's owner) publishes it under `key`, the others get it back from PMIx
// rank `ownerRank` of the namespace into `*out`. Returns kSystemError when libpmix cannot be
// opened or the process is not a PMIx client, kTimeout past `deadline`. Blocking.
Status pmixExchange(const std::string& key, const std::string* value, int ownerRank, std::string* out,
                    Deadline deadline);

// Whether this build can talk PMIx at all (its headers were found at configure time).
bool pmixBuiltIn();

}  // namespace braid::bootstrap

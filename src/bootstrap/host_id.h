#pragma once
// The identity of the machine a rank runs on, used to group ranks by host (shared memory,
// host-contiguous rings). Two ranks share a host iff their ids are equal.

#include <functional>
#include <string>

namespace braid::bootstrap {

// BRAID_HOST_ID if set (containers that share memory but not a hostname, or tests that
// fake a multi-host job on one machine); else hostname + ":" + the kernel's boot id, so
// that two machines cloned with the same hostname still differ. Thread-safe; reads the
// environment and /proc on every call.
std::string hostId();

// As above, with the environment read through `getenv` (for tests).
std::string hostId(const std::function<const char*(const char*)>& getenv);

// The running kernel's boot id (/proc/sys/kernel/random/boot_id), the same for every
// process under one kernel whatever its hostname or namespaces; "" when unreadable.
std::string bootId();

}  // namespace braid::bootstrap

#pragma once
// `shm`: connections between processes of one host. Each receive FIFO lives in a POSIX
// shared-memory segment that the receiver creates private (mode 0600, random per-job name)
// and bound to its NUMA node; the sender maps it and writes slots straight into it. The
// segment is unlinked as soon as both ends have mapped it, so nothing outlives the job.

#include <memory>

#include "transports/transport.h"

namespace braid::transport {

std::unique_ptr<Transport> createShmTransport(const TransportConfig& cfg);

}  // namespace braid::transport

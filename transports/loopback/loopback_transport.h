#pragma once
// `loopback`: connections between communicators of one process (the in-process world,
// where every rank is a thread). FIFOs live on the heap; blobs carry a handle that only
// this process can resolve.

#include <memory>

#include "transports/transport.h"

namespace braid::transport {

std::unique_ptr<Transport> createLoopbackTransport(const TransportConfig& cfg);

}  // namespace braid::transport

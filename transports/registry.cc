// The one list of transports. Selection per peer pair takes the highest canConnect score
// (loopback inside a process, shm inside a host, tcp anywhere); BRAID_TRANSPORT overrides.

#include "transports/loopback/loopback_transport.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace braid::transport {

const std::vector<TransportFactory>& registry() {
  static const std::vector<TransportFactory> kRegistry = {
      {"loopback", &createLoopbackTransport},
      {"shm", &createShmTransport},
      {"tcp", &createTcpTransport},
  };
  return kRegistry;
}

}  // namespace braid::transport

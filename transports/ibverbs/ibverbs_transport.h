#pragma once
// The RDMA verbs transport, shipped as the plugin libbraid-net-ibverbs.so. It speaks
// libibverbs directly (InfiniBand, RoCE v1/v2, and Soft-RoCE), without UCX in between.
//
// Shape:
//   - one device context, protection domain and port per transport instance, chosen by
//     BRAID_IB_HCA (NCCL_IB_HCA syntax); on RoCE the GID by BRAID_IB_GID_INDEX or, by
//     default, the first RoCE v2 GID with an IPv4-mapped address (device_select.h);
//   - one RC queue pair per connection. The receiver's slot FIFO lives in its registered
//     memory; the sender writes each slot with RDMA WRITE WITH IMM and the receiver hands
//     credits back with writes into the sender's credit word (rdma_protocol.h has the
//     wire protocol and why);
//   - setup: the receiver's blob carries its queue pair, slot memory and the address of
//     its transport's UD "hello" queue pair. The sender connects its own queue pair
//     straight away and sends a hello datagram with its queue pair and credit word;
//     establish() on the receiver matches hellos to receive connections, connects them
//     and sends each sender the first credit message, which tells it the receiver is
//     ready. Hellos are resent until then (datagrams may be lost);
//   - progress: ibv_poll_cq on the connection's own completion queue; waiting: its
//     completion channel's fd, armed with ibv_req_notify_cq;
//   - failures: a completion with an error status, and the device's async events (port
//     down, queue pair in error, device fatal), become kRemoteError naming the peer.
//
// A dead peer is seen only when this side next writes to it (the RC retry limit), so,
// like the other memory transports, the connection does not claim to see peer failure;
// the communicator's liveness checks cover an idle connection.

#include <memory>

#include "common/status.h"
#include "transports/transport.h"

namespace braid::transport::ibverbs {

// Fails (never crashes) when there is no usable RDMA device, with a message that starts
// with "ibverbs:".
StatusOr<std::unique_ptr<Transport>> createIbverbsTransport(const TransportConfig& cfg);

// Scores, exposed so that tests can check the ordering against the other transports.
constexpr int kScoreAcrossHosts = 80;  // above UCX over RDMA (50) and tcp (10)
constexpr int kScoreSameHost = 3;      // below shm (100), tcp (10) and UCX (5)
// canConnect: another job's peer (another nonce) never; RDMA across hosts; on one host
// only as a last resort, since shared memory (and tcp's loopback) do better than a trip
// through the NIC.
inline int score(const PeerInfo& local, const PeerInfo& remote) {
  if (local.nonce != remote.nonce) return 0;
  return local.hostId != remote.hostId ? kScoreAcrossHosts : kScoreSameHost;
}

}  // namespace braid::transport::ibverbs

#pragma once
// The UCX transport, shipped as the plugin libbraid-net-ucx.so. UCX drives whatever the
// machine has under one API (InfiniBand and RoCE verbs, shared memory, tcp), chosen by its
// own UCX_TLS and UCX_NET_DEVICES.
//
// Shape:
//   - one UCP context per transport instance (so per communicator and link set), and one
//     worker per channel, so each channel's progress thread drives its own worker without
//     locks (UCS_THREAD_MODE_SERIALIZED: one thread at a time, never two at once);
//   - a send connection owns nslots staging slots moved with tagged sends, and sends only
//     while the receiver has a free slot: the receiver returns credits (its cumulative
//     release count, every nslots/4 releases) over its endpoint back to the sender, so at
//     most nslots messages wait for the receiver. (Synchronous sends bound the FIFO without
//     credits, but their acknowledgements cost a third of the bandwidth over tcp:
//     docs/performance.md);
//   - zero copy: a message is its payload alone, its UCX tag the message kind, the sender's
//     rank and the executor's tag (ucx_connection.h), so the sender may hand UCX the caller's
//     memory instead of a staging slot (postSendFrom) and the receiver may receive into the
//     caller's memory (peekRecvInto). Connections with large slots (the rings') post each
//     receive when the executor asks for that message, into the step's destination when it
//     only stores or forwards the data; UCX's rendezvous holds a large message until then,
//     so it moves once, buffer to buffer. Small-slot connections (the latency set) post
//     their slots' receives ahead, as a FIFO;
//   - setup: the receiver's blob is its channel worker's address; the sender creates an
//     endpoint with peer error handling and sends a hello carrying its own worker address;
//     establish() collects the hellos and opens the reverse endpoints, so a receiver learns
//     of a dead sender from UCX too (not only from braid's deadlines);
//   - waiting: the worker's event fd, armed with ucp_worker_arm, so a sleeping rank is
//     woken by UCX rather than spinning.
// Errors from UCX become kRemoteError naming the peer, with UCX's own reason.

#include <memory>

#include "common/status.h"
#include "transports/transport.h"

namespace braid::transport::ucx {

StatusOr<std::unique_ptr<Transport>> createUcxTransport(const TransportConfig& cfg);

// The UCX library's version, e.g. "1.13.1".
const char* ucxVersion();

}  // namespace braid::transport::ucx

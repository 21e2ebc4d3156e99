#pragma once
// The tcp transport: works between any two ranks of a job (same nonce), at the lowest
// priority, so it carries traffic only where nothing faster can.
//
// Setup, in the three phases of transport.h:
//   createRecv   opens (once per transport) a listening socket and returns its address
//                blob "a.b.c.d:port/challenge" (socket_util.h), with a random challenge
//                of this connection's own; the connection waits for cfg.socketsPerPeer
//                sockets from the peer.
//   connectSend  connects cfg.socketsPerPeer sockets to the blob, retrying refused or
//                unreachable connects until cfg.connectTimeoutSec, and sends each a
//                handshake naming job nonce, ranks, channel and socket index, signed with
//                the job's key over the challenge when the job has one. It only needs
//                the receiver's listening socket, not its attention: the kernel completes
//                the connection, and the receiver reads the handshake in establish().
//                Blocks until then (connectTimeoutSec <= 0: no limit); while it waits it
//                also accepts this rank's own incoming sockets, so that no accept queue
//                fills up while every rank is busy connecting.
//   establish    accepts the expected sockets, checks each handshake, and binds each socket
//                to its receive connection; with a key, only a handshake whose signature
//                proves it ("authentication failed" otherwise). Anything else that
//                connects (wrong key, wrong nonce, wrong magic, an unexpected
//                rank/channel/index, silence) is closed with a warning, so a stranger can
//                neither join nor stall the job.
//
// The listening address: cfg.channelNetIfs[channel] when the topology gave the channel a NIC
// whose interface has an IPv4 address here (one listening socket per distinct address);
// else cfg.netIf when it is an IPv4 address, names an interface or lists some
// (NCCL_SOCKET_IFNAME syntax); otherwise every address, advertised as the host's first
// non-loopback IPv4 address.
// IPv6 is not supported yet.

#include <memory>

#include "transports/transport.h"

namespace braid::transport {

std::unique_ptr<Transport> createTcpTransport(const TransportConfig& cfg);

}  // namespace braid::transport

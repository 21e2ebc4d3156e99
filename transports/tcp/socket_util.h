#pragma once
// Socket plumbing and the wire format of the tcp transport.
//
// Wire format (little-endian hosts only, which is every host braid targets):
//   address blob   ASCII "a.b.c.d:port/challenge", the IPv4 address and port a receiver
//                  listens on and 32 hex digits of a random challenge drawn for this one
//                  receive connection (it reaches the sender through the job's store).
//   handshake      kHandshakeBytes sent once by the connecting side right after connect():
//                    u32 magic, u32 version, u64 nonce, i32 srcRank, i32 dstRank,
//                    i32 channel, i32 socketIndex, i32 socketsPerPeer, u32 flags,
//                    u64 slotBytes, then a 32-byte MAC: with the job's key (flag
//                    kHandshakeKeyed), HMAC-SHA256 under it of the 48 bytes before and the
//                    challenge; zeros without one. A receiver with a key admits only a
//                    handshake whose MAC it recomputes, so nobody without the key can bind
//                    a socket as a rank, and a handshake seen once is no good for another
//                    connection (another challenge).
//   frame          kFrameHeaderBytes header {u32 bytes, u64 tag} followed by `bytes` of
//                  payload; one frame per slot. Frame i of a connection travels on socket
//                  i % socketsPerPeer, so each socket carries its share in order.

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/auth.h"
#include "common/status.h"

namespace braid::transport::tcp {

constexpr uint32_t kHandshakeMagic = 0x31435242;  // "BRC1"
constexpr uint32_t kHandshakeVersion = 2;
constexpr size_t kHandshakeSignedBytes = 48;
constexpr size_t kHandshakeBytes = kHandshakeSignedBytes + 32;
constexpr uint32_t kHandshakeKeyed = 1;  // flags: the MAC proves the job's key
constexpr size_t kChallengeBytes = 16;
constexpr size_t kFrameHeaderBytes = 12;

struct Handshake {
  uint32_t magic = kHandshakeMagic;
  uint32_t version = kHandshakeVersion;
  uint64_t nonce = 0;
  int32_t srcRank = -1;
  int32_t dstRank = -1;
  int32_t channel = -1;
  int32_t socketIndex = -1;
  int32_t socketsPerPeer = 0;
  uint32_t flags = 0;
  uint64_t slotBytes = 0;
  uint8_t mac[32] = {0};
};

void encodeHandshake(const Handshake& h, uint8_t out[kHandshakeBytes]);
// Decodes without judging the values; the receiver validates every field.
Handshake decodeHandshake(const uint8_t in[kHandshakeBytes]);
// Sets kHandshakeKeyed and the MAC of `h` for `challenge` under `key`. Pure.
void signHandshake(const AuthKey& key, const std::string& challenge, Handshake* h);
// Whether `h` carries kHandshakeKeyed and a MAC that proves `key` for `challenge`, compared
// in constant time. Pure.
bool verifyHandshake(const AuthKey& key, const std::string& challenge, const Handshake& h);

inline void encodeFrameHeader(uint32_t bytes, uint64_t tag, uint8_t out[kFrameHeaderBytes]) {
  __builtin_memcpy(out, &bytes, 4);
  __builtin_memcpy(out + 4, &tag, 8);
}
inline void decodeFrameHeader(const uint8_t in[kFrameHeaderBytes], uint32_t* bytes, uint64_t* tag) {
  __builtin_memcpy(bytes, in, 4);
  __builtin_memcpy(tag, in + 4, 8);
}

// Parses an address "a.b.c.d:port". Returns false for anything else.
bool parseAddress(const std::string& blob, sockaddr_in* out);
std::string formatAddress(const sockaddr_in& addr);
// An address blob: the address, "/", and the challenge (kChallengeBytes) in hex; the bare
// address when `challenge` is empty.
std::string formatBlob(const sockaddr_in& addr, const std::string& challenge);
// Parses "a.b.c.d:port/hex" (or a bare address, whose challenge is then empty). Returns
// false for anything else.
bool parseBlob(const std::string& blob, sockaddr_in* addr, std::string* challenge);

// The IPv4 address to bind for `netIf`: an IPv4 literal, an interface name (resolved with
// getifaddrs), an NCCL_SOCKET_IFNAME-style list ("eth,ib" prefixes, "=eth0" exact, "^docker"
// excluded; the first allowed interface, loopback last), or INADDR_ANY when empty. Fails with
// kInvalidArgument naming `netIf` when nothing matches.
[[nodiscard]] StatusOr<in_addr> resolveBindAddress(const std::string& netIf);
// An address peers can reach when bound to INADDR_ANY: the first up, non-loopback IPv4
// address of the host, or 127.0.0.1 when there is none.
in_addr defaultAdvertisedAddress();

// Socket options every data socket gets: non-blocking, TCP_NODELAY, keep-alive, and large
// kernel buffers (4 MiB where net.core.[rw]mem_max allows it; autotuning otherwise).
// Buffer sizes must be set before connect()/listen() for the window scale to be
// negotiated, so the listening socket gets them too (accepted sockets inherit them).
[[nodiscard]] Status setNonBlocking(int fd);
[[nodiscard]] Status setBufferSizes(int fd);
[[nodiscard]] Status configureDataSocket(int fd);

// A data socket whose peer is at a local address (common/local_address.h) has no link to pace for, and a pacing
// congestion control (BBR) holds its stream below what the kernel could copy (measured on
// loopback, docs/performance.md). Such a socket is switched to cubic (reno where cubic is not
// allowed); sockets to other hosts, and any that do not pace, keep the kernel's choice.
// Returns the congestion control the socket had when it was switched, and sets *now to the
// one it has now; returns "" when it was not switched.
std::string unpaceLocalSocket(int fd, in_addr peer, std::string* now = nullptr);

// Whether `err` (from send/recv/connect) means the peer or the path to it is gone, as
// opposed to a local failure.
bool isConnectionLoss(int err);

// close() that keeps errno and ignores -1.
void closeFd(int fd);

}  // namespace braid::transport::tcp

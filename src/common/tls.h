#pragma once
// TLS 1.3 over a connected non-blocking socket, keyed by the job key (BRAID_TLS=1): no
// certificates. Both ends derive a pre-shared key from the job key and a binding string
// that names the connection (HMAC-SHA256 under the key), and OpenSSL runs TLS 1.3 with that
// external PSK and an ECDHE exchange (psk_dhe_ke), so the session keys are fresh per
// connection and forward secret, and only holders of the job key complete the handshake.
// AES-128-GCM (or ChaCha20-Poly1305) protects every byte after it.
//
// Built when CMake finds OpenSSL; tlsAvailable() says whether it was.

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/auth.h"
#include "common/status.h"

namespace braid {

// Whether this build has TLS (OpenSSL was found).
bool tlsAvailable();

// Makes OpenSSL's per-process state now, on the calling thread. A server that will start
// sessions on a thread of its own calls it first, so that a fork() meanwhile (a launcher
// forking ranks after braidGetUniqueId) never copies that state half made.
void tlsWarmUp();

// Certificates for a client of a service that speaks ordinary TLS (etcd's https endpoints):
// the server's chain is checked against caFile (the system's trust store when empty), and
// with certFile and keyFile the client shows a certificate of its own (mutual TLS). PEM files.
struct CertTlsOptions {
  std::string caFile;
  std::string certFile;
  std::string keyFile;
};

// One TLS session on one socket. Not thread-safe: one owner drives it, like the socket.
// The socket stays owned by the caller.
class TlsStream {
 public:
  enum class Role { kClient, kServer };

  // Starts a session on `fd` (connected, non-blocking). `binding` names the connection the
  // same way on both ends (the job's nonce, both ranks, channel, socket index); the PSK is
  // derived from `key` and it. kInvalidArgument without a key or without TLS in the build.
  static StatusOr<std::unique_ptr<TlsStream>> create(int fd, Role role, const AuthKey& key, std::string_view binding);
  // A client session (TLS 1.2 or 1.3, ALPN http/1.1) to a server whose certificate must
  // chain to opts.caFile and name `host` (a DNS name, or an IP address in its
  // subjectAltName). kInvalidArgument naming the file when a file cannot be loaded, or
  // without TLS in the build; a certificate that does not verify fails the handshake, and
  // error() then says why.
  static StatusOr<std::unique_ptr<TlsStream>> createVerifiedClient(int fd, const CertTlsOptions& opts,
                                                                   const std::string& host);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Advances the handshake without blocking: 1 when complete, 0 when it waits for the
  // socket (wantEvents() says for what), -1 when it failed (error() says why: another key,
  // not TLS, the peer gone).
  int handshake();
  bool handshakeDone() const { return done_; }

  // As sendmsg: takes up to all of `iov`, returns the bytes taken, or -1 with errno set
  // (EAGAIN when nothing could be taken now; EPIPE/ECONNRESET when the peer is gone; EPROTO
  // for a TLS failure, see error()). Bytes taken are the stream's: it encrypts and sends
  // them, from a copy, as the socket allows (flush()).
  ssize_t writev(const iovec* iov, int iovcnt);
  // Sends what writev took and the socket did not accept yet. 0 when all is sent, -1 with
  // errno EAGAIN while some is left, -1 with another errno on failure.
  int flush();
  // Bytes taken and not sent yet.
  size_t pending() const { return pending_.size() - pendingOff_; }

  // As readv: returns the bytes read (> 0), 0 at the end of the stream (the peer closed),
  // or -1 with errno (EAGAIN when nothing is there now; EPROTO for a TLS failure such as a
  // record that does not authenticate, see error()).
  ssize_t readv(const iovec* iov, int iovcnt);

  // poll() events the session waits for now (POLLIN or POLLOUT).
  short wantEvents() const { return want_; }
  const std::string& error() const { return error_; }

  // Kernel TLS: after a PSK session's handshake, each direction's record layer goes to the
  // kernel where it has one (Linux's "tls" TCP ULP; BRAID_TLS_KERNEL=0 keeps it in OpenSSL),
  // which then encrypts from the caller's buffers with no copy and decrypts on receipt.
  // Where the records are protected, for logs and tests: "in the kernel", or "in OpenSSL
  // (why)", or one direction each; empty before the handshake.
  const std::string& offload() const { return offload_; }
  // The AEAD key and IV of the records this end sends (send) or receives, derived from the
  // handshake's application traffic secret as RFC 8446 7.3 says: what the kernel is keyed
  // with (a TLS 1.3 suite, 0x1301 AES-128-GCM or 0x1303 ChaCha20-Poly1305). For tests.
  struct TrafficKeys {
    uint16_t suite = 0;
    std::string key, iv;
  };
  StatusOr<TrafficKeys> trafficKeys(bool send) const;

 private:
  TlsStream() = default;
  // Maps an OpenSSL failure of `ret` to errno (and error_); returns -1.
  int fail(int ret, const char* what);
  void startKernel();  // at the end of the handshake
  ssize_t readKernel(const iovec* iov, int iovcnt);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool done_ = false;
  short want_ = 0;
  std::string error_;
  std::string offload_;
  std::string pending_;    // taken by writev, not yet accepted by SSL_write
  size_t pendingOff_ = 0;
};

}  // namespace braid

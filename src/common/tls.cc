#include "common/tls.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <sys/socket.h>

#ifdef BRAID_HAVE_OPENSSL
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

namespace braid {

#ifdef BRAID_HAVE_OPENSSL

namespace {

// The identity both ends name the PSK by; the key itself is per connection (the binding).
constexpr char kIdentity[] = "braid-job-key";
// TLS_AES_128_GCM_SHA256, the suite the PSK session is made for (RFC 8446 B.4).
constexpr unsigned char kAes128GcmSha256[] = {0x13, 0x01};
// What writev copies per call at most: several slots, so a stream of small frames becomes
// few records, without an unbounded copy.
constexpr size_t kStageBytes = 1 << 20;

}  // namespace

struct TlsStream::Impl {
  SSL* ssl = nullptr;
  Digest psk{};
  SSL_CTX* ownContext = nullptr;  // a verified client's, made for its options
  ~Impl() {
    if (ssl) SSL_free(ssl);
    if (ownContext) SSL_CTX_free(ownContext);
  }
};

namespace {

SSL_SESSION* pskSession(SSL* ssl, const Digest& psk) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kAes128GcmSha256);
  SSL_SESSION* s = cipher ? SSL_SESSION_new() : nullptr;
  if (!s || !SSL_SESSION_set1_master_key(s, psk.data(), psk.size()) || !SSL_SESSION_set_cipher(s, cipher) ||
      !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    if (s) SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

// Client: offers the connection's PSK (OpenSSL owns and frees the session it is handed).
int useSession(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* idlen, SSL_SESSION** sess) {
  const auto* psk = static_cast<const Digest*>(SSL_get_app_data(ssl));
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kAes128GcmSha256);
  if (!psk || !cipher || (md != nullptr && md != SSL_CIPHER_get_handshake_digest(cipher))) {
    *sess = nullptr;
    *id = nullptr;
    *idlen = 0;
    return 1;  // no PSK for another hash (after a HelloRetryRequest): the handshake fails
  }
  *sess = pskSession(ssl, *psk);
  *id = reinterpret_cast<const unsigned char*>(kIdentity);
  *idlen = sizeof(kIdentity) - 1;
  return *sess ? 1 : 0;
}

// Server: the connection's PSK for braid's identity, none for anything else (and with no
// certificate there is then no way to complete the handshake).
int findSession(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
  const auto* psk = static_cast<const Digest*>(SSL_get_app_data(ssl));
  *sess = nullptr;
  if (!psk || idlen != sizeof(kIdentity) - 1 || std::memcmp(id, kIdentity, idlen) != 0) return 1;
  *sess = pskSession(ssl, *psk);
  return *sess ? 1 : 0;
}

// The session's socket I/O. OpenSSL's own socket BIO writes with write(), which raises
// SIGPIPE when the peer is gone, and the process (a rank, whose signals are the
// application's) would die of it instead of reporting the peer; this one sends with
// MSG_NOSIGNAL.
int bioWrite(BIO* b, const char* data, int len) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
  BIO_clear_retry_flags(b);
  const ssize_t n = ::send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return static_cast<int>(n);
}

int bioRead(BIO* b, char* out, int len) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
  BIO_clear_retry_flags(b);
  const ssize_t n = ::recv(fd, out, static_cast<size_t>(len), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  // The peer closed: with SSL_OP_IGNORE_UNEXPECTED_EOF OpenSSL then ends the session as a
  // clean close (a peer that finished and exited), which it learns through BIO_CTRL_EOF.
  if (n == 0) BIO_set_flags(b, BIO_FLAGS_IN_EOF);
  return static_cast<int>(n);
}

long bioCtrl(BIO* b, int cmd, long, void*) {
  switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_EOF: return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    default: return 0;
  }
}

int bioCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

int bioDestroy(BIO*) { return 1; }

BIO_METHOD* socketMethod() {
  static BIO_METHOD* m = [] {
    BIO_METHOD* meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "braid socket");
    if (meth) {
      BIO_meth_set_write(meth, bioWrite);
      BIO_meth_set_read(meth, bioRead);
      BIO_meth_set_ctrl(meth, bioCtrl);
      BIO_meth_set_create(meth, bioCreate);
      BIO_meth_set_destroy(meth, bioDestroy);
    }
    return meth;
  }();
  return m;
}

SSL_CTX* makeContext(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256");
  // No tickets: after the handshake nothing flows from receiver to sender, so a socket
  // that turns readable on the sending side still means only that the peer went away.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (server) SSL_CTX_set_psk_find_session_callback(ctx, findSession);
  else SSL_CTX_set_psk_use_session_callback(ctx, useSession);
  return ctx;
}

// One context per role, each made once. Separate, so that a client never waits on the
// server's being made (a process that forks while its store thread makes one must not leave
// a child stuck on that initialization; tlsWarmUp() makes both before such threads start).
SSL_CTX* clientContext() {
  static SSL_CTX* ctx = makeContext(false);
  return ctx;
}

SSL_CTX* serverContext() {
  static SSL_CTX* ctx = makeContext(true);
  return ctx;
}

SSL_CTX* context(bool server) { return server ? serverContext() : clientContext(); }

std::string opensslError() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

}  // namespace

bool tlsAvailable() { return true; }

void tlsWarmUp() {
  (void)clientContext();
  (void)serverContext();
  (void)socketMethod();
}

StatusOr<std::unique_ptr<TlsStream>> TlsStream::create(int fd, Role role, const AuthKey& key,
                                                       std::string_view binding) {
  if (!key.present) return invalidArgument("TLS needs the job's key (BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE)");
  SSL_CTX* ctx = context(role == Role::kServer);
  if (!ctx) return Status(Code::kSystemError, "TLS: cannot make an OpenSSL context: " + opensslError());
  std::unique_ptr<TlsStream> t(new TlsStream());
  t->impl_ = std::make_unique<Impl>();
  t->impl_->psk = authProof(key, "braid tls psk v1", {binding});
  t->impl_->ssl = SSL_new(ctx);
  BIO* bio = t->impl_->ssl && socketMethod() ? BIO_new(socketMethod()) : nullptr;
  if (!bio) return Status(Code::kSystemError, "TLS: cannot start a session: " + opensslError());
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(t->impl_->ssl, bio, bio);  // the session owns it
  SSL_set_app_data(t->impl_->ssl, &t->impl_->psk);  // what the PSK callbacks read
  if (role == Role::kServer) SSL_set_accept_state(t->impl_->ssl);
  else SSL_set_connect_state(t->impl_->ssl);
  t->want_ = role == Role::kServer ? POLLIN : POLLOUT;
  return t;
}

StatusOr<std::unique_ptr<TlsStream>> TlsStream::createVerifiedClient(int fd, const CertTlsOptions& opts,
                                                                     const std::string& host) {
  if (opts.certFile.empty() != opts.keyFile.empty())
    return invalidArgument("TLS: a client certificate needs both its certificate and its key file (got " +
                           (opts.certFile.empty() ? "only the key '" + opts.keyFile : "only the certificate '" + opts.certFile) +
                           "')");
  std::unique_ptr<TlsStream> t(new TlsStream());
  t->impl_ = std::make_unique<Impl>();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return Status(Code::kSystemError, "TLS: cannot make an OpenSSL context: " + opensslError());
  t->impl_->ownContext = ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (opts.caFile.empty() ? SSL_CTX_set_default_verify_paths(ctx) != 1
                          : SSL_CTX_load_verify_locations(ctx, opts.caFile.c_str(), nullptr) != 1)
    return invalidArgument("TLS: cannot load the CA certificates " +
                           (opts.caFile.empty() ? std::string("of the system") : "'" + opts.caFile + "'") + ": " +
                           opensslError());
  if (!opts.certFile.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, opts.certFile.c_str()) != 1)
      return invalidArgument("TLS: cannot load the client certificate '" + opts.certFile + "': " + opensslError());
    if (SSL_CTX_use_PrivateKey_file(ctx, opts.keyFile.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1)
      return invalidArgument("TLS: cannot load the client key '" + opts.keyFile + "' (or it does not match '" +
                             opts.certFile + "'): " + opensslError());
  }
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof(kAlpn));
  t->impl_->ssl = SSL_new(ctx);
  BIO* bio = t->impl_->ssl && socketMethod() ? BIO_new(socketMethod()) : nullptr;
  if (!bio) return Status(Code::kSystemError, "TLS: cannot start a session: " + opensslError());
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(t->impl_->ssl, bio, bio);
  // The name the certificate must carry: an IP address is matched against its IP
  // subjectAltNames, anything else as a DNS name (and sent as SNI).
  X509_VERIFY_PARAM* param = SSL_get0_param(t->impl_->ssl);
  if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
    ERR_clear_error();
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) != 1)
      return invalidArgument("TLS: '" + host + "' is not a host name a certificate can be checked against");
    SSL_set_tlsext_host_name(t->impl_->ssl, host.c_str());
  }
  SSL_set_connect_state(t->impl_->ssl);
  t->want_ = POLLOUT;
  return t;
}

TlsStream::~TlsStream() = default;

int TlsStream::fail(int ret, const char* what) {
  const int e = SSL_get_error(impl_->ssl, ret);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      want_ = POLLIN;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_WANT_WRITE:
      want_ = POLLOUT;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      error_ = "the peer closed the TLS session";
      errno = ECONNRESET;
      return -1;
    case SSL_ERROR_SYSCALL:
      if (errno == 0) errno = ECONNRESET;
      error_ = std::string(what) + ": " + std::strerror(errno);
      ERR_clear_error();
      return -1;
    default:
      error_ = std::string(what) + ": " + opensslError();
      errno = EPROTO;
      return -1;
  }
}

int TlsStream::handshake() {
  if (done_) return 1;
  ERR_clear_error();
  const int r = SSL_do_handshake(impl_->ssl);
  if (r == 1) {
    done_ = true;
    want_ = POLLIN;
    return 1;
  }
  if (fail(r, "TLS handshake") < 0 && errno == EAGAIN) return 0;
  // A certificate that did not verify: say why, as OpenSSL's generic error does not.
  const long v = SSL_get_verify_result(impl_->ssl);
  if (impl_->ownContext && v != X509_V_OK)
    error_ = std::string("TLS handshake: the server's certificate does not verify: ") + X509_verify_cert_error_string(v);
  return -1;
}

int TlsStream::flush() {
  while (pendingOff_ < pending_.size()) {
    ERR_clear_error();
    size_t w = 0;
    const int r = SSL_write_ex(impl_->ssl, pending_.data() + pendingOff_, pending_.size() - pendingOff_, &w);
    if (r == 1) {
      pendingOff_ += w;
      continue;
    }
    return fail(r, "TLS write");
  }
  pending_.clear();
  pendingOff_ = 0;
  return 0;
}

ssize_t TlsStream::writev(const iovec* iov, int iovcnt) {
  if (pending() > 0 && flush() < 0) return -1;  // EAGAIN: the socket is still full
  pending_.clear();
  pendingOff_ = 0;
  size_t took = 0;
  for (int i = 0; i < iovcnt && took < kStageBytes; ++i) {
    const size_t n = std::min(iov[i].iov_len, kStageBytes - took);
    pending_.append(static_cast<const char*>(iov[i].iov_base), n);
    took += n;
  }
  if (took == 0) return 0;
  if (flush() < 0 && errno != EAGAIN) return -1;
  return static_cast<ssize_t>(took);
}

ssize_t TlsStream::readv(const iovec* iov, int iovcnt) {
  size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) {
    auto* p = static_cast<char*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      ERR_clear_error();
      size_t got = 0;
      const int r = SSL_read_ex(impl_->ssl, p, left, &got);
      if (r == 1) {
        p += got;
        left -= got;
        total += got;
        continue;
      }
      const int e = SSL_get_error(impl_->ssl, r);
      if (e == SSL_ERROR_ZERO_RETURN) return static_cast<ssize_t>(total);  // 0: end of stream
      if (fail(r, "TLS read") < 0 && errno == EAGAIN && total > 0) return static_cast<ssize_t>(total);
      return total > 0 && errno == EAGAIN ? static_cast<ssize_t>(total) : -1;
    }
  }
  return static_cast<ssize_t>(total);
}

#else  // no OpenSSL in this build

struct TlsStream::Impl {};

bool tlsAvailable() { return false; }
void tlsWarmUp() {}

StatusOr<std::unique_ptr<TlsStream>> TlsStream::create(int, Role, const AuthKey&, std::string_view) {
  return invalidArgument("BRAID_TLS=1, but this braid was built without OpenSSL (install libssl-dev and rebuild)");
}
StatusOr<std::unique_ptr<TlsStream>> TlsStream::createVerifiedClient(int, const CertTlsOptions&, const std::string&) {
  return invalidArgument("TLS was asked for, but this braid was built without OpenSSL (install libssl-dev and rebuild)");
}
TlsStream::~TlsStream() = default;
int TlsStream::fail(int, const char*) { return -1; }
int TlsStream::handshake() { return -1; }
int TlsStream::flush() { return -1; }
ssize_t TlsStream::writev(const iovec*, int) { return -1; }
ssize_t TlsStream::readv(const iovec*, int) { return -1; }

#endif

}  // namespace braid

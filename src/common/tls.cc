#include "common/tls.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <sys/socket.h>

#ifdef BRAID_HAVE_OPENSSL
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <mutex>
#endif

#include "common/log.h"

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

// The application traffic secrets of a session (TLS 1.3, RFC 8446 7.1), raw bytes, as
// OpenSSL's key log hands them over: what the kernel's record layer is keyed from.
struct TrafficSecrets {
  std::string client, server;
  ~TrafficSecrets() {
    if (!client.empty()) OPENSSL_cleanse(client.data(), client.size());
    if (!server.empty()) OPENSSL_cleanse(server.data(), server.size());
  }
};

struct TlsStream::Impl {
  SSL* ssl = nullptr;
  Digest psk{};
  SSL_CTX* ownContext = nullptr;  // a verified client's, made for its options
  int fd = -1;
  bool server = false;
  TrafficSecrets secrets;  // PSK sessions only
  bool kernelSend = false, kernelReceive = false;
  ~Impl() {
    if (ssl) SSL_free(ssl);
    if (ownContext) SSL_CTX_free(ownContext);
  }
};

namespace {

// Where a session's traffic secrets go (SSL ex_data), for keyLog.
int secretsIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// OpenSSL's key log ("LABEL <client random> <secret>", NSS's format): keeps the two
// application traffic secrets of the session it names.
void keyLog(const SSL* ssl, const char* line) {
  auto* secrets = static_cast<TrafficSecrets*>(SSL_get_ex_data(ssl, secretsIndex()));
  if (!secrets) return;
  std::string_view l(line);
  std::string* into = l.rfind("CLIENT_TRAFFIC_SECRET_0 ", 0) == 0   ? &secrets->client
                      : l.rfind("SERVER_TRAFFIC_SECRET_0 ", 0) == 0 ? &secrets->server
                                                                     : nullptr;
  const size_t last = l.rfind(' ');
  if (into && last != std::string_view::npos && !hexToBytes(l.substr(last + 1), into)) into->clear();
}

// BRAID_TLS_KERNEL (default 1): hand the record layer to the kernel where it has one. Read
// here, below the config, because stores (braidrun's too) make sessions without one; the
// config checks the value (0, 1, false, true) when a communicator starts.
bool kernelWanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("BRAID_TLS_KERNEL");
    return !(v && (!std::strcmp(v, "0") || !std::strcmp(v, "false")));
  }();
  return wanted;
}

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
  SSL_CTX_set_keylog_callback(ctx, keyLog);
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
  (void)secretsIndex();
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
  SSL_set_ex_data(t->impl_->ssl, secretsIndex(), &t->impl_->secrets);  // what the key log fills
  t->impl_->fd = fd;
  t->impl_->server = role == Role::kServer;
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
    startKernel();
    return 1;
  }
  if (fail(r, "TLS handshake") < 0 && errno == EAGAIN) return 0;
  // A certificate that did not verify: say why, as OpenSSL's generic error does not.
  const long v = SSL_get_verify_result(impl_->ssl);
  if (impl_->ownContext && v != X509_V_OK)
    error_ = std::string("TLS handshake: the server's certificate does not verify: ") + X509_verify_cert_error_string(v);
  return -1;
}

StatusOr<TlsStream::TrafficKeys> TlsStream::trafficKeys(bool send) const {
  if (!done_) return Status(Code::kInvalidArgument, "TLS: no traffic keys before the handshake is done");
  const bool clientSide = send != impl_->server;  // the client's secret protects what the client sends
  const std::string& secret = clientSide ? impl_->secrets.client : impl_->secrets.server;
  if (secret.empty()) return Status(Code::kInvalidArgument, "TLS: this session kept no traffic secret");
  const SSL_CIPHER* cipher = SSL_get_current_cipher(impl_->ssl);
  TrafficKeys k;
  k.suite = cipher ? static_cast<uint16_t>(SSL_CIPHER_get_id(cipher) & 0xffff) : 0;
  size_t keyLen = 0;
  if (k.suite == 0x1301) keyLen = 16;       // TLS_AES_128_GCM_SHA256
  else if (k.suite == 0x1303) keyLen = 32;  // TLS_CHACHA20_POLY1305_SHA256
  else {
    char hex[8];
    std::snprintf(hex, sizeof hex, "%04x", k.suite);
    return Status(Code::kInvalidArgument, std::string("TLS: suite 0x") + hex + " has no kernel record layer here");
  }
  // HKDF-Expand-Label(secret, "key" / "iv", "", length) with SHA-256 (RFC 8446 7.3), by
  // OpenSSL's own TLS 1.3 KDF.
  auto expand = [&](const char* label, size_t len, std::string* out) {
    EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "TLS13-KDF", nullptr);
    EVP_KDF_CTX* ctx = kdf ? EVP_KDF_CTX_new(kdf) : nullptr;
    EVP_KDF_free(kdf);
    if (!ctx) return false;
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    char digest[] = "SHA256";
    static const char kPrefix[] = "tls13 ";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(secret.data()), secret.size()),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PREFIX, const_cast<char*>(kPrefix), sizeof(kPrefix) - 1),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_LABEL, const_cast<char*>(label), std::strlen(label)),
        OSSL_PARAM_construct_end()};
    out->assign(len, '\0');
    const bool ok = EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out->data()), len, params) == 1;
    EVP_KDF_CTX_free(ctx);
    return ok;
  };
  if (!expand("key", keyLen, &k.key) || !expand("iv", 12, &k.iv))
    return Status(Code::kSystemError, "TLS: cannot derive the traffic keys: " + opensslError());
  return k;
}

namespace {

// Keys one direction of `fd`'s kernel TLS with `k` at record 0 (the first record after the
// handshake). The layouts are the kernel's (linux/tls.h); for TLS 1.3 AES-GCM the first 4
// bytes of the IV are the "salt", as OpenSSL's own kernel TLS code hands them over.
bool keyKernel(int fd, bool send, const TlsStream::TrafficKeys& k) {
  int r = -1;
  if (k.suite == 0x1301) {
    tls12_crypto_info_aes_gcm_128 ci{};
    ci.info.version = TLS_1_3_VERSION;
    ci.info.cipher_type = TLS_CIPHER_AES_GCM_128;
    std::memcpy(ci.salt, k.iv.data(), TLS_CIPHER_AES_GCM_128_SALT_SIZE);
    std::memcpy(ci.iv, k.iv.data() + TLS_CIPHER_AES_GCM_128_SALT_SIZE, TLS_CIPHER_AES_GCM_128_IV_SIZE);
    std::memcpy(ci.key, k.key.data(), TLS_CIPHER_AES_GCM_128_KEY_SIZE);
    r = setsockopt(fd, SOL_TLS, send ? TLS_TX : TLS_RX, &ci, sizeof ci);
    OPENSSL_cleanse(&ci, sizeof ci);
  } else {
    tls12_crypto_info_chacha20_poly1305 ci{};
    ci.info.version = TLS_1_3_VERSION;
    ci.info.cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
    std::memcpy(ci.iv, k.iv.data(), TLS_CIPHER_CHACHA20_POLY1305_IV_SIZE);
    std::memcpy(ci.key, k.key.data(), TLS_CIPHER_CHACHA20_POLY1305_KEY_SIZE);
    r = setsockopt(fd, SOL_TLS, send ? TLS_TX : TLS_RX, &ci, sizeof ci);
    OPENSSL_cleanse(&ci, sizeof ci);
  }
  return r == 0;
}

}  // namespace

// Right after the handshake, before any application record either way (braid writes none
// before it is done, the server sends no tickets, and OpenSSL reads no further than the last
// handshake record), each direction may go to the kernel at record 0; one the kernel does
// not take stays with OpenSSL, whose state for it is untouched. After the switch what is
// sent and read on the socket is plain data to the kernel, which frames, encrypts and
// authenticates the records.
void TlsStream::startKernel() {
  if (impl_->secrets.client.empty() || impl_->secrets.server.empty()) {
    offload_ = "in OpenSSL (no traffic secrets for this session: a certificate session, etcd's)";
    return;  // and not what the log below reports, which is about braid's own connections
  }
  if (!kernelWanted()) {
    offload_ = "in OpenSSL (BRAID_TLS_KERNEL=0)";
  } else if (setsockopt(impl_->fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls")) != 0) {
    offload_ = errno == ENOENT ? "in OpenSSL (this kernel has no TLS: 'tls' is not among its TCP ULPs; modprobe tls)"
                               : std::string("in OpenSSL (the kernel's TLS: ") + std::strerror(errno) + ")";
  } else {
    auto tx = trafficKeys(true);
    auto rx = trafficKeys(false);
    impl_->kernelSend = tx.isOk() && keyKernel(impl_->fd, true, tx.value());
    const int txErr = errno;
    impl_->kernelReceive = rx.isOk() && keyKernel(impl_->fd, false, rx.value());
    const int rxErr = errno;
    for (auto* k : {&tx, &rx})
      if (k->isOk()) {
        OPENSSL_cleanse(k->value().key.data(), k->value().key.size());
        OPENSSL_cleanse(k->value().iv.data(), k->value().iv.size());
      }
    offload_ = impl_->kernelSend && impl_->kernelReceive ? "in the kernel"
               : impl_->kernelSend ? std::string("sending in the kernel, receiving in OpenSSL (") + std::strerror(rxErr) + ")"
               : impl_->kernelReceive ? std::string("receiving in the kernel, sending in OpenSSL (") + std::strerror(txErr) + ")"
                                      : std::string("in OpenSSL (") + (tx.isOk() ? std::strerror(txErr) : tx.status().message()) + ")";
  }
  static std::once_flag said;
  std::call_once(said, [&] { BRAID_INFO("TLS: records are protected %s", offload_.c_str()); });
}

int TlsStream::flush() {
  if (impl_->kernelSend) return 0;  // the kernel took every byte writev returned
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
  if (impl_->kernelSend) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = static_cast<size_t>(iovcnt);
    const ssize_t n = ::sendmsg(impl_->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) want_ = POLLOUT;
    return n;
  }
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
  if (impl_->kernelReceive) return readKernel(iov, iovcnt);
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

// The kernel hands over one record type per call, saying which in a control message: data
// (23) is the stream's; an alert ends it, cleanly for close_notify; anything else (a
// post-handshake message, which braid's peers never send) is a failure.
ssize_t TlsStream::readKernel(const iovec* iov, int iovcnt) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(unsigned char))];
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(impl_->fd, &m, MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) want_ = POLLIN;
    if (errno == EBADMSG) {
      error_ = "TLS read: a record did not authenticate (kernel TLS)";
      errno = EPROTO;
    } else if (errno == EMSGSIZE || errno == EINVAL) {
      error_ = std::string("TLS read: the kernel refused a record: ") + std::strerror(errno);
      errno = EPROTO;
    }
    return -1;
  }
  const cmsghdr* c = CMSG_FIRSTHDR(&m);
  if (n == 0 || !c || c->cmsg_level != SOL_TLS || c->cmsg_type != TLS_GET_RECORD_TYPE) return n;
  const unsigned char type = *CMSG_DATA(c);
  if (type == 23) return n;  // application data
  unsigned char alert[2] = {0, 255};
  size_t got = 0;
  for (int i = 0; i < iovcnt && got < 2 && got < static_cast<size_t>(n); ++i)
    for (size_t j = 0; j < iov[i].iov_len && got < 2 && got < static_cast<size_t>(n); ++j)
      alert[got++] = static_cast<const unsigned char*>(iov[i].iov_base)[j];
  if (type == 21 && got == 2 && alert[1] == 0) return 0;  // close_notify: the end of the stream
  error_ = type == 21 ? "TLS read: the peer sent alert " + std::to_string(alert[1])
                      : "TLS read: unexpected record type " + std::to_string(type) + " after the handshake";
  errno = EPROTO;
  return -1;
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
void TlsStream::startKernel() {}
ssize_t TlsStream::readKernel(const iovec*, int) { return -1; }
StatusOr<TlsStream::TrafficKeys> TlsStream::trafficKeys(bool) const {
  return invalidArgument("TLS: this braid was built without OpenSSL");
}
int TlsStream::flush() { return -1; }
ssize_t TlsStream::writev(const iovec*, int) { return -1; }
ssize_t TlsStream::readv(const iovec*, int) { return -1; }

#endif

}  // namespace braid

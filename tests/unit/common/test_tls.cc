// TLS sessions keyed by the job key, and the kernel's record layer (kernel TLS): the keys
// braid would hand the kernel must open the records OpenSSL writes, and a session over TCP
// must carry data both ways whether the kernel took its records or OpenSSL kept them.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/auth.h"
#include "common/tls.h"
#include "support/catch.h"

using namespace braid;

namespace {

void nonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Runs both handshakes to the end (or a failure), polling each socket for what it waits on.
bool handshakeBoth(TlsStream& a, int fa, TlsStream& b, int fb) {
  for (int round = 0; round < 2000; ++round) {
    const int ra = a.handshake(), rb = b.handshake();
    if (ra < 0 || rb < 0) return false;
    if (ra == 1 && rb == 1) return true;
    pollfd p[2] = {{fa, a.wantEvents(), 0}, {fb, b.wantEvents(), 0}};
    poll(p, 2, 10);
  }
  return false;
}

struct Pair {
  int client = -1, server = -1;
  std::unique_ptr<TlsStream> c, s;
  ~Pair() {
    c.reset();
    s.reset();
    if (client >= 0) close(client);
    if (server >= 0) close(server);
  }
};

// A session between two ends of a connected pair of sockets (a Unix socket pair when tcp is
// false, where no kernel TLS exists; else a TCP connection on loopback).
void connectPair(Pair* p, bool tcp) {
  if (!tcp) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    p->client = sv[0];
    p->server = sv[1];
  } else {
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(l, 1) == 0);
    REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    p->client = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(connect(p->client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    p->server = accept(l, nullptr, nullptr);
    close(l);
    REQUIRE(p->server >= 0);
  }
  nonBlocking(p->client);
  nonBlocking(p->server);
  const AuthKey key = randomAuthKey();
  auto c = TlsStream::create(p->client, TlsStream::Role::kClient, key, "test binding");
  auto s = TlsStream::create(p->server, TlsStream::Role::kServer, key, "test binding");
  REQUIRE(c.isOk());
  REQUIRE(s.isOk());
  p->c = std::move(c).value();
  p->s = std::move(s).value();
  REQUIRE(handshakeBoth(*p->c, p->client, *p->s, p->server));
}

// Reads exactly n raw bytes from a non-blocking socket.
std::string readRaw(int fd, size_t n) {
  std::string out;
  while (out.size() < n) {
    char buf[4096];
    const ssize_t got = recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
    if (got > 0) out.append(buf, static_cast<size_t>(got));
    else if (got == 0) break;
    else {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 2000) <= 0) break;
    }
  }
  return out;
}

// Opens one TLS 1.3 record (RFC 8446 5.2) with the AEAD key and IV: the nonce is the IV with
// the record's sequence number XORed into its last 8 bytes, the additional data the record's
// 5-byte header. Returns the inner plaintext (content, then its type byte), or "" when the
// record does not authenticate.
std::string openRecord(const TlsStream::TrafficKeys& k, uint64_t seq, const std::string& record) {
  if (record.size() < 5 + 16) return "";
  std::string nonce = k.iv;
  for (int i = 0; i < 8; ++i) nonce[11 - i] = static_cast<char>(nonce[11 - i] ^ static_cast<char>(seq >> (8 * i)));
  const EVP_CIPHER* cipher = k.suite == 0x1301 ? EVP_aes_128_gcm() : EVP_chacha20_poly1305();
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  auto u = [](const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); };
  const size_t bodyLen = record.size() - 5 - 16;
  std::string plain(bodyLen, '\0');
  int n = 0, fin = 0;
  bool ok = EVP_DecryptInit_ex(ctx, cipher, nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, 12, nullptr) == 1 &&
            EVP_DecryptInit_ex(ctx, nullptr, nullptr, u(k.key), u(nonce)) == 1 &&
            EVP_DecryptUpdate(ctx, nullptr, &n, u(record), 5) == 1 &&
            EVP_DecryptUpdate(ctx, reinterpret_cast<unsigned char*>(plain.data()), &n, u(record) + 5,
                              static_cast<int>(bodyLen)) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, const_cast<char*>(record.data() + 5 + bodyLen)) == 1 &&
            EVP_DecryptFinal_ex(ctx, reinterpret_cast<unsigned char*>(plain.data()) + n, &fin) == 1;
  EVP_CIPHER_CTX_free(ctx);
  return ok ? plain : "";
}

// The next record on the wire, whole.
std::string nextRecord(int fd) {
  std::string header = readRaw(fd, 5);
  if (header.size() != 5) return "";
  const size_t len = static_cast<unsigned char>(header[3]) << 8 | static_cast<unsigned char>(header[4]);
  return header + readRaw(fd, len);
}

}  // namespace

TEST_CASE("TLS: the keys braid would give the kernel open the records OpenSSL writes, in order", "[tls]") {
  REQUIRE(tlsAvailable());  // built only with OpenSSL
  Pair p;
  connectPair(&p, /*tcp=*/false);
  // A Unix socket has no kernel TLS: OpenSSL keeps the records, and says why.
  CHECK(p.c->offload().rfind("in OpenSSL (", 0) == 0);
  auto send = p.c->trafficKeys(true);
  auto recv = p.s->trafficKeys(false);
  auto back = p.s->trafficKeys(true);
  REQUIRE(send.isOk());
  REQUIRE(recv.isOk());
  REQUIRE(back.isOk());
  CHECK((send.value().suite == 0x1301 || send.value().suite == 0x1303));
  CHECK(send.value().key.size() == (send.value().suite == 0x1301 ? 16u : 32u));
  CHECK(send.value().iv.size() == 12u);
  // Both ends derive the same keys for one direction, and other keys for the other one.
  CHECK(send.value().key == recv.value().key);
  CHECK(send.value().iv == recv.value().iv);
  CHECK(send.value().key != back.value().key);

  // Records 0 and 1 of the client's application data, taken off the wire before the server
  // reads them, open with the derived key at those sequence numbers, and not at others.
  for (const std::string text : {"the first record", "and the second one"}) {
    iovec v{const_cast<char*>(text.data()), text.size()};
    REQUIRE(p.c->writev(&v, 1) == static_cast<ssize_t>(text.size()));
    REQUIRE(p.c->flush() == 0);
  }
  const std::string r0 = nextRecord(p.server), r1 = nextRecord(p.server);
  REQUIRE(r0.size() > 5);
  CHECK(static_cast<unsigned char>(r0[0]) == 23);  // application data, as every TLS 1.3 record looks
  CHECK(openRecord(send.value(), 0, r0) == std::string("the first record") + '\x17');
  CHECK(openRecord(send.value(), 1, r1) == std::string("and the second one") + '\x17');
  CHECK(openRecord(send.value(), 1, r0).empty());
  CHECK(openRecord(back.value(), 0, r0).empty());
  std::string flipped = r0;
  flipped[10] = static_cast<char>(flipped[10] ^ 1);
  CHECK(openRecord(send.value(), 0, flipped).empty());
}

TEST_CASE("TLS: over TCP data crosses both ways intact, in the kernel where it has TLS, else in OpenSSL", "[tls]") {
  REQUIRE(tlsAvailable());  // built only with OpenSSL
  Pair p;
  connectPair(&p, /*tcp=*/true);
  const std::string where = p.c->offload();
  INFO("client: records protected " << where << "; server: " << p.s->offload());
  const bool kernel = where == "in the kernel";
  CHECK((kernel || where.rfind("in OpenSSL (", 0) == 0 || where.find("in the kernel, ") != std::string::npos));
  // 3 MiB each way, written and read in pieces of odd sizes, both ends at once.
  const size_t kBytes = 3u << 20;
  std::string out[2], in[2];
  for (int d = 0; d < 2; ++d) {
    out[d].resize(kBytes);
    for (size_t i = 0; i < kBytes; ++i) out[d][i] = static_cast<char>((i * 131 + d * 7) ^ (i >> 11));
  }
  TlsStream* ends[2] = {p.c.get(), p.s.get()};
  const int fds[2] = {p.client, p.server};
  size_t sent[2] = {0, 0};
  for (int spin = 0; spin < 200000 && (in[0].size() < kBytes || in[1].size() < kBytes); ++spin) {
    bool moved = false;
    for (int d = 0; d < 2; ++d) {
      TlsStream& w = *ends[d];
      TlsStream& r = *ends[1 - d];
      if (sent[d] < kBytes || w.pending() > 0) {
        if (w.pending() > 0) (void)w.flush();
        if (sent[d] < kBytes && w.pending() == 0) {
          iovec v{out[d].data() + sent[d], std::min<size_t>(kBytes - sent[d], 77777)};
          const ssize_t n = w.writev(&v, 1);
          if (n > 0) {
            sent[d] += static_cast<size_t>(n);
            moved = true;
          } else {
            REQUIRE(errno == EAGAIN);
          }
        }
      }
      char buf[50001];
      iovec v{buf, sizeof buf};
      const ssize_t n = r.readv(&v, 1);
      if (n > 0) {
        in[d].append(buf, static_cast<size_t>(n));
        moved = true;
      } else {
        INFO(r.error());
        REQUIRE(n < 0);
        REQUIRE(errno == EAGAIN);
      }
    }
    if (!moved) {
      pollfd q[2] = {{fds[0], POLLIN | POLLOUT, 0}, {fds[1], POLLIN | POLLOUT, 0}};
      poll(q, 2, 10);
    }
  }
  CHECK(in[0] == out[0]);
  CHECK(in[1] == out[1]);
  // The client goes: the server reads the end of the stream, not an error.
  p.c.reset();
  close(p.client);
  p.client = -1;
  ssize_t n = -1;
  for (int i = 0; i < 200 && n != 0; ++i) {
    char buf[16];
    iovec v{buf, sizeof buf};
    n = p.s->readv(&v, 1);
    if (n < 0 && errno == EAGAIN) {
      pollfd q{p.server, POLLIN, 0};
      poll(&q, 1, 10);
    } else if (n < 0) {
      break;
    }
  }
  INFO(p.s->error());
  CHECK(n == 0);
}

// Checks specific to the tcp transport: its wire format, and what it does with peers that
// do not follow it. The generic behaviour is covered by conformance_test.cc.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/local_address.h"
#include "common/tcp_pacing.h"
#include "common/tls.h"
#include "harness.h"
#include "support/catch.h"
#include "support/tcp_socket.h"
#include "support/wiretap.h"
#include "transports/tcp/socket_util.h"
#include "transports/tcp/tcp_connection.h"
#include "transports/tcp/tcp_transport.h"

namespace braid::transport::test {
namespace {

using tcp::Handshake;

TransportConfig tcpConfig(int rank, uint64_t nonce, int sockets = 1) {
  TransportConfig cfg = loopbackPairConfig(rank, nonce);
  cfg.socketsPerPeer = sockets;
  return cfg;
}

// A blocking socket connected to `blob`, or -1.
int rawConnect(const std::string& blob) {
  sockaddr_in addr{};
  std::string challenge;
  if (!tcp::parseBlob(blob, &addr, &challenge)) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool sendAll(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

std::string handshakeBytes(const Handshake& h) {
  uint8_t buf[tcp::kHandshakeBytes];
  tcp::encodeHandshake(h, buf);
  return std::string(reinterpret_cast<char*>(buf), sizeof(buf));
}

std::string frameBytes(uint32_t bytes, uint64_t tag, const std::string& payload) {
  uint8_t hdr[tcp::kFrameHeaderBytes];
  tcp::encodeFrameHeader(bytes, tag, hdr);
  return std::string(reinterpret_cast<char*>(hdr), sizeof(hdr)) + payload;
}

Handshake goodHandshake(uint64_t nonce, int sockets = 1, int index = 0) {
  Handshake h;
  h.nonce = nonce;
  h.srcRank = 1;
  h.dstRank = 0;
  h.channel = 0;
  h.socketIndex = index;
  h.socketsPerPeer = sockets;
  h.slotBytes = 4096;
  return h;
}

// Whether the other end closes `fd` (EOF or reset) within `secs`.
bool closedByPeer(int fd, double secs) {
  Deadline d = Deadline::after(secs);
  char buf[256];
  while (!d.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, d.remainingMillis(100)) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) return true;
    if (n < 0 && errno != EINTR && errno != EAGAIN) return true;
  }
  return false;
}

// After establish: every stranger's socket (anything with `what` and `fd`) was closed, and
// one slot from the real peer arrives whole, with its tag and its bytes, not a stranger's.
template <typename Strangers>
void checkStrangersOutRealPeerIn(Strangers& strangers, Connection& send, Connection& recv, uint64_t seed) {
  for (auto& st : strangers) {
    INFO(st.what);
    CHECK(closedByPeer(st.fd, 2));
    close(st.fd);
  }
  uint8_t payload[100];
  fillPattern(payload, sizeof(payload), seed);
  REQUIRE(sendSlot(send, payload, sizeof(payload), 42, Deadline::after(5)).isOk());
  Slot got;
  Status rs = recvSlot(recv, &got, Deadline::after(5));
  INFO(describe(rs));
  REQUIRE(rs.isOk());
  CHECK(got.tag == 42);
  CHECK(got.bytes == sizeof(payload));
  CHECK(checkPattern(got.data, got.bytes, seed) < 0);
}

// A receive connection from rank 1 on channel 0, fed by a raw socket that already sent a
// valid handshake; `establish` has completed.
struct RawPeer {
  std::unique_ptr<Transport> t;
  std::unique_ptr<Connection> recv;
  int fd = -1;
  ~RawPeer() {
    if (fd >= 0) close(fd);
  }
};

void makeRawPeer(RawPeer* rp) {
  const uint64_t nonce = freshNonce();
  rp->t = createTcpTransport(tcpConfig(0, nonce));
  std::string blob;
  auto r = rp->t->createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  rp->recv = std::move(r).value();
  rp->fd = rawConnect(blob);
  REQUIRE(rp->fd >= 0);
  REQUIRE(sendAll(rp->fd, handshakeBytes(goodHandshake(nonce)).data(), tcp::kHandshakeBytes));
  Status s = rp->t->establish(Deadline::after(5));
  INFO(describe(s));
  REQUIRE(s.isOk());
}

}  // namespace

TEST_CASE("tcp: address blobs parse strictly", "[transport][tcp]") {
  sockaddr_in a{};
  CHECK(tcp::parseAddress("10.1.2.3:4567", &a));
  CHECK(ntohs(a.sin_port) == 4567);
  CHECK(tcp::formatAddress(a) == "10.1.2.3:4567");
  for (const char* bad : {"", "10.1.2.3", ":80", "10.1.2.3:", "10.1.2.3:0", "10.1.2.3:65536", "10.1.2.3:8a",
                          "host:80", "10.1.2:80", "10.1.2.3:123456", "[::1]:80"}) {
    INFO(bad);
    CHECK_FALSE(tcp::parseAddress(bad, &a));
  }
  auto t = createTcpTransport(tcpConfig(1, 1));
  auto c = t->connectSend(0, 0, "not an address");
  REQUIRE_FALSE(c.isOk());
  CHECK(c.status().code() == Code::kInvalidArgument);

  // A blob: the address and this connection's challenge, 16 bytes in hex.
  const std::string ch("\x00\x01\xfe\xff" "abcdefghijkl", 16);
  const std::string blob = tcp::formatBlob(a, ch);
  CHECK(blob == "10.1.2.3:4567/0001feff6162636465666768696a6b6c");
  sockaddr_in b{};
  std::string back;
  REQUIRE(tcp::parseBlob(blob, &b, &back));
  CHECK(back == ch);
  CHECK(tcp::formatAddress(b) == "10.1.2.3:4567");
  for (const std::string& bad : {blob + "0", blob.substr(0, blob.size() - 1), std::string("10.1.2.3:4567/"),
                                 std::string("10.1.2.3:4567/0001feff6162636465666768696a6b6g"),
                                 std::string("10.1.2.3:0/0001feff6162636465666768696a6b6c")}) {
    INFO(bad);
    CHECK_FALSE(tcp::parseBlob(bad, &b, &back));
  }
}

TEST_CASE("tcp: a port range (BRAID_PORT_RANGE) is where it listens, and a full one is an error naming it",
          "[transport][tcp]") {
  // A port that was free a moment ago.
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(probe, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  socklen_t len = sizeof(sa);
  REQUIRE(getsockname(probe, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  close(probe);
  const int port = ntohs(sa.sin_port);
  TransportConfig cfg = tcpConfig(0, 1);
  cfg.netIf = "127.0.0.1";
  cfg.portLo = port;
  cfg.portHi = port;
  auto first = createTcpTransport(cfg);
  std::string blob;
  auto recv = first->createRecv(1, 0, &blob);
  INFO(recv.status().toString() << " blob " << blob);
  REQUIRE(recv.isOk());
  sockaddr_in a{};
  std::string challenge;
  REQUIRE(tcp::parseBlob(blob, &a, &challenge));
  CHECK(ntohs(a.sin_port) == port);
  // The range's only port is taken now.
  auto second = createTcpTransport(cfg);
  std::string blob2;
  auto full = second->createRecv(1, 0, &blob2);
  REQUIRE_FALSE(full.isOk());
  CHECK(full.status().message().find("no free port in BRAID_PORT_RANGE=" + std::to_string(port) + "-" +
                                     std::to_string(port)) != std::string::npos);
}

TEST_CASE("tcp: the handshake encoding round-trips", "[transport][tcp]") {
  Handshake h = goodHandshake(0x0123456789ABCDEFull, 3, 2);
  h.channel = 17;
  uint8_t buf[tcp::kHandshakeBytes];
  tcp::encodeHandshake(h, buf);
  Handshake back = tcp::decodeHandshake(buf);
  CHECK(back.magic == tcp::kHandshakeMagic);
  CHECK(back.version == tcp::kHandshakeVersion);
  CHECK(back.nonce == h.nonce);
  CHECK(back.srcRank == 1);
  CHECK(back.dstRank == 0);
  CHECK(back.channel == 17);
  CHECK(back.socketIndex == 2);
  CHECK(back.socketsPerPeer == 3);
  CHECK(back.slotBytes == 4096);
  CHECK(back.flags == 0);
}

TEST_CASE("tcp: a handshake's MAC binds the key, the challenge and every field", "[transport][tcp][auth]") {
  const AuthKey key = randomAuthKey();
  const std::string challenge(tcp::kChallengeBytes, 'c');
  Handshake h = goodHandshake(77);
  tcp::signHandshake(key, challenge, &h);
  CHECK((h.flags & tcp::kHandshakeKeyed) != 0);
  CHECK(tcp::verifyHandshake(key, challenge, h));
  // Survives the wire.
  uint8_t buf[tcp::kHandshakeBytes];
  tcp::encodeHandshake(h, buf);
  CHECK(tcp::verifyHandshake(key, challenge, tcp::decodeHandshake(buf)));
  CHECK_FALSE(tcp::verifyHandshake(randomAuthKey(), challenge, h));
  CHECK_FALSE(tcp::verifyHandshake(key, std::string(tcp::kChallengeBytes, 'd'), h));
  // Any changed bit of the signed bytes or of the MAC is refused.
  for (size_t byte = 0; byte < tcp::kHandshakeBytes; ++byte) {
    uint8_t changed[tcp::kHandshakeBytes];
    std::memcpy(changed, buf, sizeof(buf));
    changed[byte] ^= 0x10;
    INFO("byte " << byte);
    CHECK_FALSE(tcp::verifyHandshake(key, challenge, tcp::decodeHandshake(changed)));
  }
  Handshake unsigned_ = goodHandshake(77);
  CHECK_FALSE(tcp::verifyHandshake(key, challenge, unsigned_));
}

TEST_CASE("tcp: netIf picks the advertised address", "[transport][tcp]") {
  TransportConfig cfg = tcpConfig(0, 5);
  std::string blob;
  sockaddr_in a{};

  cfg.netIf = "127.0.0.1";
  auto t1 = createTcpTransport(cfg);
  REQUIRE(t1->createRecv(1, 0, &blob).isOk());
  CHECK(blob.rfind("127.0.0.1:", 0) == 0);

  cfg.netIf = "lo";
  auto t2 = createTcpTransport(cfg);
  REQUIRE(t2->createRecv(1, 0, &blob).isOk());
  CHECK(blob.rfind("127.0.0.1:", 0) == 0);

  cfg.netIf = "";
  auto t3 = createTcpTransport(cfg);
  REQUIRE(t3->createRecv(1, 0, &blob).isOk());
  std::string challenge;
  REQUIRE(tcp::parseBlob(blob, &a, &challenge));
  CHECK(a.sin_addr.s_addr != htonl(INADDR_ANY));

  cfg.netIf = "no-such-if0";
  auto t4 = createTcpTransport(cfg);
  auto r = t4->createRecv(1, 0, &blob);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("no-such-if0") != std::string::npos);
}

TEST_CASE("tcp: strangers are refused and the real peer still connects", "[transport][tcp]") {
  const uint64_t nonce = freshNonce();
  auto t0 = createTcpTransport(tcpConfig(0, nonce));
  auto t1 = createTcpTransport(tcpConfig(1, nonce));
  std::string blob;
  auto r = t0->createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  std::unique_ptr<Connection> recv = std::move(r).value();

  struct Stranger {
    const char* what;
    std::string bytes;
    int fd = -1;
  };
  auto tweak = [&](auto change) {
    Handshake h = goodHandshake(nonce);
    change(h);
    return handshakeBytes(h);
  };
  std::string garbage(tcp::kHandshakeBytes, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 37 + 11);
  std::vector<Stranger> strangers = {
      {"garbage", garbage},
      {"bad magic", tweak([](Handshake& h) { h.magic ^= 1; })},
      {"bad version", tweak([](Handshake& h) { h.version = 99; })},
      {"wrong nonce", tweak([](Handshake& h) { h.nonce ^= 1; })},
      {"meant for another rank", tweak([](Handshake& h) { h.dstRank = 5; })},
      {"unexpected channel", tweak([](Handshake& h) { h.channel = 7; })},
      {"unexpected rank", tweak([](Handshake& h) { h.srcRank = 9; })},
      {"socket index out of range", tweak([](Handshake& h) { h.socketIndex = 3; })},
      {"other sockets per peer", tweak([](Handshake& h) { h.socketsPerPeer = 2; })},
      {"larger slots", tweak([](Handshake& h) { h.slotBytes = 1 << 20; })},
      {"half a handshake", handshakeBytes(goodHandshake(nonce)).substr(0, 20)},
      {"silent", ""},
  };
  for (Stranger& s : strangers) {
    s.fd = rawConnect(blob);
    REQUIRE(s.fd >= 0);
    if (!s.bytes.empty()) REQUIRE(sendAll(s.fd, s.bytes.data(), s.bytes.size()));
  }
  int hangup = rawConnect(blob);  // connects and leaves at once
  REQUIRE(hangup >= 0);
  close(hangup);

  auto s = t1->connectSend(0, 0, blob);
  REQUIRE(s.isOk());
  std::unique_ptr<Connection> send = std::move(s).value();
  // The same claim again, after the real one: first come, first bound; this one is refused.
  Stranger duplicate{"duplicate of the real peer", handshakeBytes(goodHandshake(nonce))};
  duplicate.fd = rawConnect(blob);
  REQUIRE(duplicate.fd >= 0);
  REQUIRE(sendAll(duplicate.fd, duplicate.bytes.data(), duplicate.bytes.size()));
  strangers.push_back(duplicate);

  const int64_t start = nowNanos();
  Status est = t0->establish(Deadline::after(5));
  INFO(describe(est));
  REQUIRE(est.isOk());
  CHECK(static_cast<double>(nowNanos() - start) / 1e9 < 2);  // silent strangers must not stall it
  checkStrangersOutRealPeerIn(strangers, *send, *recv, 3);
}

TEST_CASE("tcp: with a job key only a peer that proves it binds, and a stranger who knows the nonce cannot feed frames",
          "[transport][tcp][auth]") {
  // The attack this stops: a process outside the job that learned the nonce and a rank's
  // address connected as a slow peer and its frames were summed into the result.
  const uint64_t nonce = freshNonce();
  const AuthKey key = randomAuthKey();
  TransportConfig c0 = tcpConfig(0, nonce), c1 = tcpConfig(1, nonce);
  c0.authKey = key;
  c1.authKey = key;
  auto t0 = createTcpTransport(c0);
  auto t1 = createTcpTransport(c1);
  std::string blob;
  auto r = t0->createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  std::unique_ptr<Connection> recv = std::move(r).value();
  sockaddr_in addr{};
  std::string challenge;
  REQUIRE(tcp::parseBlob(blob, &addr, &challenge));
  REQUIRE(challenge.size() == tcp::kChallengeBytes);

  struct Stranger {
    const char* what;
    Handshake h;
    int fd = -1;
  };
  Handshake wrongKey = goodHandshake(nonce);
  tcp::signHandshake(randomAuthKey(), challenge, &wrongKey);
  Handshake otherChallenge = goodHandshake(nonce);  // seen on another connection of the job
  tcp::signHandshake(key, std::string(tcp::kChallengeBytes, 'x'), &otherChallenge);
  Handshake forgedFlag = goodHandshake(nonce);
  forgedFlag.flags = tcp::kHandshakeKeyed;
  std::vector<Stranger> strangers = {{"no key", goodHandshake(nonce)},
                                     {"wrong key", wrongKey},
                                     {"replayed from another connection", otherChallenge},
                                     {"keyed flag without a MAC", forgedFlag}};
  for (Stranger& st : strangers) {
    st.fd = rawConnect(blob);
    REQUIRE(st.fd >= 0);
    const std::string bytes = handshakeBytes(st.h);
    REQUIRE(sendAll(st.fd, bytes.data(), bytes.size()));
    // What it would sum into the result if it were bound.
    const std::string frame = frameBytes(100, 42, std::string(100, 'X'));
    (void)sendAll(st.fd, frame.data(), frame.size());
  }
  auto s = t1->connectSend(0, 0, blob);
  REQUIRE(s.isOk());
  std::unique_ptr<Connection> send = std::move(s).value();
  Status est = t0->establish(Deadline::after(5));
  INFO(describe(est));
  REQUIRE(est.isOk());
  checkStrangersOutRealPeerIn(strangers, *send, *recv, 9);
}

TEST_CASE("tcp: a peer with another key or none is named in the establish timeout as failing authentication",
          "[transport][tcp][auth]") {
  for (bool senderHasKey : {true, false}) {
    INFO("sender has a key: " << senderHasKey);
    const uint64_t nonce = freshNonce();
    TransportConfig c0 = tcpConfig(0, nonce), c1 = tcpConfig(1, nonce);
    c0.authKey = randomAuthKey();
    if (senderHasKey) c1.authKey = randomAuthKey();
    auto t0 = createTcpTransport(c0);
    auto t1 = createTcpTransport(c1);
    std::string blob;
    auto r = t0->createRecv(1, 0, &blob);
    REQUIRE(r.isOk());
    auto s = t1->connectSend(0, 0, blob);
    REQUIRE(s.isOk());
    const int64_t start = nowNanos();
    Status est = t0->establish(Deadline::after(1));
    INFO(describe(est));
    CHECK(est.code() == Code::kTimeout);
    CHECK(est.rank() == 1);
    CHECK(est.message().find("authentication failed") != std::string::npos);
    CHECK(static_cast<double>(nowNanos() - start) / 1e9 < 3);
  }
}

TEST_CASE("tcp: an oversized frame is a remote error naming the sender", "[transport][tcp]") {
  RawPeer rp;
  makeRawPeer(&rp);
  std::string f = frameBytes(4097, 1, std::string(100, 'x'));
  REQUIRE(sendAll(rp.fd, f.data(), f.size()));
  Slot s;
  Status st = recvSlot(*rp.recv, &s, Deadline::after(5));
  INFO(describe(st));
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == 1);
  CHECK(st.message().find("malformed frame from rank 1") != std::string::npos);
  // Sticky: the connection does not resynchronize on garbage.
  CHECK(rp.recv->progress().code() == Code::kRemoteError);
}

TEST_CASE("tcp: a stream cut inside a frame is a remote error naming the sender", "[transport][tcp]") {
  RawPeer rp;
  makeRawPeer(&rp);
  std::string f = frameBytes(1000, 1, std::string(10, 'x'));
  REQUIRE(sendAll(rp.fd, f.data(), f.size()));
  close(rp.fd);
  rp.fd = -1;
  Slot s;
  const int64_t start = nowNanos();
  Status st = recvSlot(*rp.recv, &s, Deadline::after(5));
  INFO(describe(st));
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == 1);
  CHECK(st.message().find("connection to rank 1 closed") != std::string::npos);
  CHECK(static_cast<double>(nowNanos() - start) / 1e9 < 2);
}

TEST_CASE("tcp: frames sent before a clean close are delivered before the error", "[transport][tcp]") {
  RawPeer rp;
  makeRawPeer(&rp);
  std::string all;
  for (uint64_t i = 0; i < 3; ++i) {
    std::string payload(50 * (i + 1), static_cast<char>('a' + i));
    all += frameBytes(static_cast<uint32_t>(payload.size()), i, payload);
  }
  all += frameBytes(0, 3, "");
  REQUIRE(sendAll(rp.fd, all.data(), all.size()));
  close(rp.fd);
  rp.fd = -1;
  for (uint64_t i = 0; i < 4; ++i) {
    Slot s;
    Status st = recvSlot(*rp.recv, &s, Deadline::after(5));
    INFO(describe(st));
    REQUIRE(st.isOk());
    CHECK(s.tag == i);
    CHECK(s.bytes == (i < 3 ? 50 * (i + 1) : 0));
    if (i < 3) CHECK(static_cast<const char*>(s.data)[s.bytes - 1] == static_cast<char>('a' + i));
    REQUIRE(rp.recv->releaseRecv(s).isOk());
  }
  Slot s;
  Status st = recvSlot(*rp.recv, &s, Deadline::after(5));
  INFO(describe(st));
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == 1);
  CHECK(st.message().find("connection to rank 1 closed") != std::string::npos);
}

// A connected loopback pair: *sender gets a data socket as the transport configures it,
// *reader a blocking socket. Both kernel buffers are made small so a frame of 64 KiB cannot
// all be in the kernel at once.
void smallBufferPair(int* sender, int* reader) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(l >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int small = 4096;
  REQUIRE(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) == 0);
  REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  REQUIRE(listen(l, 1) == 0);
  *sender = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(*sender >= 0);
  REQUIRE(setsockopt(*sender, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
  REQUIRE(connect(*sender, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(tcp::setNonBlocking(*sender).isOk());
  *reader = accept(l, nullptr, nullptr);
  REQUIRE(*reader >= 0);
  close(l);
}

TEST_CASE("tcp: a frame sent from the caller's memory is read from it until flushed, and not after",
          "[transport][tcp]") {
  int fd = -1, reader = -1;
  smallBufferPair(&fd, &reader);
  TransportConfig cfg = tcpConfig(0, freshNonce());
  cfg.slotBytes = 64 * 1024;
  cfg.nslots = 4;
  tcp::TcpSendConnection send(cfg, 1, {fd});
  REQUIRE(send.sendsFromUser());

  std::vector<char> user(cfg.slotBytes, 'x');
  Slot s;
  REQUIRE(send.reserveSend(&s).isOk());
  s.tag = 7;
  REQUIRE(send.postSendFrom(s, user.data(), user.size()).isOk());
  // The kernel holds a few KiB: the rest of the frame waits, still in the caller's memory.
  REQUIRE_FALSE(send.flushed());
  std::fill(user.begin(), user.end(), 'y');

  std::string got;
  const size_t frame = tcp::kFrameHeaderBytes + user.size();
  const Deadline deadline = Deadline::after(10);
  while (got.size() < frame && !deadline.expired()) {
    REQUIRE(send.progress().isOk());
    pollfd p{reader, POLLIN, 0};
    if (poll(&p, 1, 10) <= 0) continue;
    char buf[8192];
    ssize_t n = recv(reader, buf, std::min(sizeof(buf), frame - got.size()), 0);
    REQUIRE(n > 0);
    got.append(buf, static_cast<size_t>(n));
  }
  REQUIRE(got.size() == frame);
  REQUIRE(send.progress().isOk());
  CHECK(send.flushed());
  // What left before the change was read as it was, what left after it as it became.
  CHECK(got[tcp::kFrameHeaderBytes] == 'x');
  CHECK(got.back() == 'y');

  // Flushed: the caller's memory is no longer read. The next frame comes from a slot.
  std::fill(user.begin(), user.end(), 'z');
  REQUIRE(send.reserveSend(&s).isOk());
  std::memset(s.data, 'q', 16);
  REQUIRE(send.postSend(s, 16).isOk());
  got.clear();
  while (got.size() < tcp::kFrameHeaderBytes + 16 && !deadline.expired()) {
    REQUIRE(send.progress().isOk());
    char buf[64];
    ssize_t n = recv(reader, buf, tcp::kFrameHeaderBytes + 16 - got.size(), MSG_DONTWAIT);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
  }
  CHECK(got.substr(tcp::kFrameHeaderBytes) == std::string(16, 'q'));
  close(reader);
}

TEST_CASE("tcp: BRAID_TCP_ZCOPY=0 stages every frame in a slot", "[transport][tcp]") {
  int fd = -1, reader = -1;
  smallBufferPair(&fd, &reader);
  TransportConfig cfg = tcpConfig(0, freshNonce());
  setenv("BRAID_TCP_ZCOPY", "0", 1);
  tcp::TcpSendConnection send(cfg, 1, {fd});
  unsetenv("BRAID_TCP_ZCOPY");
  CHECK_FALSE(send.sendsFromUser());
  Slot s;
  REQUIRE(send.reserveSend(&s).isOk());
  char byte = 0;
  Status st = send.postSendFrom(s, &byte, 1);
  CHECK(st.code() == Code::kInternal);
  close(reader);
}

TEST_CASE("tcp: a frame asked for with peekRecvInto lands in the caller's memory, and the next waits to land too",
          "[transport][tcp]") {
  RawPeer rp;
  makeRawPeer(&rp);
  const std::string a(1000, 'a'), b(1000, 'b');
  const std::string wire = frameBytes(1000, 0, a) + frameBytes(1000, 1, b);
  REQUIRE(sendAll(rp.fd, wire.data(), wire.size()));
  std::string d0(1000, '.'), d1(1000, '.');
  Slot s;
  REQUIRE(recvSlot(*rp.recv, &s, Deadline::after(5), d0.data(), d0.size()).isOk());
  CHECK(s.data == d0.data());
  CHECK(s.tag == 0);
  CHECK(d0 == a);
  REQUIRE(rp.recv->releaseRecv(s).isOk());
  // Frame 1 was in the socket all along; its payload was not read ahead into a slot.
  REQUIRE(recvSlot(*rp.recv, &s, Deadline::after(5), d1.data(), d1.size()).isOk());
  CHECK(s.data == d1.data());
  CHECK(s.tag == 1);
  CHECK(d1 == b);
  REQUIRE(rp.recv->releaseRecv(s).isOk());
}

TEST_CASE("tcp: frames read ahead into slots, a frame begun in its slot, and one larger than asked for all arrive whole",
          "[transport][tcp]") {
  RawPeer rp;
  makeRawPeer(&rp);
  // Two frames, taken without landing: the second is read ahead into its slot, and asking
  // for it to land then hands out the slot.
  const std::string a(1000, 'a'), b(1000, 'b');
  std::string wire = frameBytes(1000, 0, a) + frameBytes(1000, 1, b);
  REQUIRE(sendAll(rp.fd, wire.data(), wire.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Slot s;
  REQUIRE(recvSlot(*rp.recv, &s, Deadline::after(5)).isOk());
  CHECK(std::string(static_cast<const char*>(s.data), s.bytes) == a);
  REQUIRE(rp.recv->releaseRecv(s).isOk());
  std::string d(2000, '.');
  REQUIRE(recvSlot(*rp.recv, &s, Deadline::after(5), d.data(), 1000).isOk());
  CHECK(s.data != d.data());
  CHECK(std::string(static_cast<const char*>(s.data), s.bytes) == b);
  REQUIRE(rp.recv->releaseRecv(s).isOk());

  // Half a frame read into its slot, then asked to land: the half moves, the rest follows.
  std::string c(2000, 'c');
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<char>('a' + i % 26);
  wire = frameBytes(2000, 2, c);
  REQUIRE(sendAll(rp.fd, wire.data(), tcp::kFrameHeaderBytes + 1000));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(rp.recv->peekRecv(&s).code() == Code::kWouldBlock);
  REQUIRE(sendAll(rp.fd, wire.data() + tcp::kFrameHeaderBytes + 1000, 1000));
  d.assign(2000, '.');
  REQUIRE(recvSlot(*rp.recv, &s, Deadline::after(5), d.data(), d.size()).isOk());
  CHECK(s.data == d.data());
  CHECK(s.tag == 2);
  CHECK(d == c);
  REQUIRE(rp.recv->releaseRecv(s).isOk());

  // More bytes than the caller asked for: the frame stays in its slot, whole, and nothing
  // lands in the caller's memory.
  wire = frameBytes(100, 3, std::string(100, 'x'));
  REQUIRE(sendAll(rp.fd, wire.data(), wire.size()));
  d.assign(2000, '.');
  REQUIRE(recvSlot(*rp.recv, &s, Deadline::after(5), d.data(), 50).isOk());
  CHECK(s.data != d.data());
  CHECK(s.bytes == 100);
  CHECK(std::string(static_cast<const char*>(s.data), s.bytes) == std::string(100, 'x'));
  CHECK(d == std::string(2000, '.'));
  REQUIRE(rp.recv->releaseRecv(s).isOk());
}

TEST_CASE("tcp: BRAID_TCP_ZCOPY=send receives through slots", "[transport][tcp]") {
  setenv("BRAID_TCP_ZCOPY", "send", 1);
  RawPeer rp;
  makeRawPeer(&rp);
  unsetenv("BRAID_TCP_ZCOPY");
  const std::string a(1000, 'a');
  const std::string wire = frameBytes(1000, 0, a);
  REQUIRE(sendAll(rp.fd, wire.data(), wire.size()));
  std::string d(1000, '.');
  Slot s;
  REQUIRE(recvSlot(*rp.recv, &s, Deadline::after(5), d.data(), d.size()).isOk());
  CHECK(s.data != d.data());
  CHECK(std::string(static_cast<const char*>(s.data), s.bytes) == a);
  REQUIRE(rp.recv->releaseRecv(s).isOk());
}

TEST_CASE("tcp: a socket to this host's own address leaves a pacing congestion control, others keep it",
          "[transport][tcp]") {
  in_addr loop{};
  loop.s_addr = htonl(INADDR_LOOPBACK);
  in_addr elsewhere{};
  REQUIRE(inet_pton(AF_INET, "192.0.2.1", &elsewhere) == 1);  // TEST-NET-1: never local
  CHECK(isLocalIpv4Address(loop));
  CHECK_FALSE(isLocalIpv4Address(elsewhere));
  const in_addr own = tcp::defaultAdvertisedAddress();  // an interface's address, or loopback
  CHECK(isLocalIpv4Address(own));

  // A congestion control that does not pace is left alone, whoever the peer is.
  int reno = braid::testing::tcpSocketWith("reno");
  REQUIRE(reno >= 0);  // reno is built into every Linux kernel and always allowed
  CHECK(tcp::unpaceLocalSocket(reno, loop).empty());
  CHECK(congestionControlOf(reno) == "reno");
  close(reno);

  int local = braid::testing::tcpSocketWith("bbr");
  if (local < 0) {
    WARN("bbr is not available to this process (tcp_allowed_congestion_control): only the half without it ran");
    return;
  }
  std::string now;
  CHECK(tcp::unpaceLocalSocket(local, loop, &now) == "bbr");
  CHECK((now == "cubic" || now == "reno"));
  CHECK(congestionControlOf(local) == now);
  close(local);

  int own_ = braid::testing::tcpSocketWith("bbr");
  REQUIRE(own_ >= 0);
  CHECK(tcp::unpaceLocalSocket(own_, own) == "bbr");
  close(own_);

  int remote = braid::testing::tcpSocketWith("bbr");
  REQUIRE(remote >= 0);
  CHECK(tcp::unpaceLocalSocket(remote, elsewhere).empty());
  CHECK(congestionControlOf(remote) == "bbr");
  close(remote);
}

TEST_CASE("tcp: connecting to a port nobody listens on times out naming the peer", "[transport][tcp]") {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(l >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  close(l);  // the port is now (almost certainly) refused

  TransportConfig cfg = tcpConfig(1, 9);
  cfg.connectTimeoutSec = 0.5;
  auto t = createTcpTransport(cfg);
  const int64_t start = nowNanos();
  auto c = t->connectSend(0, 0, tcp::formatAddress(a));
  const double secs = static_cast<double>(nowNanos() - start) / 1e9;
  REQUIRE_FALSE(c.isOk());
  INFO(describe(c.status()));
  CHECK(c.status().code() == Code::kTimeout);
  CHECK(c.status().rank() == 0);
  CHECK(c.status().message().find("rank 0") != std::string::npos);
  CHECK(secs >= 0.45);
  CHECK(secs < 3);
}

TEST_CASE("tcp: establish timeout counts the missing sockets", "[transport][tcp]") {
  const uint64_t nonce = freshNonce();
  auto t0 = createTcpTransport(tcpConfig(0, nonce, 2));
  std::string blob;
  auto r = t0->createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  int fd = rawConnect(blob);
  REQUIRE(fd >= 0);
  REQUIRE(sendAll(fd, handshakeBytes(goodHandshake(nonce, 2, 0)).data(), tcp::kHandshakeBytes));
  Status s = t0->establish(Deadline::after(0.5));
  INFO(describe(s));
  CHECK(s.code() == Code::kTimeout);
  CHECK(s.rank() == 1);
  CHECK(s.message().find("rank 1 (channel 0: 1 of 2 sockets)") != std::string::npos);
  close(fd);
}

TEST_CASE("tcp: a peer with a different socket count is refused with the reason", "[transport][tcp]") {
  const uint64_t nonce = freshNonce();
  auto t0 = createTcpTransport(tcpConfig(0, nonce, 1));
  auto t1 = createTcpTransport(tcpConfig(1, nonce, 2));
  std::string blob;
  auto r = t0->createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  auto c = t1->connectSend(0, 0, blob);
  REQUIRE(c.isOk());
  Status s = t0->establish(Deadline::after(0.5));
  INFO(describe(s));
  CHECK(s.code() == Code::kTimeout);
  CHECK(s.message().find("2 sockets per peer") != std::string::npos);
}

TEST_CASE("tcp: rejects bad arguments", "[transport][tcp]") {
  auto t = createTcpTransport(tcpConfig(0, 1));
  std::string blob;
  CHECK(t->createRecv(0, 0, &blob).status().code() == Code::kInvalidArgument);  // itself
  CHECK(t->createRecv(2, 0, &blob).status().code() == Code::kInvalidArgument);  // out of range
  CHECK(t->createRecv(1, -1, &blob).status().code() == Code::kInvalidArgument);
  auto first = t->createRecv(1, 0, &blob);
  REQUIRE(first.isOk());
  CHECK(t->createRecv(1, 0, &blob).status().code() == Code::kInvalidArgument);  // twice
  TransportConfig cfg = tcpConfig(0, 1);
  cfg.socketsPerPeer = 0;
  CHECK(createTcpTransport(cfg)->createRecv(1, 0, &blob).status().code() == Code::kInvalidArgument);
}

}  // namespace braid::transport::test

namespace braid::transport::test {
namespace {

using braid::testing::Wiretap;

// The TLS tests report themselves skipped in a build without OpenSSL.
#define SKIP_WITHOUT_TLS()                      \
  do {                                          \
    if (!tlsAvailable()) {                      \
      WARN("skipped: built without OpenSSL");   \
      return;                                   \
    }                                           \
  } while (0)

struct TappedPair {
  std::unique_ptr<Transport> t0, t1;
  std::unique_ptr<Connection> recv, send;
  std::unique_ptr<Wiretap> tap;
};

// Rank 1 sends to rank 0 through a wiretap; both transports established.
Status tappedPair(bool tls0, bool tls1, long flipAt, TappedPair* p) {
  const uint64_t nonce = freshNonce();
  const AuthKey key = randomAuthKey();
  TransportConfig c0 = tcpConfig(0, nonce), c1 = tcpConfig(1, nonce);
  c0.slotBytes = c1.slotBytes = 65536;
  c0.authKey = c1.authKey = key;
  c0.tls = tls0;
  c1.tls = tls1;
  p->t0 = createTcpTransport(c0);
  p->t1 = createTcpTransport(c1);
  std::string blob;
  BRAID_ASSIGN_OR_RETURN(p->recv, p->t0->createRecv(1, 0, &blob));
  sockaddr_in real{};
  std::string challenge;
  if (!tcp::parseBlob(blob, &real, &challenge)) return invalidArgument("blob " + blob);
  p->tap = std::make_unique<Wiretap>(real, flipAt);
  if (!p->tap->ok()) return internalError("wiretap: cannot listen");
  BRAID_ASSIGN_OR_RETURN(p->send, p->t1->connectSend(0, 0, tcp::formatBlob(p->tap->address(), challenge)));
  Status s1;
  std::thread other([&] { s1 = p->t1->establish(Deadline::after(5)); });
  Status s0 = p->t0->establish(Deadline::after(5));
  other.join();
  BRAID_RETURN_IF_ERROR(s0);
  return s1;
}

std::string secretPayload(size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += "BRAID-SECRET-PAYLOAD-";
  s.resize(bytes);
  return s;
}

}  // namespace

TEST_CASE("tcp: with BRAID_TLS the bytes arrive intact and the wire never carries them in the clear",
          "[transport][tcp][tls]") {
  SKIP_WITHOUT_TLS();
  for (bool tls : {false, true}) {
    INFO("tls " << tls);
    TappedPair p;
    Status s = tappedPair(tls, tls, -1, &p);
    INFO(describe(s));
    REQUIRE(s.isOk());
    const std::string payload = secretPayload(60000);
    for (int i = 0; i < 20; ++i) {
      REQUIRE(sendSlot(*p.send, payload.data(), payload.size(), 100 + i, Deadline::after(5)).isOk());
      Slot got;
      Status rs = recvSlot(*p.recv, &got, Deadline::after(5));
      INFO(describe(rs));
      REQUIRE(rs.isOk());
      CHECK(got.tag == static_cast<uint64_t>(100 + i));
      REQUIRE(got.bytes == payload.size());
      CHECK(std::memcmp(got.data, payload.data(), payload.size()) == 0);
      REQUIRE(p.recv->releaseRecv(got).isOk());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string wire = p.tap->seen();
    CHECK(wire.size() > 20 * payload.size());
    // Without TLS the tap reads the payload; with it, not a trace of it.
    CHECK((wire.find("BRAID-SECRET-PAYLOAD") != std::string::npos) == !tls);
  }
}

TEST_CASE("tcp: with BRAID_TLS a byte changed on the way is an error naming the sender, never wrong data",
          "[transport][tcp][tls]") {
  SKIP_WITHOUT_TLS();
  TappedPair p;
  // Well past the handshakes (under 2 KB), inside the first payload's records.
  Status s = tappedPair(true, true, 30000, &p);
  INFO(describe(s));
  REQUIRE(s.isOk());
  const std::string payload = secretPayload(60000);
  REQUIRE(sendSlot(*p.send, payload.data(), payload.size(), 7, Deadline::after(5)).isOk());
  Slot got;
  Status rs = recvSlot(*p.recv, &got, Deadline::after(5));
  INFO(describe(rs));
  CHECK(rs.code() == Code::kRemoteError);
  CHECK(rs.rank() == 1);
  CHECK(rs.message().find("TLS") != std::string::npos);
}

TEST_CASE("tcp: with BRAID_TLS a sender whose receiver is gone gets an error naming it, not SIGPIPE",
          "[transport][tcp][tls]") {
  SKIP_WITHOUT_TLS();
  // SIGPIPE as a rank has it: the default, which ends the process.
  signal(SIGPIPE, SIG_DFL);
  const uint64_t nonce = freshNonce();
  TransportConfig c0 = tcpConfig(0, nonce), c1 = tcpConfig(1, nonce);
  c0.authKey = c1.authKey = randomAuthKey();
  c0.tls = c1.tls = true;
  auto t0 = createTcpTransport(c0);
  auto t1 = createTcpTransport(c1);
  std::string blob;
  auto r = t0->createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  std::unique_ptr<Connection> recv = std::move(r).value();
  auto sc = t1->connectSend(0, 0, blob);
  REQUIRE(sc.isOk());
  std::unique_ptr<Connection> send = std::move(sc).value();
  Status s1;
  std::thread other([&] { s1 = t1->establish(Deadline::after(5)); });
  Status s0 = t0->establish(Deadline::after(5));
  other.join();
  REQUIRE(s0.isOk());
  REQUIRE(s1.isOk());
  // The receiver goes away cleanly (its sockets close with nothing unread); the sender
  // keeps writing: the first write still succeeds, the next meets the peer's reset, which
  // through OpenSSL's own socket I/O raises SIGPIPE and ends this process.
  recv.reset();
  t0.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  uint8_t payload[4000];
  fillPattern(payload, sizeof(payload), 5);
  Status st;
  for (int i = 0; i < 200 && st.isOk(); ++i) {
    st = sendSlot(*send, payload, sizeof(payload), 1, Deadline::after(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  signal(SIGPIPE, SIG_IGN);
  INFO(describe(st));
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == 0);
}

TEST_CASE("tcp: with BRAID_TLS frames sent before a clean close arrive, then the end of the stream",
          "[transport][tcp][tls]") {
  SKIP_WITHOUT_TLS();
  TappedPair p;
  Status s = tappedPair(true, true, -1, &p);
  INFO(describe(s));
  REQUIRE(s.isOk());
  uint8_t payload[3000];
  for (int i = 0; i < 3; ++i) {
    fillPattern(payload, sizeof(payload), 20 + i);
    REQUIRE(sendSlot(*p.send, payload, sizeof(payload), 20 + i, Deadline::after(5)).isOk());
  }
  // A peer that finished and exited: its sockets close without a TLS close_notify.
  p.send.reset();
  p.t1.reset();
  for (int i = 0; i < 3; ++i) {
    Slot got;
    Status rs = recvSlot(*p.recv, &got, Deadline::after(5));
    INFO(describe(rs));
    REQUIRE(rs.isOk());
    CHECK(checkPattern(got.data, got.bytes, 20 + i) < 0);
    REQUIRE(p.recv->releaseRecv(got).isOk());
  }
  Slot none;
  Status end = recvSlot(*p.recv, &none, Deadline::after(5));
  INFO(describe(end));
  CHECK(end.code() == Code::kRemoteError);
  CHECK(end.message().find("end of stream") != std::string::npos);
}

TEST_CASE("tcp: a receiver with BRAID_TLS and a sender without it fail establish naming the sender",
          "[transport][tcp][tls]") {
  SKIP_WITHOUT_TLS();
  TappedPair p;
  const auto start = std::chrono::steady_clock::now();
  Status s = tappedPair(true, false, -1, &p);
  INFO(describe(s));
  // The sender has no handshake to wait for; the receiver's fails at the first plaintext
  // frame or times out.
  CHECK_FALSE(s.isOk());
  CHECK(s.rank() == 1);
  CHECK(s.message().find("TLS") != std::string::npos);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 8);
}

}  // namespace braid::transport::test

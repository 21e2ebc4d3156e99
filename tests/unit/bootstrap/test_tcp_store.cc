// The TCP store beyond plain semantics: the HELLO nonce check, connecting before the server
// exists, the server going away, malformed and hostile input against a live server (each
// bad connection is closed while a good client keeps working), and a client facing a
// stalled or misbehaving server.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "bootstrap/store_protocol.h"
#include "bootstrap/tcp_store.h"
#include "common/tls.h"
#include "support/catch.h"
#include "support/wiretap.h"
#include "test_util.h"

using namespace braid;
using namespace braid::bootstrap;
using braid::testing::RawSocket;
using braid::testing::secondsSince;

namespace {

std::unique_ptr<TcpStoreServer> startServer(uint64_t nonce = 0) {
  auto s = TcpStoreServer::start("127.0.0.1", 0, nonce);
  REQUIRE(s.isOk());
  REQUIRE(s.value()->port() > 0);
  return std::move(s).value();
}

std::unique_ptr<TcpStoreClient> connectTo(int port, uint64_t nonce = 0, double deadlineSec = 5, double opTimeout = 30) {
  auto c = TcpStoreClient::connect("127.0.0.1", port, nonce, Deadline::after(deadlineSec), opTimeout);
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  return std::move(c).value();
}

std::string helloFrame(uint64_t nonce = 0) {
  proto::Request r;
  r.op = proto::Op::kHello;
  r.nonce = nonce;
  std::string out;
  REQUIRE(proto::encodeRequest(r, &out).isOk());
  return out;
}

std::string rawHeader(uint32_t magic, uint16_t version, uint16_t op, uint32_t payload) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((magic >> (8 * i)) & 0xff));
  s.push_back(static_cast<char>(version & 0xff));
  s.push_back(static_cast<char>(version >> 8));
  s.push_back(static_cast<char>(op & 0xff));
  s.push_back(static_cast<char>(op >> 8));
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((payload >> (8 * i)) & 0xff));
  return s;
}

// Reads one reply frame from a raw socket.
proto::Reply readReply(RawSocket& s) {
  std::string h = s.recvUpTo(proto::kHeaderBytes, 2000);
  REQUIRE(h.size() == proto::kHeaderBytes);
  proto::FrameHeader fh;
  std::string err;
  REQUIRE(proto::decodeHeader(h.data(), &fh, proto::Direction::kReply, &err));
  std::string body = s.recvUpTo(fh.payloadBytes, 2000);
  std::string all = h + body;
  proto::Frame f;
  auto r = proto::decodeFrame(all.data(), all.size(), proto::Direction::kReply, &f);
  REQUIRE(r.kind == proto::DecodeResult::kFrame);
  auto rep = proto::parseReply(f);
  REQUIRE(rep.isOk());
  return rep.value();
}

// A good client must still be served after each bad connection.
// Opens `count` idle connections (no HELLO) to the store, then checks that the first
// `dropped` were closed for the later ones and that `open` connections remain.
void idleFlood(TcpStoreServer& server, int count, int dropped, uint64_t open,
               std::vector<std::unique_ptr<RawSocket>>* idle) {
  for (int i = 0; i < count; ++i) {
    idle->push_back(std::make_unique<RawSocket>(server.port()));
    REQUIRE(idle->back()->ok());
  }
  for (int i = 0; i < dropped; ++i) CHECK((*idle)[static_cast<size_t>(i)]->closedByPeer(2000));
  for (int i = 0; i < 100 && server.stats().open > open; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(server.stats().open == open);
}

void checkGoodClient(TcpStoreClient& good, int round) {
  std::string key = "good/" + std::to_string(round);
  REQUIRE(good.set(key, "ok").isOk());
  auto v = good.get(key, Deadline::after(2));
  REQUIRE(v.isOk());
  CHECK(v.value() == "ok");
}

// Sends a HELLO with a client challenge, as a client with a key does, and returns the reply.
proto::Reply sendKeyedHello(RawSocket& s, uint64_t nonce) {
  proto::Request hello;
  hello.op = proto::Op::kHello;
  hello.nonce = nonce;
  hello.challenge = std::string(proto::kChallengeBytes, 'c');
  std::string out;
  REQUIRE(proto::encodeRequest(hello, &out).isOk());
  REQUIRE(s.send(out));
  return readReply(s);
}

// A one-connection fake store for client-side tests: accepts one client and runs `script`
// on its socket.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int fd)> script) {
    listen_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listen_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    REQUIRE(listen(listen_, 4) == 0);
    socklen_t len = sizeof(sa);
    getsockname(listen_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this, script] {
      int fd = accept(listen_, nullptr, nullptr);
      if (fd < 0) return;
      script(fd);
      close(fd);
    });
  }
  ~FakeServer() {
    shutdown(listen_, SHUT_RDWR);
    thread_.join();
    close(listen_);
  }
  int port() const { return port_; }

  // Script helpers: read exactly one request frame; write bytes.
  static bool readFrame(int fd) {
    std::string buf;
    char c[4096];
    for (;;) {
      proto::Frame f;
      auto r = proto::decodeFrame(buf.data(), buf.size(), proto::Direction::kRequest, &f);
      if (r.kind == proto::DecodeResult::kFrame) return true;
      if (r.kind == proto::DecodeResult::kMalformed) return false;
      ssize_t n = recv(fd, c, sizeof(c), 0);
      if (n <= 0) return false;
      buf.append(c, static_cast<size_t>(n));
    }
  }
  static void reply(int fd, const proto::Reply& rep) {
    std::string out;
    (void)proto::encodeReply(rep, &out);
    (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  }

 private:
  int listen_ = -1;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("tcp store: HELLO nonce must match the server's", "[bootstrap][tcp]") {
  auto server = startServer(0x1234abcd);
  SECTION("the right nonce is accepted") {
    auto c = connectTo(server->port(), 0x1234abcd);
    CHECK(c->set("a", "b").isOk());
  }
  SECTION("a different nonce is refused with a reason, at once") {
    auto t0 = std::chrono::steady_clock::now();
    auto c = TcpStoreClient::connect("127.0.0.1", server->port(), 0x9999, Deadline::after(5));
    REQUIRE_FALSE(c.isOk());
    CHECK(c.status().code() == Code::kInvalidArgument);
    CHECK(c.status().message().find("different job") != std::string::npos);
    CHECK(c.status().message().find("1234abcd") == std::string::npos);  // the secret is not echoed
    CHECK(secondsSince(t0) < 1.0);
    CHECK(server->stats().rejected >= 1);
  }
  SECTION("no nonce is refused too") {
    auto c = TcpStoreClient::connect("127.0.0.1", server->port(), 0, Deadline::after(5));
    CHECK(c.status().code() == Code::kInvalidArgument);
  }
  SECTION("a server without a nonce accepts anyone") {
    auto open = startServer(0);
    CHECK(connectTo(open->port(), 0)->set("x", "1").isOk());
    CHECK(connectTo(open->port(), 42)->set("y", "1").isOk());
  }
}

TEST_CASE("tcp store: clients may start before the server", "[bootstrap][tcp]") {
  int port;
  {
    auto probe = startServer();
    port = probe->port();  // a port that was free a moment ago
  }
  std::unique_ptr<TcpStoreServer> server;
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto s = TcpStoreServer::start("127.0.0.1", port, 0);
    if (s.isOk()) server = std::move(s).value();
  });
  auto t0 = std::chrono::steady_clock::now();
  auto c = TcpStoreClient::connect("127.0.0.1", port, 0, Deadline::after(10));
  later.join();
  REQUIRE(server);
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  CHECK(secondsSince(t0) >= 0.25);
  CHECK(c.value()->set("k", "v").isOk());
}

TEST_CASE("tcp store: connecting to nothing gives up at the deadline saying unreachable", "[bootstrap][tcp]") {
  int port;
  {
    auto probe = startServer();
    port = probe->port();
  }
  auto t0 = std::chrono::steady_clock::now();
  auto c = TcpStoreClient::connect("127.0.0.1", port, 0, Deadline::after(0.5));
  double waited = secondsSince(t0);
  REQUIRE_FALSE(c.isOk());
  CHECK(c.status().code() == Code::kTimeout);
  CHECK(c.status().message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(c.status().message().find("unreachable") != std::string::npos);
  CHECK(waited >= 0.45);
  CHECK(waited < 2.0);
}

TEST_CASE("tcp store: bad addresses", "[bootstrap][tcp]") {
  CHECK(TcpStoreClient::connect("", 1234, 0, Deadline::after(1)).status().code() == Code::kInvalidArgument);
  CHECK(TcpStoreClient::connect("127.0.0.1", 0, 0, Deadline::after(1)).status().code() == Code::kInvalidArgument);
  CHECK(TcpStoreClient::connect("127.0.0.1", 70000, 0, Deadline::after(1)).status().code() == Code::kInvalidArgument);
  CHECK(TcpStoreServer::start("127.0.0.1", -1, 0).status().code() == Code::kInvalidArgument);
  auto s = startServer();
  auto clash = TcpStoreServer::start("127.0.0.1", s->port(), 0);
  REQUIRE_FALSE(clash.isOk());
  CHECK(clash.status().code() == Code::kSystemError);
  CHECK(clash.status().message().find(std::to_string(s->port())) != std::string::npos);
  // Hostnames resolve.
  auto byName = TcpStoreClient::connect("localhost", s->port(), 0, Deadline::after(5));
  INFO(byName.status().toString());
  CHECK(byName.isOk());
}

TEST_CASE("tcp store: a lost server gives kRemoteError naming the store, fast", "[bootstrap][tcp]") {
  auto server = startServer();
  const int port = server->port();
  auto c = connectTo(port);
  auto waiter = connectTo(port);
  REQUIRE(c->set("k", "v").isOk());
  // A client parked in a long get must be released by the shutdown too.
  Status parked;
  double parkedFor = 0;
  std::thread t([&] {
    auto t0 = std::chrono::steady_clock::now();
    parked = waiter->get("never", Deadline::after(30)).status();
    parkedFor = secondsSince(t0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  server.reset();
  t.join();
  CHECK(parked.code() == Code::kRemoteError);
  CHECK(parkedFor < 2.0);

  auto t0 = std::chrono::steady_clock::now();
  auto r = c->get("k", Deadline::after(10));
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kRemoteError);
  CHECK(r.status().message().find("store at 127.0.0.1:" + std::to_string(port) + " is unreachable") !=
        std::string::npos);
  // Later calls fail the same way without waiting.
  CHECK(c->set("k", "v").code() == Code::kRemoteError);
  CHECK(c->add("n", 1).status().code() == Code::kRemoteError);
  CHECK(c->check({"k"}).status().code() == Code::kRemoteError);
  CHECK(secondsSince(t0) < 1.0);
}

TEST_CASE("tcp store: large values and the frame limit", "[bootstrap][tcp]") {
  auto server = startServer();
  auto c = connectTo(server->port());
  std::string big(10 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
  REQUIRE(c->set("big", big).isOk());
  CHECK(c->get("big", Deadline::after(10)).value() == big);

  // Too large for one frame: refused before anything is sent; the connection survives.
  auto tooBig = c->set("huge", std::string(proto::kMaxPayloadBytes, 'y'));
  CHECK(tooBig.code() == Code::kInvalidArgument);
  CHECK(c->check({"big"}).value());

  // A key beyond the limit is refused the same way.
  CHECK(c->set(std::string(proto::kMaxKeyBytes + 1, 'k'), "v").code() == Code::kInvalidArgument);
  CHECK(c->set("after", "1").isOk());
}

// A large value crossing a slow link takes longer than a parked GET's slice and grace: the
// client waits for a reply that keeps arriving, up to its op timeout from the request, and
// gives up on one that stops arriving, naming it.
TEST_CASE("tcp store client: a reply that keeps arriving is waited for, one that stops is not", "[bootstrap][tcp]") {
  SECTION("3 MiB at 1 MiB/s") {
    auto server = startServer();
    braid::testing::Wiretap tap(braid::testing::Wiretap::loopback(server->port()));
    REQUIRE(tap.ok());
    auto c = connectTo(tap.port());
    std::string big(3 << 20, 'v');
    for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
    REQUIRE(c->set("big", big).isOk());
    tap.slowReplies(1 << 20);
    auto t0 = std::chrono::steady_clock::now();
    auto v = c->get("big", Deadline::after(30));
    INFO(v.status().toString());
    REQUIRE(v.isOk());
    CHECK(v.value() == big);
    CHECK(secondsSince(t0) > 2.5);  // longer than the slice and the grace
  }
  // A reply frame of 1 MiB, sent by `send` in the fake store's own way.
  auto script = [](std::function<void(int, const std::string&)> send) {
    return [send](int fd) {
      if (!FakeServer::readFrame(fd)) return;  // HELLO
      FakeServer::reply(fd, proto::Reply{});
      if (!FakeServer::readFrame(fd)) return;  // GET
      proto::Reply value;
      value.op = proto::Op::kValue;
      value.value.assign(1 << 20, 'v');
      std::string out;
      (void)proto::encodeReply(value, &out);
      send(fd, out);
    };
  };
  SECTION("half a reply, then nothing") {
    FakeServer fake(script([](int fd, const std::string& out) {
      (void)!::send(fd, out.data(), out.size() / 2, MSG_NOSIGNAL);
      char c;
      (void)!recv(fd, &c, 1, 0);  // until the client goes
    }));
    auto c = connectTo(fake.port());
    auto t0 = std::chrono::steady_clock::now();
    auto v = c->get("big", Deadline::after(30));
    CHECK(v.status().code() == Code::kTimeout);
    CHECK(v.status().message().find("stopped sending its reply to a GET request after") != std::string::npos);
    CHECK(secondsSince(t0) < 4);
  }
  SECTION("a byte at a time, past the op timeout") {
    FakeServer fake(script([](int fd, const std::string& out) {
      for (size_t i = 0; i < out.size(); ++i) {
        if (::send(fd, &out[i], 1, MSG_NOSIGNAL) != 1) return;  // the client went
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }));
    auto c = connectTo(fake.port(), 0, 5, /*opTimeout=*/3);
    auto t0 = std::chrono::steady_clock::now();
    auto v = c->get("big", Deadline::after(30));
    CHECK(v.status().code() == Code::kTimeout);
    INFO(v.status().message());
    CHECK(v.status().message().find("stopped sending its reply") != std::string::npos);
    CHECK(secondsSince(t0) > 2.8);
    CHECK(secondsSince(t0) < 5);
  }
}

TEST_CASE("tcp store: multiGet whose values exceed one frame falls back to single gets", "[bootstrap][tcp]") {
  auto server = startServer();
  auto c = connectTo(server->port());
  std::vector<std::string> keys = {"m0", "m1", "m2"};
  for (size_t i = 0; i < keys.size(); ++i) REQUIRE(c->set(keys[i], std::string(25 << 20, static_cast<char>('a' + i))).isOk());
  auto vs = c->multiGet(keys, Deadline::after(30));
  REQUIRE(vs.isOk());
  REQUIRE(vs.value().size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(vs.value()[i] == std::string(25 << 20, static_cast<char>('a' + i)));
}

TEST_CASE("tcp store: wait and multiGet on many keys span several frames", "[bootstrap][tcp]") {
  auto server = startServer();
  auto c = connectTo(server->port());
  std::vector<std::string> keys;
  for (int i = 0; i < 20000; ++i) keys.push_back("many/" + std::to_string(i));
  for (int i = 0; i < 20000; ++i) REQUIRE(c->set(keys[i], std::to_string(i)).isOk());
  REQUIRE(c->wait(keys, Deadline::after(10)).isOk());
  CHECK(c->check(keys).value());
  auto vs = c->multiGet(keys, Deadline::after(10));
  REQUIRE(vs.isOk());
  REQUIRE(vs.value().size() == keys.size());
  CHECK(vs.value()[12345] == "12345");
}

TEST_CASE("tcp store: malformed frames close only their own connection", "[bootstrap][tcp][fuzz]") {
  auto server = startServer();
  auto good = connectTo(server->port());
  checkGoodClient(*good, 0);
  // A second good client parked on a key throughout: the bad connections must not wake,
  // break or time it out.
  auto parkedClient = connectTo(server->port());
  StatusOr<std::string> parkedResult(Status(Code::kInternal, "not run"));
  std::thread parked([&] { parkedResult = parkedClient->get("released-at-end", Deadline::after(60)); });

  struct Case {
    const char* name;
    bool helloFirst;
    std::string bytes;
  };
  std::string hello = helloFrame();
  std::string fieldPastEnd;
  {
    std::string p;
    for (uint32_t v : {1u, 1000u}) for (int i = 0; i < 4; ++i) p.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    p += "abc";
    fieldPastEnd = rawHeader(proto::kMagic, proto::kVersion, 2, static_cast<uint32_t>(p.size())) + p;
  }
  std::string longKey;
  {
    proto::Request r;
    r.op = proto::Op::kCheck;
    r.keys = {"x"};
    std::string ok;
    REQUIRE(proto::encodeRequest(r, &ok).isOk());
    // Re-encode by hand with a key one byte over the limit (the encoder would refuse it).
    std::string key(proto::kMaxKeyBytes + 1, 'k');
    std::string p;
    auto put = [&](uint32_t v) { for (int i = 0; i < 4; ++i) p.push_back(static_cast<char>((v >> (8 * i)) & 0xff)); };
    put(1);
    put(static_cast<uint32_t>(key.size()));
    p += key;
    longKey = rawHeader(proto::kMagic, proto::kVersion, 6, static_cast<uint32_t>(p.size())) + p;
  }
  std::vector<Case> cases = {
      {"bad magic", false, rawHeader(0xdeadbeef, proto::kVersion, 1, 4) + std::string(4, '\0')},
      {"bad magic after hello", true, rawHeader(0x41414141, proto::kVersion, 2, 4) + std::string(4, '\0')},
      {"bad version", false, rawHeader(proto::kMagic, 99, 1, 4) + std::string(4, '\0')},
      {"oversized length", true, rawHeader(proto::kMagic, proto::kVersion, 2, proto::kMaxPayloadBytes + 1)},
      {"length 0xffffffff", false, rawHeader(proto::kMagic, proto::kVersion, 2, 0xffffffffu)},
      {"field length beyond frame", true, fieldPastEnd},
      {"unknown opcode", true, rawHeader(proto::kMagic, proto::kVersion, 77, 4) + std::string(4, '\0')},
      {"reply opcode as request", true, rawHeader(proto::kMagic, proto::kVersion, 0x81, 4) + std::string(4, '\0')},
      {"request before hello", false, rawHeader(proto::kMagic, proto::kVersion, 6, 4) + std::string(4, '\0')},
      {"second hello", true, hello},
      {"key over the limit", true, longKey},
      {"http request", false, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
  };
  int round = 1;
  for (const auto& c : cases) {
    INFO(c.name);
    auto before = server->stats().rejected;
    RawSocket s(server->port());
    REQUIRE(s.ok());
    if (c.helloFirst) {
      REQUIRE(s.send(hello));
      CHECK(readReply(s).op == proto::Op::kOk);
    }
    s.send(c.bytes);
    CHECK(s.closedByPeer(2000));
    CHECK(server->stats().rejected == before + 1);
    checkGoodClient(*good, round++);
  }

  SECTION("a truncated payload followed by EOF is dropped without being served") {
    RawSocket s(server->port());
    REQUIRE(s.send(hello));
    CHECK(readReply(s).op == proto::Op::kOk);
    proto::Request r;
    r.op = proto::Op::kSet;
    r.keys = {"truncated"};
    r.value = std::string(100, 'v');
    std::string bytes;
    REQUIRE(proto::encodeRequest(r, &bytes).isOk());
    s.send(bytes.substr(0, bytes.size() / 2));
    s.shutdownWrite();
    CHECK(s.closedByPeer(2000));
    CHECK_FALSE(good->check({"truncated"}).value());
    checkGoodClient(*good, round++);
  }

  SECTION("seeded random garbage") {
    std::mt19937 rng(12345);
    for (int i = 0; i < 200; ++i) {
      INFO("garbage " << i);
      RawSocket s(server->port());
      REQUIRE(s.ok());
      std::string bytes;
      int mode = static_cast<int>(rng() % 3);
      if (mode >= 1) {
        REQUIRE(s.send(hello));
        CHECK(readReply(s).op == proto::Op::kOk);
      }
      if (mode == 2) {
        // A valid header prefix so the garbage reaches the payload decoder.
        uint16_t op = static_cast<uint16_t>(1 + rng() % 8);
        uint32_t len = 4 + rng() % 64;
        bytes = rawHeader(proto::kMagic, proto::kVersion, op, len);
        for (uint32_t k = 0; k < len; ++k) bytes.push_back(static_cast<char>(rng()));
      } else {
        size_t len = 1 + rng() % 512;
        for (size_t k = 0; k < len; ++k) bytes.push_back(static_cast<char>(rng()));
      }
      s.send(bytes);
      s.shutdownWrite();  // EOF ends a frame that happens to be merely incomplete
      CHECK(s.closedByPeer(2000));
    }
    checkGoodClient(*good, round++);
  }

  REQUIRE(good->set("released-at-end", "yes").isOk());
  parked.join();
  REQUIRE(parkedResult.isOk());
  CHECK(parkedResult.value() == "yes");
  // Every bad connection is gone: only the two good clients remain.
  for (int i = 0; i < 100 && server->stats().open > 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(server->stats().open == 2);
}

TEST_CASE("tcp store: a client that disconnects while parked is forgotten", "[bootstrap][tcp]") {
  auto server = startServer();
  {
    RawSocket s(server->port());
    REQUIRE(s.send(helloFrame()));
    CHECK(readReply(s).op == proto::Op::kOk);
    proto::Request r;
    r.op = proto::Op::kGet;
    r.keys = {"never-set"};
    r.timeoutMs = 60000;
    std::string bytes;
    REQUIRE(proto::encodeRequest(r, &bytes).isOk());
    REQUIRE(s.send(bytes));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }  // closes while parked
  auto c = connectTo(server->port());
  REQUIRE(c->set("never-set", "now").isOk());  // wakes nobody, crashes nothing
  for (int i = 0; i < 100 && server->stats().open > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(server->stats().open == 1);
}

TEST_CASE("tcp store client: a stalled server times out and the stream resynchronizes", "[bootstrap][tcp]") {
  FakeServer fake([](int fd) {
    if (!FakeServer::readFrame(fd)) return;  // HELLO
    FakeServer::reply(fd, proto::Reply{});
    if (!FakeServer::readFrame(fd)) return;  // SET: answered late
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    FakeServer::reply(fd, proto::Reply{});
    if (!FakeServer::readFrame(fd)) return;  // CHECK
    proto::Reply yes;
    yes.op = proto::Op::kBool;
    yes.flag = true;
    FakeServer::reply(fd, yes);
    char c;
    (void)!recv(fd, &c, 1, 0);  // until the client goes
  });
  auto client = connectTo(fake.port(), 0, 5, /*opTimeout=*/0.2);
  auto t0 = std::chrono::steady_clock::now();
  Status s = client->set("k", "v");
  CHECK(s.code() == Code::kTimeout);
  CHECK(s.message().find("did not answer") != std::string::npos);
  CHECK(secondsSince(t0) < 0.5);
  // The late OK for SET must not be taken as the answer to CHECK.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto r = client->check({"k"});
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  CHECK(r.value());
}

TEST_CASE("tcp store client: a malformed reply loses the connection for good", "[bootstrap][tcp]") {
  FakeServer fake([](int fd) {
    if (!FakeServer::readFrame(fd)) return;
    FakeServer::reply(fd, proto::Reply{});
    if (!FakeServer::readFrame(fd)) return;
    std::string junk = rawHeader(proto::kMagic, proto::kVersion, 0x83, 12) + std::string(12, '\xff');
    (void)!::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    char c;
    (void)!recv(fd, &c, 1, 0);
  });
  auto client = connectTo(fake.port());
  auto r = client->add("k", 1);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kRemoteError);
  CHECK(r.status().message().find("malformed reply") != std::string::npos);
  CHECK(client->set("k", "v").code() == Code::kRemoteError);
}

TEST_CASE("tcp store client: something else listening on the port", "[bootstrap][tcp]") {
  FakeServer fake([](int fd) {
    const char* banner = "SSH-2.0-OpenSSH_9.2\r\n";
    (void)!::send(fd, banner, std::strlen(banner), MSG_NOSIGNAL);
    char c;
    (void)!recv(fd, &c, 1, 0);
  });
  auto c = TcpStoreClient::connect("127.0.0.1", fake.port(), 0, Deadline::after(2));
  REQUIRE_FALSE(c.isOk());
  CHECK(c.status().code() == Code::kRemoteError);
  CHECK(c.status().message().find("HELLO") != std::string::npos);
}

// A stranger who never sends a HELLO: a frame larger than a HELLO is refused at its header
// (nothing of its payload is waited for or buffered), a silent connection is closed after
// BRAID_STORE_HELLO_SEC, and at most BRAID_STORE_MAX_PENDING such connections are kept.
TEST_CASE("tcp store: connections without a HELLO are bounded in size, time and number", "[bootstrap][tcp]") {
  setenv("BRAID_STORE_HELLO_SEC", "1", 1);
  setenv("BRAID_STORE_MAX_PENDING", "8", 1);
  auto server = startServer();
  unsetenv("BRAID_STORE_HELLO_SEC");
  unsetenv("BRAID_STORE_MAX_PENDING");
  auto good = connectTo(server->port());
  checkGoodClient(*good, 0);

  SECTION("a 64 MiB HELLO header is refused before its payload") {
    auto before = server->stats().rejected;
    RawSocket s(server->port());
    REQUIRE(s.send(rawHeader(proto::kMagic, proto::kVersion, 1, proto::kMaxPayloadBytes)));
    CHECK(s.closedByPeer(2000));
    CHECK(server->stats().rejected == before + 1);
  }
  SECTION("bytes beyond a HELLO before it are refused") {
    RawSocket s(server->port());
    REQUIRE(s.send(std::string(200, 'x')));
    CHECK(s.closedByPeer(2000));
  }
  SECTION("a silent connection is closed after the HELLO timeout") {
    RawSocket s(server->port());
    REQUIRE(s.ok());
    auto t0 = std::chrono::steady_clock::now();
    CHECK(s.closedByPeer(5000));
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(sec > 0.5);
    CHECK(sec < 4);
  }
  SECTION("past the pending bound the oldest silent connection goes first") {
    // The first four are dropped for the last four; eight silent ones and the good client
    // remain, waiting for their timeout.
    std::vector<std::unique_ptr<RawSocket>> idle;
    idleFlood(*server, 12, 4, 9, &idle);
  }
  // The job's own client was never disturbed; and one that says HELLO in time is served.
  checkGoodClient(*good, 1);
  auto late = connectTo(server->port());
  checkGoodClient(*late, 2);
}

// A store with the job's key (store_protocol.h): only clients that prove the key are served,
// the client checks that the store knows it too, and nothing before that proof can read or
// change a key.
TEST_CASE("tcp store: with a key only clients that prove it are served", "[bootstrap][tcp][auth]") {
  const AuthKey key = randomAuthKey();
  auto srv = TcpStoreServer::start("127.0.0.1", 0, 0x77, key);
  REQUIRE(srv.isOk());
  auto& server = srv.value();
  auto connectWith = [&](const AuthKey& k, uint64_t nonce = 0x77) {
    return TcpStoreClient::connect("127.0.0.1", server->port(), nonce, Deadline::after(5),
                                   TcpStoreClient::kDefaultOpTimeoutSec, k);
  };
  auto good = connectWith(key);
  INFO(good.status().toString());
  REQUIRE(good.isOk());
  checkGoodClient(*good.value(), 0);

  SECTION("a wrong key is refused at once, the store logs it, the job's keys are untouched") {
    auto t0 = std::chrono::steady_clock::now();
    auto bad = connectWith(randomAuthKey());
    REQUIRE_FALSE(bad.isOk());
    // The client finds out first: the store cannot prove this client's key.
    CHECK(bad.status().message().find("authentication failed") != std::string::npos);
    CHECK(bad.status().message().find("127.0.0.1:" + std::to_string(server->port())) != std::string::npos);
    CHECK(secondsSince(t0) < 1.0);
  }
  SECTION("no key is refused with a message saying the job has one") {
    const auto before = server->stats().rejected;
    auto none = connectWith(AuthKey{});
    REQUIRE_FALSE(none.isOk());
    CHECK(none.status().message().find("authentication failed") != std::string::npos);
    CHECK(none.status().message().find("BRAID_AUTH_KEY") != std::string::npos);
    CHECK(server->stats().rejected == before + 1);
  }
  SECTION("a client that answers the challenge with a wrong proof is refused and closed") {
    const auto before = server->stats().rejected;
    RawSocket s(server->port());
    proto::Reply ch = sendKeyedHello(s, 0x77);
    REQUIRE(ch.op == proto::Op::kChallenge);
    // Replaying the store's own proof as the client's must not work (labels differ).
    proto::Request auth;
    auth.op = proto::Op::kAuth;
    auth.proof = ch.proof;
    std::string out;
    REQUIRE(proto::encodeRequest(auth, &out).isOk());
    REQUIRE(s.send(out));
    proto::Reply no = readReply(s);
    CHECK(no.op == proto::Op::kError);
    CHECK(no.message.find("authentication failed") != std::string::npos);
    CHECK(s.closedByPeer(2000));
    CHECK(server->stats().rejected == before + 1);
  }
  SECTION("requests before the proof close the connection and change nothing") {
    for (proto::Op op : {proto::Op::kSet, proto::Op::kAdd, proto::Op::kDelete}) {
      RawSocket s(server->port());
      REQUIRE(sendKeyedHello(s, 0x77).op == proto::Op::kChallenge);
      std::string out;
      proto::Request req;
      req.op = op;
      req.keys = {"good/0"};  // checkGoodClient's key
      req.value = "forged";
      req.delta = 1000;
      out.clear();
      REQUIRE(proto::encodeRequest(req, &out).isOk());
      REQUIRE(s.send(out));
      CHECK(s.closedByPeer(2000));
    }
    auto v = good.value()->get("good/0", Deadline::after(2));
    REQUIRE(v.isOk());
    CHECK(v.value() == "ok");
    // A stranger that skips the challenge altogether is refused as well.
    RawSocket s(server->port());
    REQUIRE(s.send(helloFrame(0x77)));
    CHECK(readReply(s).op == proto::Op::kError);
    CHECK(s.closedByPeer(2000));
  }
  SECTION("a client with a key refuses a store without one (or a stranger posing as it)") {
    auto open = startServer(0x77);
    auto c = TcpStoreClient::connect("127.0.0.1", open->port(), 0x77, Deadline::after(5),
                                     TcpStoreClient::kDefaultOpTimeoutSec, key);
    REQUIRE_FALSE(c.isOk());
    CHECK(c.status().message().find("authentication failed") != std::string::npos);
    CHECK(c.status().message().find("does not ask for the job's key") != std::string::npos);
  }
  SECTION("the nonce is still checked, before the key") {
    auto other = connectWith(key, 0x78);
    REQUIRE_FALSE(other.isOk());
    CHECK(other.status().message().find("different job") != std::string::npos);
  }
  // Whatever the strangers did, the job's client and its keys are as they were.
  checkGoodClient(*good.value(), 1);
  auto late = connectWith(key);
  REQUIRE(late.isOk());
  checkGoodClient(*late.value(), 2);
}

// One address flooding the store loses its own oldest connections, not anyone else's; a
// client that proves itself in time is served throughout.
TEST_CASE("tcp store: connections not admitted yet are capped per source address", "[bootstrap][tcp][auth]") {
  setenv("BRAID_STORE_MAX_PENDING_PER_SOURCE", "4", 1);
  auto server = startServer();
  unsetenv("BRAID_STORE_MAX_PENDING_PER_SOURCE");
  auto good = connectTo(server->port());
  // The first three go for the last three; four idle ones and the good client remain.
  std::vector<std::unique_ptr<RawSocket>> idle;
  idleFlood(*server, 7, 3, 5, &idle);
  checkGoodClient(*good, 0);
  auto late = connectTo(server->port());
  checkGoodClient(*late, 1);
  setenv("BRAID_STORE_MAX_PENDING_PER_SOURCE", "0", 1);
  auto bad = TcpStoreServer::start("127.0.0.1", 0, 0);
  unsetenv("BRAID_STORE_MAX_PENDING_PER_SOURCE");
  CHECK(bad.status().message().find("BRAID_STORE_MAX_PENDING_PER_SOURCE") != std::string::npos);
}

// BRAID_TLS=1: an admitted connection continues over TLS; requests and replies of every size
// work, a tap on the path reads none of them, and a client that does not speak TLS to a TLS
// store (or the reverse) fails with a message.
TEST_CASE("tcp store: with BRAID_TLS requests and replies go over TLS", "[bootstrap][tcp][auth][tls]") {
  if (!tlsAvailable()) {
    WARN("skipped: built without OpenSSL");
    return;
  }
  const AuthKey key = randomAuthKey();
  auto srv = TcpStoreServer::start("127.0.0.1", 0, 0x77, key, /*tls=*/true);
  REQUIRE(srv.isOk());
  auto& server = srv.value();
  braid::testing::Wiretap tap(braid::testing::Wiretap::loopback(server->port()));
  REQUIRE(tap.ok());
  auto c = TcpStoreClient::connect("127.0.0.1", tap.port(), 0x77, Deadline::after(5),
                                   TcpStoreClient::kDefaultOpTimeoutSec, key, /*tls=*/true);
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  const std::string secret = "BRAID-STORE-SECRET-VALUE";
  std::string big;
  while (big.size() < (3u << 20)) big += secret;  // several TLS records and socket buffers
  REQUIRE(c.value()->set("small", secret).isOk());
  REQUIRE(c.value()->set("big", big).isOk());
  // 3 MiB through TLS and the tap: seconds where the test runs in an emulated kernel on a
  // busy host (the kernel-TLS suite), so the deadline leaves room for that.
  auto v = c.value()->get("big", Deadline::after(60));
  INFO(v.status().toString());
  REQUIRE(v.isOk());
  CHECK(v.value() == big);
  auto n = c.value()->add("counter", 5);
  REQUIRE(n.isOk());
  CHECK(n.value() == 5);
  // A parked GET, answered when another TLS client sets the key.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto other = TcpStoreClient::connect("127.0.0.1", server->port(), 0x77, Deadline::after(5),
                                         TcpStoreClient::kDefaultOpTimeoutSec, key, true);
    if (other.isOk()) (void)other.value()->set("late", "here");
  });
  auto late = c.value()->get("late", Deadline::after(5));
  setter.join();
  REQUIRE(late.isOk());
  CHECK(late.value() == "here");
  CHECK(tap.seen().size() > big.size());
  CHECK(tap.seen().find(secret) == std::string::npos);

  // A client without TLS is refused at its first request; one with TLS facing a store
  // without it fails at connect, naming BRAID_TLS.
  auto plain = TcpStoreClient::connect("127.0.0.1", server->port(), 0x77, Deadline::after(5),
                                       TcpStoreClient::kDefaultOpTimeoutSec, key, /*tls=*/false);
  REQUIRE(plain.isOk());
  CHECK_FALSE(plain.value()->set("x", "y").isOk());
  auto plainServer = TcpStoreServer::start("127.0.0.1", 0, 0x77, key, /*tls=*/false);
  REQUIRE(plainServer.isOk());
  auto mismatch = TcpStoreClient::connect("127.0.0.1", plainServer.value()->port(), 0x77, Deadline::after(5),
                                          TcpStoreClient::kDefaultOpTimeoutSec, key, /*tls=*/true);
  REQUIRE_FALSE(mismatch.isOk());
  CHECK(mismatch.status().message().find("BRAID_TLS") != std::string::npos);
  CHECK(TcpStoreServer::start("127.0.0.1", 0, 0, AuthKey{}, true).status().message().find("key") != std::string::npos);
}

// A store that takes either (served by a rank whose own BRAID_TLS was refused, only so the
// others read why it fails): a TLS client goes on over TLS, which a tap cannot read, and a
// plaintext one in plaintext, both on the same keys; the key is still proved by both.
TEST_CASE("tcp store: a store with optional TLS serves TLS and plaintext clients alike", "[bootstrap][tcp][auth][tls]") {
  if (!tlsAvailable()) {
    WARN("skipped: built without OpenSSL");
    return;
  }
  const AuthKey key = randomAuthKey();
  auto srv = TcpStoreServer::start("127.0.0.1", 0, 0x78, key, /*tls=*/true, /*standby=*/false, /*tlsOptional=*/true);
  REQUIRE(srv.isOk());
  auto& server = srv.value();
  braid::testing::Wiretap tap(braid::testing::Wiretap::loopback(server->port()));
  REQUIRE(tap.ok());
  auto secure = TcpStoreClient::connect("127.0.0.1", tap.port(), 0x78, Deadline::after(5),
                                        TcpStoreClient::kDefaultOpTimeoutSec, key, /*tls=*/true);
  INFO(secure.status().toString());
  REQUIRE(secure.isOk());
  auto plain = TcpStoreClient::connect("127.0.0.1", server->port(), 0x78, Deadline::after(5),
                                       TcpStoreClient::kDefaultOpTimeoutSec, key, /*tls=*/false);
  REQUIRE(plain.isOk());
  const std::string secret = "BRAID-OPTIONAL-TLS-SECRET";
  REQUIRE(secure.value()->set("from-tls", secret).isOk());
  REQUIRE(plain.value()->set("from-plain", "p").isOk());
  auto a = plain.value()->get("from-tls", Deadline::after(5));
  REQUIRE(a.isOk());
  CHECK(a.value() == secret);
  auto b = secure.value()->get("from-plain", Deadline::after(5));
  REQUIRE(b.isOk());
  CHECK(b.value() == "p");
  CHECK(tap.seen().find(secret) == std::string::npos);
  // Without the key neither gets in.
  auto stranger = TcpStoreClient::connect("127.0.0.1", server->port(), 0x78, Deadline::after(5),
                                          TcpStoreClient::kDefaultOpTimeoutSec, randomAuthKey(), /*tls=*/false);
  CHECK_FALSE(stranger.isOk());
}

// Store-side liveness: a key a client asked to be set when it is gone is set the moment its
// connection ends however it ends (a client object destroyed, a socket reset, a violation),
// wakes waiters, and is not set after the client withdrew it.
TEST_CASE("tcp store: SET_ON_CLOSE sets its key when the connection ends, unless cancelled", "[bootstrap][tcp]") {
  auto server = startServer();
  auto watcher = connectTo(server->port());

  SECTION("a client that goes away") {
    auto a = connectTo(server->port());
    REQUIRE(a->setOnClose("job/gone/3", "1").isOk());
    REQUIRE(a->setOnClose("job/gone/3", "dead").isOk());  // a second call replaces the value
    CHECK_FALSE(watcher->check({"job/gone/3"}).value());
    auto t0 = std::chrono::steady_clock::now();
    std::thread waiter([&] {
      auto v = watcher->get("job/gone/3", Deadline::after(10));
      REQUIRE(v.isOk());
      CHECK(v.value() == "dead");
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a.reset();  // the connection closes
    waiter.join();
    CHECK(secondsSince(t0) < 2);
  }
  SECTION("withdrawn before leaving") {
    auto a = connectTo(server->port());
    REQUIRE(a->setOnClose("job/gone/1", "1").isOk());
    auto had = a->cancelOnClose("job/gone/1");
    REQUIRE(had.isOk());
    CHECK(had.value());
    CHECK_FALSE(a->cancelOnClose("job/gone/1").value());
    REQUIRE(a->setOnClose("job/gone/other", "1").isOk());  // a marker that does fire
    a.reset();
    REQUIRE(watcher->get("job/gone/other", Deadline::after(5)).isOk());
    CHECK_FALSE(watcher->check({"job/gone/1"}).value());
  }
  SECTION("a raw connection reset, and one closed for a protocol violation") {
    {
      RawSocket s(server->port());
      REQUIRE(s.send(helloFrame()));
      CHECK(readReply(s).op == proto::Op::kOk);
      proto::Request r;
      r.op = proto::Op::kSetOnClose;
      r.keys = {"raw/gone"};
      r.value = "x";
      std::string bytes;
      REQUIRE(proto::encodeRequest(r, &bytes).isOk());
      REQUIRE(s.send(bytes));
      CHECK(readReply(s).op == proto::Op::kOk);
      REQUIRE(s.send(rawHeader(0xdeadbeef, 1, 2, 0)));  // bad magic: the store hangs up
    }
    auto v = watcher->get("raw/gone", Deadline::after(5));
    REQUIRE(v.isOk());
    CHECK(v.value() == "x");
  }
  SECTION("one connection holds a bounded number") {
    auto a = connectTo(server->port());
    for (int i = 0; i < 1024; ++i) REQUIRE(a->setOnClose("k/" + std::to_string(i), "1").isOk());
    Status over = a->setOnClose("k/one-too-many", "1");
    CHECK(over.code() == Code::kInvalidArgument);
    CHECK(over.message().find("at most 1024") != std::string::npos);
    REQUIRE(a->setOnClose("k/7", "again").isOk());  // replacing one is not another
    a.reset();
    REQUIRE(watcher->wait({"k/0", "k/1023"}, Deadline::after(5)).isOk());
    CHECK(watcher->get("k/7", Deadline::after(1)).value() == "again");
    CHECK_FALSE(watcher->check({"k/one-too-many"}).value());
  }
}

// A standby store (rank 1's, where rank 0 serves the job's store): it copies every key when
// named, takes each write before the client that made it is answered, answers nobody else
// while the store it stands by for is there, and serves when that store is gone. Clients
// that know of it go there with their SET_ON_CLOSE keys and the request they were making.
TEST_CASE("tcp store: a standby takes over, with every acknowledged write, when the store is gone", "[bootstrap][tcp]") {
  auto primary = startServer(77);
  auto sb = TcpStoreServer::start("127.0.0.1", 0, 77, AuthKey{}, false, true);
  REQUIRE(sb.isOk());
  std::unique_ptr<TcpStoreServer> standby = std::move(sb).value();
  auto a = connectTo(primary->port(), 77);
  auto b = connectTo(primary->port(), 77);
  // The serving process's own client: its marks take effect when the standby takes over.
  auto host = connectTo(primary->port(), 77);
  primary->setLocalClient(host->clientId());
  REQUIRE(host->add("live", 3).value() == 3);
  REQUIRE(host->addOnClose("live", -1).isOk());
  REQUIRE(host->setOnClose("gone/0", "1").isOk());
  REQUIRE(a->set("before", "copied").isOk());
  REQUIRE(a->add("n", 5).value() == 5);
  REQUIRE(a->set(braid::bootstrap::kStandbyKey, "127.0.0.1:" + std::to_string(standby->port())).isOk());
  CHECK(primary->stats().mirrored);
  REQUIRE(a->set("k", "v").isOk());
  REQUIRE(b->add("n", 2).value() == 7);
  REQUIRE(a->compareSet("c", "", "first").value() == "first");
  REQUIRE(a->set("gone-soon", "x").isOk());
  REQUIRE(a->deleteKey("gone-soon").value());
  REQUIRE(b->setOnClose("gone/b", "1").isOk());
  REQUIRE(b->setOnClose("gone/b2", "1").isOk());
  REQUIRE(b->cancelOnClose("gone/b2").value());

  // While the store is there the standby serves nobody but it.
  auto early = connectTo(standby->port(), 77);
  Status refused = early->get("k", Deadline::after(1)).status();
  CHECK(refused.code() == braid::Code::kInProgress);
  early.reset();

  for (auto* c : {a.get(), b.get()}) c->setStandby("127.0.0.1", standby->port());
  {
    std::string h;
    int p = 0;
    CHECK_FALSE(a->servingStandby(&h, &p));
  }
  // b waits on the store for a key nobody has set yet when the store goes.
  std::thread waiter([&] {
    auto v = b->get("later", Deadline::after(10));
    INFO(v.status().toString());
    REQUIRE(v.isOk());
    CHECK(v.value() == "set on the standby");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = std::chrono::steady_clock::now();
  primary.reset();  // its process is gone: every connection closes
  CHECK(a->get("k", Deadline::after(5)).value() == "v");
  CHECK(secondsSince(t0) < 2);
  CHECK(standby->stats().promoted);
  std::string standbyHost;
  int port = 0;
  REQUIRE(a->servingStandby(&standbyHost, &port));  // where a grow id sends new processes now
  CHECK(port == standby->port());
  CHECK(a->get("before", Deadline::after(1)).value() == "copied");
  CHECK(a->get("gone/0", Deadline::after(2)).value() == "1");
  CHECK(a->get("live", Deadline::after(1)).value() == "2");
  CHECK(a->add("n", 1).value() == 8);
  CHECK(a->compareSet("c", "", "second").value() == "first");
  CHECK_FALSE(a->check({"gone-soon"}).value());
  REQUIRE(a->set("later", "set on the standby").isOk());
  waiter.join();
  // b's SET_ON_CLOSE went over with it: b's end sets gone/b, not the withdrawn gone/b2.
  CHECK_FALSE(a->check({"gone/b"}).value());
  b.reset();
  CHECK(a->get("gone/b", Deadline::after(5)).value() == "1");
  CHECK_FALSE(a->check({"gone/b2"}).value());
  // A new client reaches the standby directly now that it serves.
  auto c = connectTo(standby->port(), 77);
  CHECK(c->get("k", Deadline::after(1)).value() == "v");
}

// The serving loop of one side runs in a child process, so that it can be stopped
// (SIGSTOP) and continued; the child is killed when the test ends.
struct ChildStore {
  pid_t pid = -1;
  ~ChildStore() {
    if (pid > 0) {
      kill(pid, SIGCONT);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Reads an int from a pipe within `sec` seconds; 0 if none came.
int readInt(int fd, double sec) {
  pollfd p{fd, POLLIN, 0};
  int v = 0;
  if (poll(&p, 1, static_cast<int>(sec * 1000)) == 1 && read(fd, &v, sizeof(v)) == sizeof(v)) return v;
  return 0;
}

// kill() only queues SIGSTOP: on a loaded machine the child may serve a request or two before
// it stops. Returns once it has.
static void waitStopped(pid_t pid) {
  int st = 0;
  REQUIRE(waitpid(pid, &st, WUNTRACED) == pid);
  REQUIRE(WIFSTOPPED(st));
}

// A stopped store keeps its connections open, so nobody sees it go. Its standby takes over
// once it has sent nothing for the silence the standby allows, and a client whose request
// has waited asks the standby and goes there. Continued, the store finds its standby serving
// before it answers anything, and closes every connection, so that an idle client that knew
// nothing of this reads the standby's values, not the store's stale ones.
TEST_CASE("tcp store: a standby takes over from a stopped store, which stands aside when continued",
          "[bootstrap][tcp]") {
  // Plain, and with the job's key over TLS (the questions to the standby prove it too).
  const bool secure = GENERATE(false, true);
  if (secure && !tlsAvailable()) {
    WARN("skipped with TLS: built without OpenSSL");
    return;
  }
  const AuthKey key = secure ? randomAuthKey() : AuthKey{};
  int toParent[2];
  REQUIRE(pipe(toParent) == 0);
  ChildStore child;
  child.pid = fork();
  REQUIRE(child.pid >= 0);
  if (child.pid == 0) {
    auto srv = TcpStoreServer::start("127.0.0.1", 0, 91, key, secure);
    int port = srv.isOk() ? srv.value()->port() : -1;
    (void)!write(toParent[1], &port, sizeof(port));
    for (;;) pause();
  }
  const int primaryPort = readInt(toParent[0], 10);
  REQUIRE(primaryPort > 0);
  auto sb = TcpStoreServer::start("127.0.0.1", 0, 91, key, secure, true);
  REQUIRE(sb.isOk());
  std::unique_ptr<TcpStoreServer> standby = std::move(sb).value();
  standby->standFor("127.0.0.1", primaryPort, 2.0);  // 2 s: a busy machine stalls nobody that long
  auto connect = [&] {
    auto c = TcpStoreClient::connect("127.0.0.1", primaryPort, 91, Deadline::after(5), 30, key, secure);
    INFO(c.status().toString());
    REQUIRE(c.isOk());
    return std::move(c).value();
  };
  auto a = connect();
  auto b = connect();
  auto idle = connect();
  REQUIRE(a->set(kStandbyKey, "127.0.0.1:" + std::to_string(standby->port())).isOk());
  a->setStandby("127.0.0.1", standby->port(), 2.0);
  b->setStandby("127.0.0.1", standby->port(), 2.0);
  idle->setStandby("127.0.0.1", standby->port());  // asks nobody early: only a lost connection moves it
  REQUIRE(a->set("k", "before").isOk());
  // A store that has nothing to write still tells its standby it is there.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  CHECK_FALSE(standby->stats().promoted);
  CHECK(idle->get("k", Deadline::after(2)).value() == "before");

  REQUIRE(kill(child.pid, SIGSTOP) == 0);
  waitStopped(child.pid);
  auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    auto v = b->get("later", Deadline::after(10));  // parked at the stopped store
    INFO(v.status().toString());
    REQUIRE(v.isOk());
    CHECK(v.value() == "set on the standby");
  });
  // Its deadline passes before the standby takes over: it waits for that all the same.
  Status s = a->set("k", "after", Deadline::after(0.3));
  INFO(s.toString());
  REQUIRE(s.isOk());
  const double took = secondsSince(t0);
  CHECK(took > 1.7);  // the silence, less the heartbeat before the stop
  CHECK(took < 6);
  CHECK(standby->stats().promoted);
  REQUIRE(a->set("later", "set on the standby").isOk());
  waiter.join();

  REQUIRE(kill(child.pid, SIGCONT) == 0);
  auto v = idle->get("k", Deadline::after(5));
  INFO(v.status().toString());
  REQUIRE(v.isOk());
  CHECK(v.value() == "after");
  std::string h;
  int p = 0;
  CHECK(idle->servingStandby(&h, &p));
  // And it no longer listens.
  auto gone = TcpStoreClient::probe("127.0.0.1", primaryPort, 91, key, secure, 1);
  CHECK_FALSE(gone.isOk());
}

// The store drops a standby that does not take a write in time (stopped: the store waits 5 s)
// and serves on. Continued, the standby sees its connection ended, finds the store still
// answering, and stands down instead of taking over: it never serves.
TEST_CASE("tcp store: a standby the store dropped stands down, and never serves", "[bootstrap][tcp]") {
  int toParent[2], toChild[2];
  REQUIRE(pipe(toParent) == 0);
  REQUIRE(pipe(toChild) == 0);
  ChildStore child;
  child.pid = fork();
  REQUIRE(child.pid >= 0);
  if (child.pid == 0) {
    const int storePort = readInt(toChild[0], 10);
    auto srv = TcpStoreServer::start("127.0.0.1", 0, 92, AuthKey{}, false, true);
    if (srv.isOk()) srv.value()->standFor("127.0.0.1", storePort, 30);
    int port = srv.isOk() ? srv.value()->port() : -1;
    (void)!write(toParent[1], &port, sizeof(port));
    for (;;) pause();
  }
  // Forked first: a process with threads forks a child that cannot start its own.
  auto primary = startServer(92);
  const int storePort = primary->port();
  REQUIRE(write(toChild[1], &storePort, sizeof(storePort)) == sizeof(storePort));
  const int standbyPort = readInt(toParent[0], 10);
  REQUIRE(standbyPort > 0);
  auto a = connectTo(primary->port(), 92);
  REQUIRE(a->set(kStandbyKey, "127.0.0.1:" + std::to_string(standbyPort)).isOk());
  CHECK(primary->stats().mirrored);
  a->setStandby("127.0.0.1", standbyPort, 1.0);

  REQUIRE(a->set("k0", "before").isOk());
  REQUIRE(kill(child.pid, SIGSTOP) == 0);
  waitStopped(child.pid);
  // Its heartbeats are not waited for: reads are answered at once while it is stopped.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto t0 = std::chrono::steady_clock::now();
  CHECK(a->get("k0", Deadline::after(5)).value() == "before");
  CHECK(secondsSince(t0) < 0.5);
  t0 = std::chrono::steady_clock::now();
  REQUIRE(a->set("k", "v", Deadline::after(20)).isOk());  // the mirror's 5 s, then without it
  CHECK(secondsSince(t0) > 4);
  CHECK_FALSE(primary->stats().mirrored);
  REQUIRE(kill(child.pid, SIGCONT) == 0);
  // Stood down, it stops listening; it never says it serves.
  bool served = false, closed = false;
  for (int i = 0; i < 50 && !closed; ++i) {
    auto there = TcpStoreClient::probe("127.0.0.1", standbyPort, 92, AuthKey{}, false, 1);
    served = served || (there.isOk() && there.value());
    closed = !there.isOk();
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(closed);
  CHECK_FALSE(served);
  CHECK(a->get("k", Deadline::after(2)).value() == "v");
}

TEST_CASE("tcp store: without its standby a store serves on, a standby nobody named never serves", "[bootstrap][tcp]") {
  auto primary = startServer();
  auto sb = TcpStoreServer::start("127.0.0.1", 0, 0, AuthKey{}, false, true);
  REQUIRE(sb.isOk());
  std::unique_ptr<TcpStoreServer> standby = std::move(sb).value();
  auto a = connectTo(primary->port());
  SECTION("the standby goes first") {
    REQUIRE(a->set(braid::bootstrap::kStandbyKey, "127.0.0.1:" + std::to_string(standby->port())).isOk());
    CHECK(primary->stats().mirrored);
    standby.reset();
    REQUIRE(a->set("k", "v").isOk());  // the mirror fails; the store goes on without one
    CHECK_FALSE(primary->stats().mirrored);
    CHECK(a->get("k", Deadline::after(1)).value() == "v");
  }
  SECTION("a standby that was never named") {
    a->setStandby("127.0.0.1", standby->port());
    primary.reset();
    auto t0 = std::chrono::steady_clock::now();
    Status s = a->set("k", "v", Deadline::after(1));
    CHECK(s.code() == braid::Code::kRemoteError);
    CHECK(s.message().find("did not take over") != std::string::npos);
    CHECK(secondsSince(t0) < 3);
    CHECK_FALSE(standby->stats().promoted);
  }
  SECTION("both gone: the client says so at once, even without a deadline") {
    REQUIRE(a->set(braid::bootstrap::kStandbyKey, "127.0.0.1:" + std::to_string(standby->port())).isOk());
    a->setStandby("127.0.0.1", standby->port());
    standby.reset();
    primary.reset();
    auto t0 = std::chrono::steady_clock::now();
    auto v = a->get("k", Deadline());
    CHECK(v.status().code() == braid::Code::kRemoteError);
    CHECK(v.status().message().find("gone too") != std::string::npos);
    CHECK(secondsSince(t0) < 2);
  }
  SECTION("a name that is no host:port") {
    REQUIRE(a->set(braid::bootstrap::kStandbyKey, "nowhere").isOk());
    CHECK_FALSE(primary->stats().mirrored);
    REQUIRE(a->set("k", "v").isOk());
  }
}

// A standby that is stopped accepts connections (its kernel does) and answers nothing: the
// questions a slow request asks it must not hold the store's answer once that has come. A
// socket that listens and never accepts stands in for it.
TEST_CASE("tcp store: a stopped standby does not hold the store's answer", "[bootstrap][tcp]") {
  auto server = startServer();
  int mute = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(mute >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  REQUIRE(bind(mute, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  REQUIRE(listen(mute, 64) == 0);
  REQUIRE(getsockname(mute, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  auto waiter = connectTo(server->port());
  auto setter = connectTo(server->port());
  // Asked after 0.25 s without an answer; each question may take 2 s.
  waiter->setStandby("127.0.0.1", ntohs(sa.sin_port), 1.0);
  for (double afterSec : {0.7, 1.6}) {
    INFO("answered after " << afterSec << " s");
    const std::string key = "k" + std::to_string(afterSec);
    Status set;
    std::thread later([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(afterSec * 1000)));
      set = setter->set(key, "v");
    });
    auto t0 = std::chrono::steady_clock::now();
    auto v = waiter->get(key, Deadline::after(8));
    const double took = secondsSince(t0);
    later.join();
    REQUIRE(set.isOk());
    INFO(v.status().toString());
    REQUIRE(v.isOk());
    CHECK(v.value() == "v");
    CHECK(took < afterSec + 0.4);
  }
  std::string h;
  int p = 0;
  CHECK_FALSE(waiter->servingStandby(&h, &p));
  close(mute);
}

// addOnClose: a counter the store adjusts when the connection ends (a process's sessions,
// taken off the job's live count when it dies); calls add up, and a sum of 0 withdraws it.
TEST_CASE("tcp store: addOnClose adds the sum when the connection ends", "[bootstrap][tcp]") {
  auto server = startServer();
  auto watcher = connectTo(server->port());
  REQUIRE(watcher->add("live", 10).value() == 10);
  auto x = connectTo(server->port());
  auto y = connectTo(server->port());
  REQUIRE(x->addOnClose("live", -1).isOk());
  REQUIRE(x->addOnClose("live", -2).isOk());
  REQUIRE(y->addOnClose("live", -1).isOk());
  REQUIRE(y->addOnClose("live", +1).isOk());  // back to 0: nothing at the close
  REQUIRE(x->setOnClose("gone/x", "1").isOk());
  x.reset();
  REQUIRE(watcher->get("gone/x", Deadline::after(5)).isOk());
  CHECK(watcher->get("live", Deadline::after(1)).value() == "7");
  y.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(watcher->get("live", Deadline::after(1)).value() == "7");
}

// FENCE (a shrink's survivors, on a rank they gave up on that may still be alive): the
// client's connections end as they would at its death, SET_ON_CLOSE and addOnClose entries
// included, and it is refused from then on with the reason, by the standby too (the fence is
// mirrored). A client never fences itself; the others go on.
TEST_CASE("tcp store: FENCE ends a client's connections as its death would, and refuses it after", "[bootstrap][tcp]") {
  auto primary = startServer(77);
  auto sb = TcpStoreServer::start("127.0.0.1", 0, 77, AuthKey{}, false, true);
  REQUIRE(sb.isOk());
  std::unique_ptr<TcpStoreServer> standby = std::move(sb).value();
  auto watcher = connectTo(primary->port(), 77);
  auto x = connectTo(primary->port(), 77);
  auto y = connectTo(primary->port(), 77);
  REQUIRE(watcher->set(braid::bootstrap::kStandbyKey, "127.0.0.1:" + std::to_string(standby->port())).isOk());
  REQUIRE(watcher->add("live", 10).value() == 10);
  REQUIRE(x->addOnClose("live", -3).isOk());
  REQUIRE(x->setOnClose("gone/x", "1").isOk());
  x->setStandby("127.0.0.1", standby->port());

  auto none = y->fence({y->clientId(), 0}, "not me");
  REQUIRE(none.isOk());
  CHECK(none.value() == 0);
  CHECK(y->set("y/still", "1").isOk());

  const uint64_t xid = x->clientId();
  auto closed = y->fence({xid}, "rank 2 was left out");
  REQUIRE(closed.isOk());
  CHECK(closed.value() == 1);
  CHECK(watcher->get("gone/x", Deadline::after(5)).value() == "1");
  CHECK(watcher->get("live", Deadline::after(1)).value() == "7");
  // The fenced client reads the reason, then finds its standby refuses it too.
  Status first = x->get("anything", Deadline::after(3)).status();
  CHECK(first.code() == braid::Code::kAborted);
  CHECK(first.message().find("rank 2 was left out") != std::string::npos);
  Status later = x->set("k", "v", Deadline::after(3));
  CHECK_FALSE(later.isOk());
  CHECK(later.message().find("rank 2 was left out") != std::string::npos);
  CHECK_FALSE(watcher->check({"k"}).value());
  // Coming back under the same id is refused; a new client (a new id) is not.
  RawSocket s(primary->port());
  proto::Request hello;
  hello.op = proto::Op::kHello;
  hello.nonce = 77;
  hello.clientId = xid;
  std::string bytes;
  REQUIRE(proto::encodeRequest(hello, &bytes).isOk());
  REQUIRE(s.send(bytes));
  auto refused = readReply(s);
  CHECK(refused.op == proto::Op::kError);
  CHECK(refused.message == std::string(braid::bootstrap::kShutOut) + "rank 2 was left out");
  auto fresh = connectTo(primary->port(), 77);
  CHECK(fresh->get("y/still", Deadline::after(1)).value() == "1");
  CHECK(y->add("live", 0).value() == 7);
}

// A client that dies while the store is lost (rank 0 stopped, or gone, at the same moment)
// never reaches the standby, which so never sees its connection end: its SET_ON_CLOSE and
// addOnClose keys are mirrored there as records, and a FENCE of it (the survivors' shrink)
// sets them, once.
TEST_CASE("tcp store: FENCE at the standby that took over sets the keys of a client lost with the store",
          "[bootstrap][tcp]") {
  auto primary = startServer(77);
  auto sb = TcpStoreServer::start("127.0.0.1", 0, 77, AuthKey{}, false, true);
  REQUIRE(sb.isOk());
  std::unique_ptr<TcpStoreServer> standby = std::move(sb).value();
  auto a = connectTo(primary->port(), 77);
  auto b = connectTo(primary->port(), 77);  // knows no standby: it goes with the store
  REQUIRE(a->set(braid::bootstrap::kStandbyKey, "127.0.0.1:" + std::to_string(standby->port())).isOk());
  a->setStandby("127.0.0.1", standby->port());
  REQUIRE(a->add("live", 5).value() == 5);
  REQUIRE(b->addOnClose("live", -2).isOk());
  REQUIRE(b->setOnClose("gone/b", "1").isOk());
  REQUIRE(b->setOnClose("gone/b2", "1").isOk());
  REQUIRE(b->cancelOnClose("gone/b2").value());
  const uint64_t bid = b->clientId();
  primary.reset();  // the store stops: it sets nobody's keys
  b.reset();        // and b dies meanwhile
  CHECK(a->get("live", Deadline::after(5)).value() == "5");
  CHECK(standby->stats().promoted);
  CHECK_FALSE(a->check({"gone/b"}).value());
  auto closed = a->fence({bid}, "rank 2 was left out");
  REQUIRE(closed.isOk());
  CHECK(closed.value() == 0);  // no connection of b's here
  CHECK(a->get("gone/b", Deadline::after(5)).value() == "1");
  CHECK(a->get("live", Deadline::after(1)).value() == "3");
  CHECK_FALSE(a->check({"gone/b2"}).value());  // withdrawn before
  REQUIRE(a->fence({bid}, "again").isOk());
  CHECK(a->add("live", 0).value() == 3);  // once
}

// An ADD carries its client's request number; asked again (of a standby, after the store
// that counted it was lost with its reply), it answers what it answered, adding nothing.
TEST_CASE("tcp store: a numbered ADD asked twice is counted once", "[bootstrap][tcp]") {
  auto server = startServer();
  RawSocket s(server->port());
  proto::Request hello;
  hello.op = proto::Op::kHello;
  hello.clientId = 0xfeedULL;
  std::string bytes;
  REQUIRE(proto::encodeRequest(hello, &bytes).isOk());
  REQUIRE(s.send(bytes));
  CHECK(readReply(s).op == proto::Op::kOk);
  auto add = [&](uint64_t number, int64_t delta) {
    proto::Request r;
    r.op = proto::Op::kAdd;
    r.keys = {"n"};
    r.delta = delta;
    r.requestNumber = number;
    std::string b;
    REQUIRE(proto::encodeRequest(r, &b).isOk());
    REQUIRE(s.send(b));
    auto rep = readReply(s);
    REQUIRE(rep.op == proto::Op::kInt);
    return rep.number;
  };
  CHECK(add(1, 5) == 5);
  CHECK(add(1, 5) == 5);  // the same request again
  CHECK(add(2, 5) == 10);
  CHECK(add(0, 1) == 11);  // unnumbered: always counted
  CHECK(add(0, 1) == 12);
  auto c = connectTo(server->port());
  CHECK(c->get("n", Deadline::after(1)).value() == "12");
}

// A numbered add reaches the standby as one write (its record carries the counter's new
// value), so the standby never holds the record without the count or the count without the
// record; a standby named late gets the records first and the counters' current values after.
TEST_CASE("tcp store: a standby holds a numbered add's count and its record together", "[bootstrap][tcp]") {
  auto primary = startServer();
  auto a = connectTo(primary->port());
  auto b = connectTo(primary->port());
  REQUIRE(a->add("n", 5).value() == 5);  // numbered (a's first add)
  REQUIRE(b->add("n", 1).value() == 6);  // b's own number; the current count is 6
  auto sb = TcpStoreServer::start("127.0.0.1", 0, 0, AuthKey{}, false, true);
  REQUIRE(sb.isOk());
  std::unique_ptr<TcpStoreServer> standby = std::move(sb).value();
  REQUIRE(a->set(braid::bootstrap::kStandbyKey, "127.0.0.1:" + std::to_string(standby->port())).isOk());
  REQUIRE(a->add("n", 10).value() == 16);  // mirrored as a's record alone
  REQUIRE(a->add("m", 2).value() == 2);
  a->setStandby("127.0.0.1", standby->port());
  primary.reset();
  CHECK(a->get("n", Deadline::after(5)).value() == "16");
  CHECK(a->get("m", Deadline::after(1)).value() == "2");
  CHECK(a->add("n", 1).value() == 17);
}

// Every communicator of a process shares its one store connection. A get that waits in the
// store for a key (the stall records, a peer's published call, a vote) must not hold that
// connection for its whole wait: another thread's quick question, with a second to spare,
// would find its time gone before it was asked and call a live store stalled.
TEST_CASE("tcp store client: a long wait on the shared connection leaves others' requests quick", "[bootstrap][tcp]") {
  auto server = startServer();
  auto client = connectTo(server->port());
  REQUIRE(client->set("there", "1").isOk());
  std::atomic<bool> waiting{true};
  std::thread waiter([&] {
    auto t0 = std::chrono::steady_clock::now();
    auto v = client->get("never", Deadline::after(2.5));
    CHECK(v.status().code() == Code::kTimeout);
    CHECK(secondsSince(t0) > 2.3);  // the whole wait, in slices
    waiting = false;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 0; i < 5 && waiting; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto there = client->check({"there"}, Deadline::after(1.0));
    INFO(there.status().toString());
    CHECK(there.isOk());
    CHECK((there.isOk() && there.value()));
    CHECK(secondsSince(t0) < 0.5);
  }
  // A key set while another thread waits for it is seen by that wait.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(client->set("later", "x").isOk());
  });
  auto later = client->get("later", Deadline::after(3));
  INFO(later.status().toString());
  CHECK(later.isOk());
  setter.join();
  waiter.join();
}

#include "bootstrap/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "bootstrap/store_value.h"
#include "bootstrap/unique_id.h"
#include "common/log.h"
#include "common/random.h"
#include "common/tls.h"

namespace braid::bootstrap {

namespace {

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr uint64_t kFirstConnId = 2;
constexpr size_t kReadChunk = 64 * 1024;
// The first byte of a TLS handshake record (ContentType handshake, RFC 8446 section 5.1);
// a request frame starts with the magic's low byte instead.
constexpr unsigned char kTlsHandshakeRecord = 0x16;
static_assert((proto::kMagic & 0xff) != kTlsHandshakeRecord, "a frame must not look like a TLS record");
// A well-behaved client has one request in flight, so more than one frame's worth of
// unprocessed input or unsent output means it is pipelining without reading: cut it off
// before it costs the server unbounded memory.
constexpr size_t kMaxBufferedIn = proto::kHeaderBytes + proto::kMaxPayloadBytes + kReadChunk;
constexpr size_t kMaxBufferedOut = 2 * (proto::kHeaderBytes + size_t{proto::kMaxPayloadBytes});
// Until admitted (HELLO, and AUTH on a store with a key) a connection may send those frames
// and nothing more (a HELLO's payload is 24 bytes, 60 with a challenge, 72 with a challenge
// and a client id; an AUTH's 40): a larger frame is cut off at its header, so nobody makes
// the store buffer (or allocate) more than this per connection before it has proved it
// belongs to the job.
constexpr uint32_t kMaxHelloPayload = 80;
constexpr size_t kMaxPreHelloIn = proto::kHeaderBytes + kMaxHelloPayload;
// Connections not admitted yet: closed after BRAID_STORE_HELLO_SEC (default 10), and at most
// BRAID_STORE_MAX_PENDING (default 1024) at a time, the oldest dropped first, so idle
// connections cannot pile up.
constexpr double kDefaultHelloSec = 10;
constexpr int kDefaultMaxPending = 1024;
// Of those, at most BRAID_STORE_MAX_PENDING_PER_SOURCE (default 512) from one IPv4 address,
// the oldest of that address dropped first: a flood from one host cannot push out the
// connections of others. (Ranks of one host that connect in a burst stay far below it, and a
// client whose connection is dropped before the store answered it connects again.)
constexpr int kDefaultMaxPendingPerSource = 512;
// SET_ON_CLOSE entries one connection may hold (a communicator registers one; a process
// holds a few communicators): bounds the memory an admitted client can pin this way.
constexpr size_t kMaxOnClosePerConn = 1024;
// Server-side waits are capped so deadline arithmetic cannot overflow (about 11 days).
constexpr uint64_t kMaxWaitMs = 1000ull * 1000 * 1000;
// How long a client waits for the server's own TIMEOUT reply beyond the deadline it sent.
constexpr double kReplyGraceSec = 2.0;
// The longest one request for a few keys parks in the store (TcpStoreClient::parkedRoundTrip):
// what another thread's request on the same connection may have to wait for. A request for
// many keys (a large job's allGather) parks longer, up to 2 s, as allGather's own polls do,
// so that a job's waiting ranks do not flood the store with them.
constexpr double kParkSliceSec = 0.25;
constexpr double kParkSliceMaxSec = 2.0;
// A standby store's mirror: how long the store it stands by for waits for each write to be
// taken before it goes on without a standby (setStandbyWait changes it), and for a standby
// to be attached.
constexpr double kMirrorSec = 5.0;
// How long one probe (TcpStoreClient::probe) of a store or standby may take: a store that
// needs longer to admit a connection is stalled.
constexpr double kProbeSec = 2.0;
// How long a store whose standby ended their connection waits for it to answer (mirrorAnswered).
constexpr double kSupersedeProbeSec = 6.0;
// Keys the stores keep for themselves (braid's own keys are printable). A client's last
// numbered add: "<number> <value> <key>"; mirrored alone, it carries the counter's new
// value with it, so the standby never holds one without the other.
const std::string kDedupPrefix = std::string("\x01" "dedup\x01");
// The SET_ON_CLOSE keys of the hosting process's own client, mirrored to the standby: they
// take effect when the standby takes over (that process is gone then).
const std::string kHostOnClosePrefix = std::string("\x01" "onclose\x01");
// Every other client's SET_ON_CLOSE keys, mirrored to the standby too, one key each:
// "<prefix><client id>\x01<key>". A client that dies while the store is stopped (or at the
// moment it is lost) never reaches the standby, which so never sees its connection end; a
// FENCE of that client there (the survivors' shrink) sets its keys then.
const std::string kClientOnClosePrefix = std::string("\x01" "clientoc\x01");
// A client shut out by FENCE: the key holds the reason it is refused with. Mirrored as any
// key is, so that a standby refuses it too once it serves.
const std::string kFencedPrefix = std::string("\x01" "fenced\x01");

// What each side's proof of the job key is for (common/auth.h): the two never pass for
// each other.
constexpr std::string_view kServerLabel = "braid store server v1";
constexpr std::string_view kClientLabel = "braid store client v1";

std::string errnoText(int err) { return std::strerror(err); }

// Resolves an IPv4 address; "" and "0.0.0.0" mean any. Hostnames go through getaddrinfo.
Status resolveIpv4(const std::string& host, int port, bool passive, sockaddr_in* out) {
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    out->sin_addr.s_addr = htonl(INADDR_ANY);
    return Status::ok();
  }
  if (inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1) return Status::ok();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    return Status(Code::kSystemError, "cannot resolve host '" + host + "': " +
                                          (rc == EAI_SYSTEM ? errnoText(errno) : std::string(gai_strerror(rc))));
  }
  out->sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return Status::ok();
}

std::string peerName(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Server

struct TcpStoreServer::Impl {
  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;
    uint32_t source = 0;  // the peer's IPv4 address
    std::string in;  // received bytes; in[inOff..] not yet decoded
    size_t inOff = 0;
    std::string out;  // encoded replies; out[outOff..] not yet sent
    size_t outOff = 0;
    uint32_t events = 0;  // interest registered with epoll
    bool hello = false;      // admitted: HELLO accepted (and AUTH, on a store with a key)
    bool startTls = false;   // BRAID_TLS: switch to TLS once the admitting OK is sent
    bool sniffTls = false;   // tlsOptional: the client's next byte says whether it does
    std::unique_ptr<TlsStream> tls;  // BRAID_TLS: everything after admission goes through it
    std::string tlsBinding;
    bool challenged = false;  // keyed store: CHALLENGE sent, AUTH expected next
    std::string clientChallenge, serverChallenge;
    int64_t helloDueNs = 0;  // closed if not admitted by then
    bool closeAfterFlush = false;  // refused in HELLO: send the reason, then hang up
    bool dead = false;
    // A parked GET/WAIT/MULTI_GET: the request, the key it waits on now, its deadline.
    bool parked = false;
    proto::Request pending;
    std::string waitKey;
    int64_t deadlineNs = 0;  // 0 = none
    // SET_ON_CLOSE: key -> value, set when this connection ends.
    std::unordered_map<std::string, std::string> onClose;
    uint64_t clientId = 0;    // from HELLO: names the client's numbered adds
    bool mirrorSource = false;  // STANDBY: the store this one stands by for
  };

  std::string name;
  uint64_t expectedNonce = 0;
  AuthKey key;  // present: clients must prove it
  bool tls = false;  // BRAID_TLS: admitted connections continue over TLS keyed by `key`
  bool tlsOptional = false;  // with `tls`: a client that goes on in plaintext may (start())
  int listenFd = -1;
  int epollFd = -1;
  int wakeFd = -1;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> accepted{0}, open{0}, rejected{0}, requests{0};
  std::atomic<bool> mirrored{false}, promoted{false}, superseded{false}, stoodDown{false};  // for stats()

  // Everything below belongs to the serving thread.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::vector<uint64_t> graveyard;  // closed this iteration; freed at its end
  uint64_t nextId = kFirstConnId;
  std::unordered_map<std::string, std::string> data;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> waiters;  // key -> parked conns
  std::set<std::pair<int64_t, uint64_t>> deadlines;                      // (deadline, conn)
  std::deque<uint64_t> runnable;  // conns unparked: process their buffered input again
  // SET_ON_CLOSE entries of connections that ended, applied by the loop (not inside
  // closeConn, which runs in the middle of serving other connections).
  std::vector<std::pair<std::string, std::string>> dueOnClose;
  std::vector<std::string> onCloseFired;  // their copies (onCloseRecord), to drop
  bool listening = true;
  int64_t resumeListenNs = 0;
  // A standby store (start with `standby`): until the store it stands by for is gone it takes
  // writes from that store's connection only, and answers everyone else "not yet".
  bool standbyWaiting = false;
  // The id of the hosting process's own client (setLocalClient; 0: none).
  std::atomic<uint64_t> localClient{0};
  // The store this one mirrors its writes to (kStandbyKey names it); null: none.
  std::unique_ptr<TcpStoreClient> mirror;
  std::string mirrorAddress;
  std::string mirrorHost;
  int mirrorPort = 0;
  int64_t mirrorSeenNs = 0;  // the last write to the standby, or ping
  std::atomic<int64_t> standbyWaitNs{static_cast<int64_t>(kMirrorSec * 1e9)};  // setStandbyWait
  // A standby's store (standFor): its address and how long it may send nothing.
  std::mutex standForMu;
  std::string primaryHost;  // guarded by standForMu
  int primaryPort = 0;      // guarded by standForMu; 0: unknown
  int64_t silenceNs = 0;    // guarded by standForMu; 0: only a closed connection counts
  uint64_t sourceId = 0;    // the connection of the store this one stands by for
  int64_t sourceSeenNs = 0;  // its last request
  // That connection ended (or went silent): resolveSourceLoss decides, out of closeConn.
  bool sourceLost = false;
  bool sourceSilent = false;
  std::string sourceLostPeer, sourceLostWhy;
  std::deque<uint64_t> preHello;  // conns without a HELLO yet (or since gone), oldest first
  int preHelloCount = 0;          // of those, still open and without a HELLO
  int64_t helloTimeoutNs = static_cast<int64_t>(kDefaultHelloSec * 1e9);
  int maxPending = kDefaultMaxPending;
  int maxPendingPerSource = kDefaultMaxPendingPerSource;
  // Per source address: connections not admitted yet, and their ids oldest first (entries of
  // connections since admitted or gone are skipped when met).
  std::unordered_map<uint32_t, int> pendingBySource;
  std::unordered_map<uint32_t, std::deque<uint64_t>> pendingOrderBySource;

  ~Impl() {
    for (auto& [id, c] : conns) {
      c->tls.reset();
      if (c->fd >= 0) close(c->fd);
    }
    if (listenFd >= 0) close(listenFd);
    if (epollFd >= 0) close(epollFd);
    if (wakeFd >= 0) close(wakeFd);
  }

  // Creates the listening socket, the epoll set and the wake-up eventfd; reports the bound
  // port. On failure the descriptors already made are closed by the destructor.
  Status listen(sockaddr_in sa, int* port) {
    BRAID_SYSCHECK(listenFd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    int one = 1;
    // A restarted job must be able to bind its well-known port while old connections
    // linger in TIME_WAIT.
    BRAID_SYSCHECK(setsockopt(listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
    BRAID_SYSCHECK(bind(listenFd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)));
    BRAID_SYSCHECK(::listen(listenFd, SOMAXCONN));
    socklen_t len = sizeof(sa);
    BRAID_SYSCHECK(getsockname(listenFd, reinterpret_cast<sockaddr*>(&sa), &len));
    *port = ntohs(sa.sin_port);
    BRAID_SYSCHECK(epollFd = epoll_create1(EPOLL_CLOEXEC));
    BRAID_SYSCHECK(wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    BRAID_SYSCHECK(epoll_ctl(epollFd, EPOLL_CTL_ADD, listenFd, &ev));
    ev.data.u64 = kWakeId;
    BRAID_SYSCHECK(epoll_ctl(epollFd, EPOLL_CTL_ADD, wakeFd, &ev));
    return Status::ok();
  }

  Conn* find(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second.get();
  }

  void run() {
    epoll_event evs[64];
    while (!stopping.load(std::memory_order_relaxed)) {
      int n = epoll_wait(epollFd, evs, 64, nextTimeoutMs());
      if (n < 0) {
        if (errno == EINTR) continue;
        BRAID_WARN("store %s: epoll_wait failed: %s; the store stops serving", name.c_str(), errnoText(errno).c_str());
        break;
      }
      heartbeat();
      for (int i = 0; i < n && !stopping.load(std::memory_order_relaxed); ++i) {
        uint64_t id = evs[i].data.u64;
        if (id == kWakeId) {
          uint64_t v;
          (void)!read(wakeFd, &v, sizeof(v));
        } else if (id == kListenId) {
          acceptAll();
        } else if (Conn* c = find(id)) {
          onEvent(*c, evs[i].events);
        }
      }
      if (stopping.load(std::memory_order_relaxed)) break;
      checkSourceSilence();
      resolveSourceLoss();
      if (stopping.load(std::memory_order_relaxed)) break;
      expireWaits();
      expireHellos();
      applyOnClose();
      drainRunnable();
      maybeResumeListening();
      for (uint64_t id : graveyard) conns.erase(id);
      graveyard.clear();
    }
  }

  int64_t silenceLoopNs() {
    std::lock_guard<std::mutex> lock(standForMu);
    return silenceNs > 0 ? silenceNs : INT64_MAX / 2;
  }

  int nextTimeoutMs() {
    if (!dueOnClose.empty()) return 0;
    int64_t next = INT64_MAX;
    if (!deadlines.empty()) next = deadlines.begin()->first;
    if (!listening) next = std::min(next, resumeListenNs);
    if (mirror) next = std::min(next, mirrorSeenNs + static_cast<int64_t>(TcpStoreServer::kHeartbeatSec * 1e9));
    if (standbyWaiting && hasMirrorSource()) next = std::min(next, sourceSeenNs + silenceLoopNs());
    if (!preHello.empty()) {
      auto it = conns.find(preHello.front());
      // A stale front (connection gone or past its HELLO) wakes the loop once to be popped.
      next = std::min(next, it == conns.end() || it->second->dead || it->second->hello ? int64_t{0}
                                                                                        : it->second->helloDueNs);
    }
    if (next == INT64_MAX) return -1;
    int64_t ms = (next - nowNanos() + 999999) / 1000000;  // round up: never wake early and spin
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 60000));
  }

  void acceptAll() {
    for (;;) {
      sockaddr_in sa{};
      socklen_t len = sizeof(sa);
      int fd = accept4(listenFd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if ((errno == EMFILE || errno == ENFILE) && oldestPreHello()) {
          // Out of descriptors with connections that have proved nothing yet (a flood): the
          // oldest of them makes room, so the job's own clients still get in.
          dropOldestPreHello("out of file descriptors");
          continue;
        }
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Level-triggered accept would spin while out of descriptors: pause listening.
          BRAID_WARN("store %s: accept failed: %s; pausing new connections for 100 ms", name.c_str(),
                     errnoText(errno).c_str());
          epoll_ctl(epollFd, EPOLL_CTL_DEL, listenFd, nullptr);
          listening = false;
          resumeListenNs = nowNanos() + 100 * 1000000LL;
          return;
        }
        BRAID_WARN("store %s: accept failed: %s", name.c_str(), errnoText(errno).c_str());
        return;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->id = nextId++;
      c->fd = fd;
      c->peer = peerName(sa);
      c->source = sa.sin_addr.s_addr;
      c->events = EPOLLIN | EPOLLRDHUP;
      epoll_event ev{};
      ev.events = c->events;
      ev.data.u64 = c->id;
      if (epoll_ctl(epollFd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        BRAID_WARN("store %s: epoll_ctl(ADD) failed: %s", name.c_str(), errnoText(errno).c_str());
        close(fd);
        continue;
      }
      accepted.fetch_add(1, std::memory_order_relaxed);
      open.fetch_add(1, std::memory_order_relaxed);
      c->helloDueNs = nowNanos() + helloTimeoutNs;
      preHello.push_back(c->id);
      ++preHelloCount;
      const uint32_t source = c->source;
      const int fromSource = ++pendingBySource[source];
      pendingOrderBySource[source].push_back(c->id);
      conns.emplace(c->id, std::move(c));
      if (fromSource > maxPendingPerSource) dropOldestPendingOf(source);
      if (preHelloCount > maxPending) dropOldestPreHello();
    }
  }

  // The oldest connection still without a HELLO, or null (stale entries are popped).
  Conn* oldestPreHello() {
    while (!preHello.empty()) {
      Conn* c = find(preHello.front());
      if (c && !c->hello) return c;
      preHello.pop_front();
    }
    return nullptr;
  }

  void dropOldestPreHello(const std::string& why = "") {
    if (Conn* c = oldestPreHello())
      violation(*c, !why.empty() ? why + "; dropping the oldest connection not admitted yet"
                                 : "more than " + std::to_string(maxPending) +
                                       " connections not admitted yet (BRAID_STORE_MAX_PENDING); dropping the oldest");
  }

  void dropOldestPendingOf(uint32_t source) {
    auto it = pendingOrderBySource.find(source);
    if (it == pendingOrderBySource.end()) return;
    while (!it->second.empty()) {
      Conn* c = find(it->second.front());
      it->second.pop_front();
      if (c && !c->hello) {
        violation(*c, "more than " + std::to_string(maxPendingPerSource) +
                          " connections from one address not admitted yet (BRAID_STORE_MAX_PENDING_PER_SOURCE); "
                          "dropping its oldest");
        return;
      }
    }
  }

  // A connection stops being pending: admitted, or closed before that.
  void leavePending(const Conn& c) {
    --preHelloCount;
    auto it = pendingBySource.find(c.source);
    if (it == pendingBySource.end()) return;
    if (--it->second <= 0) {
      pendingBySource.erase(it);
      pendingOrderBySource.erase(c.source);
    }
  }

  void expireHellos() {
    const int64_t now = nowNanos();
    while (Conn* c = oldestPreHello()) {
      if (c->helloDueNs > now) break;
      violation(*c, "no HELLO within " + std::to_string(helloTimeoutNs / 1000000) + " ms (BRAID_STORE_HELLO_SEC)");
    }
  }

  void maybeResumeListening() {
    if (listening || nowNanos() < resumeListenNs) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    if (epoll_ctl(epollFd, EPOLL_CTL_ADD, listenFd, &ev) == 0) listening = true;
    else resumeListenNs = nowNanos() + 100 * 1000000LL;
  }

  void onEvent(Conn& c, uint32_t events) {
    if (events & EPOLLERR) {
      closeConn(c, "socket error", false);
      return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
      if (!readInput(c)) return;
      process(c);
      if (c.dead) return;
    }
    if (events & EPOLLOUT) flush(c);
  }

  // Reads whatever the socket has. False if the connection was closed. Over TLS it finishes
  // the handshake first, and reads until the session has nothing decrypted and the socket
  // nothing new (epoll would not report data left inside the session).
  bool readInput(Conn& c) {
    if (c.sniffTls) {
      // A TLS client goes on with a handshake record; a plaintext one with a request frame,
      // which starts with the magic's first byte, never that one.
      unsigned char first = 0;
      const ssize_t n = recv(c.fd, &first, 1, MSG_PEEK);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
      if (n <= 0) {
        closeConn(c, n == 0 ? "closed by the client" : ("recv failed: " + errnoText(errno)).c_str(), false);
        return false;
      }
      c.sniffTls = false;
      if (first == kTlsHandshakeRecord) {
        auto t = TlsStream::create(c.fd, TlsStream::Role::kServer, key, c.tlsBinding);
        if (!t.isOk()) {
          closeConn(c, t.status().message().c_str(), false);
          return false;
        }
        c.tls = std::move(t).value();
      }
    }
    if (c.tls && !c.tls->handshakeDone()) {
      const int r = c.tls->handshake();
      if (r < 0) {
        BRAID_SECURITY("store %s: TLS with client %s failed: %s", name.c_str(), c.peer.c_str(), c.tls->error().c_str());
        closeConn(c, nullptr, true);
        return false;
      }
      if (r == 0) {
        updateInterest(c);
        return true;
      }
    }
    for (;;) {
      // Before its HELLO a connection gets room for a HELLO and one byte more (which is
      // already too much).
      const size_t chunk = c.hello ? kReadChunk : kMaxPreHelloIn + 1;
      size_t old = c.in.size();
      c.in.resize(old + chunk);
      ssize_t n;
      if (c.tls) {
        iovec v{&c.in[old], chunk};
        n = c.tls->readv(&v, 1);
      } else {
        n = recv(c.fd, &c.in[old], chunk, 0);
      }
      c.in.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
      if (n > 0) {
        if (!c.hello && c.in.size() - c.inOff > kMaxPreHelloIn) {
          violation(c, "more bytes than a HELLO before its HELLO");
          return false;
        }
        if (c.in.size() - c.inOff > kMaxBufferedIn) {
          violation(c, "more than one frame of unprocessed input (client pipelines without reading replies)");
          return false;
        }
        continue;
      }
      if (n == 0) {
        closeConn(c, "closed by the client", false);
        return false;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      closeConn(c, (c.tls ? "TLS read failed: " + c.tls->error() : "recv failed: " + errnoText(errno)).c_str(), false);
      return false;
    }
  }

  // Decodes and serves buffered requests until one parks or the input runs out.
  void process(Conn& c) {
    while (!c.dead && !c.parked && !c.closeAfterFlush) {
      if (!c.hello && c.in.size() - c.inOff >= proto::kHeaderBytes) {
        // The header's payload length (bytes 8-11, little-endian): a frame larger than a
        // HELLO is refused now, not after waiting for (and buffering) its payload.
        const auto* h = reinterpret_cast<const unsigned char*>(c.in.data() + c.inOff);
        const uint32_t len = h[8] | (h[9] << 8) | (h[10] << 16) | (static_cast<uint32_t>(h[11]) << 24);
        if (len > kMaxHelloPayload) {
          violation(c, "a frame of " + std::to_string(len) + " payload bytes before it was admitted (HELLO and AUTH have at most " +
                           std::to_string(kMaxHelloPayload) + ")");
          return;
        }
      }
      proto::Frame f;
      proto::DecodeResult r =
          proto::decodeFrame(c.in.data() + c.inOff, c.in.size() - c.inOff, proto::Direction::kRequest, &f);
      if (r.kind == proto::DecodeResult::kNeedMore) break;
      if (r.kind == proto::DecodeResult::kMalformed) {
        violation(c, r.error);
        return;
      }
      c.inOff += r.consumed;
      auto req = proto::parseRequest(f);
      if (!req.isOk()) {
        violation(c, req.status().message());
        return;
      }
      requests.fetch_add(1, std::memory_order_relaxed);
      handle(c, std::move(req).value());
      if (!c.dead && c.out.size() - c.outOff > kMaxBufferedOut) {
        violation(c, "replies pile up unread (client pipelines without reading replies)");
        return;
      }
    }
    if (c.dead) return;
    // Compact lazily so a stream of small frames does not memmove the buffer each time.
    if (c.inOff == c.in.size()) {
      c.in.clear();
      c.inOff = 0;
    } else if (c.inOff > (1u << 20) && c.inOff > c.in.size() / 2) {
      c.in.erase(0, c.inOff);
      c.inOff = 0;
    }
    flush(c);
  }

  void handle(Conn& c, proto::Request req) {
    using proto::Op;
    if (req.op == Op::kHello) {
      if (c.hello || c.challenged) return violation(c, "second HELLO");
      c.clientId = req.clientId;
      if (req.version != proto::kVersion)
        return refuse(c, "client speaks store protocol " + std::to_string(req.version) + ", this store speaks " +
                             std::to_string(proto::kVersion));
      // The expected nonce is never echoed: it is what proves membership of the job.
      if (expectedNonce != 0 && req.nonce != expectedNonce)
        return refuse(c, "this store serves a different job (session nonce mismatch; is the unique id stale?)");
      if (!key.present) return admit(c);
      if (req.challenge.empty())
        return refuse(c, "authentication failed: this store belongs to a job with a key and the client has none "
                         "(give every rank the job's BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE)");
      c.challenged = true;
      c.clientChallenge = req.challenge;
      c.serverChallenge = randomString(proto::kChallengeBytes);
      proto::Reply rep;
      rep.op = Op::kChallenge;
      rep.challenge = c.serverChallenge;
      const Digest proof = storeProof(kServerLabel, req.nonce, c.clientChallenge, c.serverChallenge);
      rep.proof.assign(reinterpret_cast<const char*>(proof.data()), proof.size());
      return reply(c, rep);
    }
    if (req.op == Op::kAuth) {
      if (!c.challenged || c.hello) return violation(c, "AUTH without a CHALLENGE before it");
      if (!checkAuthProof(storeProof(kClientLabel, expectedNonce, c.clientChallenge, c.serverChallenge), req.proof))
        return refuse(c, "authentication failed: the client does not know this job's key");
      return admit(c);
    }
    if (!c.hello)
      return violation(c, std::string(proto::opName(req.op)) + (c.challenged ? " before AUTH" : " before HELLO"));
    proto::Reply rep;
    if (c.mirrorSource) sourceSeenNs = nowNanos();
    if (req.op == Op::kStandby) {
      if (!standbyWaiting || hasMirrorSource()) {
        rep.op = Op::kError;
        rep.code = Code::kInvalidArgument;
        rep.message = standbyWaiting ? "this standby already mirrors a store" : "this store is no standby";
        return reply(c, rep);
      }
      c.mirrorSource = true;
      sourceId = c.id;
      sourceSeenNs = nowNanos();
      BRAID_INFO("store %s: standing by for the store at %s", name.c_str(), c.peer.c_str());
      return reply(c, rep);
    }
    if (standbyWaiting && !c.mirrorSource) {
      // A client that lost the store this one stands by for may come before this store has
      // seen that store go: it asks again.
      rep.op = Op::kError;
      rep.code = Code::kInProgress;
      rep.message = "a standby store, not serving while the store it stands by for is there";
      return reply(c, rep);
    }
    switch (req.op) {
      case Op::kSet:
        if (c.mirrorSource && req.keys[0].compare(0, kDedupPrefix.size(), kDedupPrefix) == 0) {
          // A numbered add, mirrored: the counter's new value comes with its record.
          unsigned long long n = 0;
          long long v = 0;
          int at = 0;
          if (std::sscanf(req.value.c_str(), "%llu %lld %n", &n, &v, &at) == 2 && at > 0 &&
              static_cast<size_t>(at) < req.value.size()) {
            const std::string counter = req.value.substr(static_cast<size_t>(at));
            data[counter] = std::to_string(v);
            notify(counter);
          }
        }
        data[req.keys[0]] = std::move(req.value);
        notify(req.keys[0]);
        mirrorKey(req.keys[0]);
        if (req.keys[0] == kStandbyKey && !standbyWaiting) attachStandby(data[kStandbyKey]);
        return reply(c, rep);
      case Op::kAdd: {
        // A numbered add asked again (its client lost the reply with the store it asked, and
        // asks this store, which mirrored the add): the first answer, not a second add.
        const std::string dedup = c.clientId && req.requestNumber ? kDedupPrefix + std::to_string(c.clientId) : "";
        if (!dedup.empty()) {
          auto d = data.find(dedup);
          unsigned long long n = 0;
          long long v = 0;
          if (d != data.end() && std::sscanf(d->second.c_str(), "%llu %lld", &n, &v) == 2 && n == req.requestNumber) {
            rep.op = Op::kInt;
            rep.number = v;
            return reply(c, rep);
          }
        }
        int64_t cur = 0;
        auto it = data.find(req.keys[0]);
        if (it != data.end() && !parseCounter(it->second, &cur)) {
          rep.op = Op::kError;
          rep.code = Code::kInvalidArgument;
          rep.message = "key '" + req.keys[0] + "' holds a non-integer value; add() needs a counter";
          return reply(c, rep);
        }
        int64_t now = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(req.delta));
        data[req.keys[0]] = std::to_string(now);
        notify(req.keys[0]);
        if (!dedup.empty()) {
          data[dedup] = std::to_string(req.requestNumber) + " " + std::to_string(now) + " " + req.keys[0];
          mirrorKey(dedup);  // with the counter's value in it: one write to the standby
        } else {
          mirrorKey(req.keys[0]);
        }
        rep.op = Op::kInt;
        rep.number = now;
        return reply(c, rep);
      }
      case Op::kCompareSet: {
        auto it = data.find(req.keys[0]);
        const bool matches = it == data.end() ? req.expected.empty() : it->second == req.expected;
        if (matches) {
          data[req.keys[0]] = std::move(req.value);
          notify(req.keys[0]);
          mirrorKey(req.keys[0]);
          it = data.find(req.keys[0]);
        }
        rep.op = Op::kValue;
        if (it != data.end()) rep.value = it->second;
        return reply(c, rep);
      }
      case Op::kFence: {
        int64_t closed = 0;
        for (uint64_t id : req.clients) {
          if (id == 0 || id == c.clientId) continue;  // a client never shuts itself out
          const std::string k = kFencedPrefix + std::to_string(id);
          int closedHere = 0;
          data[k] = kShutOut + req.value;
          mirrorKey(k);
          for (auto& [connId, other] : conns) {
            Conn& o = *other;
            if (o.dead || !o.hello || o.mirrorSource || o.clientId != id) continue;
            BRAID_INFO("store %s: shuts out client %s: %s", name.c_str(), o.peer.c_str(), req.value.c_str());
            // The reason goes first, for the client to read should it come back; the
            // connection ends even when a stopped client's full socket takes none of it.
            proto::Reply out;
            out.op = Op::kError;
            out.code = Code::kAborted;
            out.message = data[k];
            (void)proto::encodeReply(out, &o.out);
            o.closeAfterFlush = true;
            flush(o);
            if (!o.dead) closeConn(o, "shut out", false);
            ++closed;
            ++closedHere;
          }
          // Not connected here: gone while this store was lost (this is the standby that
          // took over). What it asked to be set at its end is set now.
          if (closedHere == 0) {
            const std::string mine = kClientOnClosePrefix + std::to_string(id) + "\x01";
            std::vector<std::string> recs;
            for (const auto& [key, value] : data)
              if (key.compare(0, mine.size(), mine) == 0) recs.push_back(key);
            for (const std::string& rec : recs) {
              dueOnClose.emplace_back(rec.substr(mine.size()), std::move(data[rec]));
              data.erase(rec);
              mirrorKey(rec);
            }
          }
        }
        rep.op = Op::kInt;
        rep.number = closed;
        return reply(c, rep);
      }
      case Op::kSetOnClose:
        if (c.onClose.size() >= kMaxOnClosePerConn && !c.onClose.count(req.keys[0])) {
          rep.op = Op::kError;
          rep.code = Code::kInvalidArgument;
          rep.message = "a connection may hold at most " + std::to_string(kMaxOnClosePerConn) + " SET_ON_CLOSE keys";
          return reply(c, rep);
        }
        if (const std::string rec = onCloseRecord(c, req.keys[0]); !rec.empty()) {
          data[rec] = req.value;
          mirrorKey(rec);
        }
        c.onClose[req.keys[0]] = std::move(req.value);
        return reply(c, rep);
      case Op::kCancelOnClose:
        rep.op = Op::kBool;
        rep.flag = c.onClose.erase(req.keys[0]) > 0;
        if (const std::string rec = onCloseRecord(c, req.keys[0]); !rec.empty() && data.erase(rec)) mirrorKey(rec);
        return reply(c, rep);
      case Op::kCheck:
        rep.op = Op::kBool;
        rep.flag = firstMissing(req.keys) == nullptr;
        return reply(c, rep);
      case Op::kDelete:
        rep.op = Op::kBool;
        rep.flag = data.erase(req.keys[0]) > 0;
        if (rep.flag) mirrorKey(req.keys[0]);
        return reply(c, rep);
      case Op::kGet:
      case Op::kWait:
      case Op::kMultiGet: {
        const std::string* missing = firstMissing(req.keys);
        if (!missing) return complete(c, req);
        if (req.timeoutMs == 0) {
          rep.op = Op::kTimeout;
          rep.value = *missing;
          return reply(c, rep);
        }
        std::string key = *missing;
        return park(c, std::move(req), key);
      }
      default:
        return violation(c, "unexpected opcode");
    }
  }

  bool isHostClient(const Conn& c) const {
    const uint64_t id = localClient.load(std::memory_order_relaxed);
    return id != 0 && c.clientId == id;
  }

  // Where the store keeps a copy of connection `c`'s SET_ON_CLOSE key `k` (mirrored to the
  // standby like any key): the hosting process's own client's under kHostOnClosePrefix, every
  // other client's under kClientOnClosePrefix and its id; "" for a client without an id.
  std::string onCloseRecord(const Conn& c, const std::string& k) const {
    if (isHostClient(c)) return kHostOnClosePrefix + k;
    if (c.clientId == 0) return "";
    return kClientOnClosePrefix + std::to_string(c.clientId) + "\x01" + k;
  }

  // What a SET_ON_CLOSE entry does when its connection ends: set the key to the value, or,
  // for a value "\x01add N" (Store::addOnClose), add N to the counter at the key.
  void applyOnCloseEntry(const std::string& k, std::string v) {
    static const std::string kAdd = "\x01" "add ";
    if (v.compare(0, kAdd.size(), kAdd) == 0) {
      int64_t cur = 0, delta = 0;
      auto it = data.find(k);
      if ((it != data.end() && !parseCounter(it->second, &cur)) || !parseCounter(v.substr(kAdd.size()), &delta)) return;
      v = std::to_string(static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta)));
    }
    data[k] = std::move(v);
    notify(k);
    mirrorKey(k);
  }

  bool hasMirrorSource() { return sourceId != 0 && find(sourceId) != nullptr; }

  // Sends `key`'s state (its value, or its absence) to the standby before the client that
  // changed it is answered: whatever a client was told is on the standby too. A standby that
  // fails is dropped and the store serves on without one.
  void mirrorKey(const std::string& k) {
    if (!mirror) return;
    auto it = data.find(k);
    const Deadline d = Deadline::after(standbyWaitNs.load(std::memory_order_relaxed) / 1e9);
    Status s = it != data.end() ? mirror->set(k, it->second, d) : mirror->deleteKey(k, d).status();
    mirrorAnswered(s);
  }

  // With a standby and nothing written to it for kHeartbeatSec: asks it something without
  // waiting for the answer (a standby that is stopped must not stop this loop), so that it
  // knows this store is there. Runs before the loop serves anything: a store that was stopped
  // finds the connection closed if its standby took over meanwhile.
  void heartbeat() {
    if (!mirror || nowNanos() - mirrorSeenNs < static_cast<int64_t>(TcpStoreServer::kHeartbeatSec * 1e9)) return;
    mirrorAnswered(mirror->ping(Deadline::after(standbyWaitNs.load(std::memory_order_relaxed) / 1e9)));
  }

  // What a write to (or a question of) the standby came to. A standby that does not answer
  // in time is dropped and this store serves on (the standby, seeing its connection end and
  // this store still answer, stands down). One whose connection ended either died or took
  // over (this store was stopped or cut off for longer than the standby waits): if it still
  // answers, it serves in this store's place, and this store stops serving.
  void mirrorAnswered(const Status& s) {
    if (s.isOk()) {
      mirrorSeenNs = nowNanos();
      return;
    }
    if (s.code() == Code::kTimeout) return dropMirror(s.message());
    // The standby ended the connection: it died, or it took over and serves. Taken over, it
    // answers; a busy one may take more than a probe's usual 2 s to, and a store that then
    // went on alone would serve beside it (measured under sanitizers on a loaded 2-core
    // machine). A dead standby's host refuses the probe at once: only a standby whose host is
    // gone too costs the longer wait.
    auto there = TcpStoreClient::probe(mirrorHost, mirrorPort, expectedNonce, key, tls && key.present,
                                       kSupersedeProbeSec);
    if (!there.isOk()) return dropMirror(s.message() + "; " + there.status().message());
    supersede();
  }

  void dropMirror(const std::string& why) {
    BRAID_INFO("store %s: drops its standby at %s (%s); serving without one", name.c_str(), mirrorAddress.c_str(),
               why.c_str());
    mirror.reset();
    mirrored.store(false);
    forgetStandby();
  }

  // kStandbyKey names a standby that mirrors this store, or nothing: the ranks read it to
  // know whether to start another (Session::rearmStandby).
  void forgetStandby() { data.erase(kStandbyKey); }

  // This store's standby serves in its place: close every connection (their SET_ON_CLOSE
  // keys are the standby's business now) and the listening socket, so that every client
  // goes there, and stop.
  void supersede() {
    BRAID_WARN("store %s: its standby at %s serves in its place (this store was stopped or cut off for longer than "
               "the standby waits); closing every connection so that its clients go there",
               name.c_str(), mirrorAddress.c_str());
    superseded.store(true);
    stopEverything();
  }

  // Closes every connection and the listening socket, and ends the loop. What the closed
  // connections asked to be set when they end is not set.
  void stopEverything() {
    stopping.store(true);
    mirror.reset();
    mirrored.store(false);
    for (auto& [id, c] : conns) closeConn(*c, "the store stops serving", false);
    if (listenFd >= 0) {
      epoll_ctl(epollFd, EPOLL_CTL_DEL, listenFd, nullptr);
      close(listenFd);
      listenFd = -1;
    }
  }

  // A standby whose store sent nothing for the silence it allows: that store is stopped, or
  // cut off from this one. Its connection is closed and this standby takes over.
  void checkSourceSilence() {
    if (!standbyWaiting || sourceId == 0) return;
    int64_t silence;
    {
      std::lock_guard<std::mutex> lock(standForMu);
      silence = silenceNs;
    }
    Conn* src = find(sourceId);
    if (!src || silence <= 0 || nowNanos() - sourceSeenNs < silence) return;
    char why[96];
    snprintf(why, sizeof(why), "it sent nothing for %.1f s: stopped, or cut off from this standby", silence / 1e9);
    sourceSilent = true;
    closeConn(*src, why, false);
  }

  // The connection of the store this one stands by for ended. A store that still answers at
  // its address dropped this standby and serves on: stand down. Otherwise it is gone (or
  // went silent): take over.
  void resolveSourceLoss() {
    if (!sourceLost || !standbyWaiting) return;
    sourceLost = false;
    std::string host;
    int port;
    {
      std::lock_guard<std::mutex> lock(standForMu);
      host = primaryHost;
      port = primaryPort;
    }
    if (!sourceSilent && port != 0) {
      auto there = TcpStoreClient::probe(host, port, expectedNonce, key, tls && key.present, kProbeSec);
      if (there.isOk()) {
        BRAID_INFO("store %s: the store at %s:%d dropped this standby and serves on; standing down", name.c_str(),
                   host.c_str(), port);
        stoodDown.store(true);
        return stopEverything();
      }
    }
    promote();
  }

  // Serves from now on, with every key the store it stood by for had acknowledged.
  void promote() {
    standbyWaiting = false;
    promoted.store(true);
    // The process that served the store is gone: its own client's SET_ON_CLOSE keys
    // (mirrored for this moment) take effect, as they would have when its connection ended.
    std::vector<std::pair<std::string, std::string>> hostOnClose;
    for (auto it = data.begin(); it != data.end();) {
      if (it->first.compare(0, kHostOnClosePrefix.size(), kHostOnClosePrefix) == 0) {
        hostOnClose.emplace_back(it->first.substr(kHostOnClosePrefix.size()), std::move(it->second));
        it = data.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& e : hostOnClose) dueOnClose.push_back(std::move(e));
    forgetStandby();  // it named this store: none stands by for it yet
    BRAID_WARN("store %s: the store it stood by for (%s) is gone (%s); serving its %zu keys", name.c_str(),
               sourceLostPeer.c_str(), sourceLostWhy.c_str(), data.size());
  }

  // A rank started a standby and named it ("host:port"): connect, declare this connection
  // its source, copy every key over, and mirror every write from now on. Runs in the loop:
  // nothing else is served meanwhile, so the copy is consistent.
  void attachStandby(std::string address) {  // a copy: dropMirror erases the key it came from
    const size_t colon = address.rfind(':');
    const int port = colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
    if (colon == std::string::npos || port <= 0 || port > 65535) {
      BRAID_WARN("store %s: a standby named '%s', which is no host:port; serving without one", name.c_str(),
                 address.c_str());
      return forgetStandby();
    }
    if (mirror) {
      dropMirror("another standby replaces it");
      data[kStandbyKey] = address;
    }
    mirrorHost = address.substr(0, colon);
    mirrorPort = port;
    auto m = TcpStoreClient::connect(address.substr(0, colon), port, expectedNonce, Deadline::after(kMirrorSec),
                                     kMirrorSec, key, tls && key.present);
    if (!m.isOk()) {
      BRAID_WARN("store %s: cannot reach the standby at %s: %s; serving without one", name.c_str(), address.c_str(),
                 m.status().message().c_str());
      return forgetStandby();
    }
    mirror = std::move(m).value();
    mirror->setQuiet();
    mirrorAddress = address;
    Status s = mirror->declareStandbySource(Deadline::after(kMirrorSec));
    // The numbered adds' records first: each carries its counter's value of that moment,
    // which the counters' own (current) values sent after them then replace.
    for (int pass = 0; pass < 2; ++pass)
      for (auto it = data.begin(); s.isOk() && it != data.end(); ++it)
        if ((it->first.compare(0, kDedupPrefix.size(), kDedupPrefix) == 0) == (pass == 0))
          s = mirror->set(it->first, it->second, Deadline::after(kMirrorSec));
    if (!s.isOk()) return dropMirror(s.message());
    mirrored.store(true);
    mirrorSeenNs = nowNanos();
    BRAID_INFO("store %s: standby at %s holds its %zu keys and mirrors every write", name.c_str(), address.c_str(),
               data.size());
  }

  void admit(Conn& c) {
    if (c.clientId != 0) {
      auto fenced = data.find(kFencedPrefix + std::to_string(c.clientId));
      if (fenced != data.end()) return refuse(c, fenced->second);
    }
    c.hello = true;
    if (tls && key.present) {
      // Both challenges name this connection: its TLS key is derived from them.
      c.startTls = true;
      c.tlsBinding = "store" + c.clientChallenge + c.serverChallenge;
    }
    c.clientChallenge.clear();
    c.serverChallenge.clear();
    leavePending(c);
    reply(c, proto::Reply{});
  }

  Digest storeProof(std::string_view label, uint64_t nonce, const std::string& clientChallenge,
                    const std::string& serverChallenge) const {
    return authProof(key, label, {std::string_view(reinterpret_cast<const char*>(&nonce), 8), clientChallenge,
                                  serverChallenge});
  }

  const std::string* firstMissing(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (data.find(k) == data.end()) return &k;
    return nullptr;
  }

  // Replies to a GET/WAIT/MULTI_GET whose keys all exist.
  void complete(Conn& c, const proto::Request& req) {
    proto::Reply rep;
    if (req.op == proto::Op::kGet) {
      rep.op = proto::Op::kValue;
      rep.value = data[req.keys[0]];
    } else if (req.op == proto::Op::kMultiGet) {
      std::vector<size_t> sizes;
      sizes.reserve(req.keys.size());
      for (const auto& k : req.keys) sizes.push_back(data[k].size());
      if (proto::frameBytes(sizes) - proto::kHeaderBytes > proto::kMaxPayloadBytes) {
        // Documented signal to the client: fetch the keys one at a time instead.
        rep.op = proto::Op::kError;
        rep.code = Code::kWouldBlock;
        rep.message = "values exceed one frame";
      } else {
        rep.op = proto::Op::kValues;
        for (const auto& k : req.keys) rep.values.push_back(data[k]);
      }
    }
    reply(c, rep);
  }

  void park(Conn& c, proto::Request req, const std::string& key) {
    c.parked = true;
    c.waitKey = key;
    c.deadlineNs = 0;
    if (req.timeoutMs != proto::kNoTimeout) {
      c.deadlineNs = nowNanos() + static_cast<int64_t>(std::min(req.timeoutMs, kMaxWaitMs)) * 1000000LL;
      deadlines.insert({c.deadlineNs, c.id});
    }
    c.pending = std::move(req);
    waiters[key].insert(c.id);
  }

  void unpark(Conn& c) {
    if (!c.parked) return;
    auto w = waiters.find(c.waitKey);
    if (w != waiters.end()) {
      w->second.erase(c.id);
      if (w->second.empty()) waiters.erase(w);
    }
    if (c.deadlineNs) deadlines.erase({c.deadlineNs, c.id});
    c.parked = false;
    c.deadlineNs = 0;
  }

  // `key` was set: wake the connections parked on it.
  void notify(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    std::unordered_set<uint64_t> ids = std::move(it->second);
    waiters.erase(it);
    for (uint64_t id : ids) {
      Conn* c = find(id);
      if (!c || !c->parked || c->waitKey != key) continue;
      if (const std::string* missing = firstMissing(c->pending.keys)) {
        // A multi-key wait moves on to its next missing key, keeping its deadline.
        c->waitKey = *missing;
        waiters[*missing].insert(id);
        continue;
      }
      if (c->deadlineNs) deadlines.erase({c->deadlineNs, id});
      c->parked = false;
      c->deadlineNs = 0;
      complete(*c, c->pending);
      c->pending = proto::Request{};
      // Its pipelined input (if any) is served from the main loop, not recursively here.
      runnable.push_back(id);
    }
  }

  void expireWaits() {
    int64_t now = nowNanos();
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      uint64_t id = deadlines.begin()->second;
      deadlines.erase(deadlines.begin());
      Conn* c = find(id);
      if (!c || !c->parked) continue;
      c->deadlineNs = 0;  // already removed from `deadlines`
      proto::Reply rep;
      rep.op = proto::Op::kTimeout;
      rep.value = c->waitKey;
      unpark(*c);
      c->pending = proto::Request{};
      reply(*c, rep);
      runnable.push_back(id);
    }
  }

  // Sets the keys of connections that ended since the last pass, waking their waiters.
  void applyOnClose() {
    for (const auto& k : onCloseFired)
      if (data.erase(k)) mirrorKey(k);
    onCloseFired.clear();
    while (!dueOnClose.empty()) {
      auto due = std::move(dueOnClose);
      dueOnClose.clear();
      for (auto& [k, v] : due) applyOnCloseEntry(k, std::move(v));
    }
  }

  void drainRunnable() {
    while (!runnable.empty()) {
      uint64_t id = runnable.front();
      runnable.pop_front();
      if (Conn* c = find(id)) process(*c);
    }
  }

  void reply(Conn& c, const proto::Reply& rep) {
    Status s = proto::encodeReply(rep, &c.out);
    if (!s.isOk()) {
      proto::Reply err;
      err.op = proto::Op::kError;
      err.code = Code::kInternal;
      err.message = s.message();
      (void)proto::encodeReply(err, &c.out);
    }
    // Sent by the flush at the end of process(), which batches a connection's replies.
  }

  // Refuses a client in HELLO: it gets the reason, then the connection closes.
  void refuse(Conn& c, const std::string& why) {
    if (why.rfind("authentication failed", 0) == 0)
      BRAID_SECURITY("store %s: refusing client %s: %s", name.c_str(), c.peer.c_str(), why.c_str());
    else
      BRAID_WARN("store %s: refusing client %s: %s", name.c_str(), c.peer.c_str(), why.c_str());
    rejected.fetch_add(1, std::memory_order_relaxed);
    proto::Reply rep;
    rep.op = proto::Op::kError;
    rep.code = Code::kInvalidArgument;
    rep.message = why;
    (void)proto::encodeReply(rep, &c.out);
    c.closeAfterFlush = true;
    flush(c);
  }

  void violation(Conn& c, const std::string& why) {
    BRAID_WARN("store %s: closing connection from %s: %s", name.c_str(), c.peer.c_str(), why.c_str());
    rejected.fetch_add(1, std::memory_order_relaxed);
    closeConn(c, nullptr, true);
  }

  void flush(Conn& c) {
    if (c.tls && !c.tls->handshakeDone()) {
      if (c.tls->handshake() < 0) {
        BRAID_SECURITY("store %s: TLS with client %s failed: %s", name.c_str(), c.peer.c_str(), c.tls->error().c_str());
        closeConn(c, nullptr, true);
        return;
      }
      updateInterest(c);
      return;
    }
    if (c.tls && c.tls->pending() > 0 && c.tls->flush() < 0 && errno != EAGAIN) {
      closeConn(c, ("TLS write failed: " + c.tls->error()).c_str(), false);
      return;
    }
    while (c.outOff < c.out.size() && !(c.tls && c.tls->pending() > 0)) {
      ssize_t n;
      if (c.tls) {
        iovec v{c.out.data() + c.outOff, c.out.size() - c.outOff};
        n = c.tls->writev(&v, 1);
      } else {
        n = send(c.fd, c.out.data() + c.outOff, c.out.size() - c.outOff, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      if (n > 0) {
        c.outOff += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      closeConn(c, ("send failed: " + errnoText(errno)).c_str(), false);
      return;
    }
    if (c.outOff == c.out.size()) {
      c.out.clear();
      c.outOff = 0;
      if (c.closeAfterFlush) {
        closeConn(c, "refused", false);
        return;
      }
      if (c.startTls && tlsOptional) {
        c.startTls = false;
        c.sniffTls = true;
      } else if (c.startTls) {
        // The admitting OK went out in the clear; the client answers with a ClientHello.
        c.startTls = false;
        auto t = TlsStream::create(c.fd, TlsStream::Role::kServer, key, c.tlsBinding);
        if (!t.isOk()) {
          closeConn(c, t.status().message().c_str(), false);
          return;
        }
        c.tls = std::move(t).value();
      }
    }
    updateInterest(c);
  }

  // EPOLLOUT while replies (or TLS records, or a TLS handshake) wait for the socket.
  void updateInterest(Conn& c) {
    const bool out = c.out.size() > c.outOff || (c.tls && c.tls->pending() > 0) ||
                     (c.tls && !c.tls->handshakeDone() && c.tls->wantEvents() == POLLOUT);
    uint32_t want = EPOLLIN | EPOLLRDHUP | (out ? uint32_t{EPOLLOUT} : 0u);
    if (want != c.events) {
      epoll_event ev{};
      ev.events = want;
      ev.data.u64 = c.id;
      if (epoll_ctl(epollFd, EPOLL_CTL_MOD, c.fd, &ev) == 0) c.events = want;
    }
  }

  void closeConn(Conn& c, const char* why, bool logged) {
    if (c.dead) return;
    if (!c.hello) leavePending(c);
    if (why && !logged) BRAID_TRACE("store %s: connection from %s ends: %s", name.c_str(), c.peer.c_str(), why);
    // A client with another key finds out from the store's proof and leaves before AUTH.
    if (!logged && c.challenged && !c.hello)
      BRAID_SECURITY("store %s: client %s left during authentication (another key?)", name.c_str(), c.peer.c_str());
    unpark(c);
    if (c.mirrorSource && standbyWaiting && !stopping.load(std::memory_order_relaxed)) {
      // The store this one stood by for is gone, stopped, or hung up on it: the loop decides.
      sourceLost = true;
      sourceLostPeer = c.peer;
      sourceLostWhy = why ? why : "closed";
    }
    // The client is gone (its process died, its host or network failed, or it hung up):
    // what it asked to be set then is set. Not when the store itself stops.
    if (c.hello && !stopping.load(std::memory_order_relaxed))
      for (auto& kv : c.onClose) {
        if (std::string rec = onCloseRecord(c, kv.first); !rec.empty()) onCloseFired.push_back(std::move(rec));
        dueOnClose.emplace_back(kv.first, std::move(kv.second));
      }
    c.onClose.clear();
    epoll_ctl(epollFd, EPOLL_CTL_DEL, c.fd, nullptr);
    c.tls.reset();
    close(c.fd);
    c.fd = -1;
    c.dead = true;
    open.fetch_sub(1, std::memory_order_relaxed);
    graveyard.push_back(c.id);
  }
};

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(const std::string& host, int port,
                                                                uint64_t expectedNonce, const AuthKey& key, bool tls,
                                                                bool standby, bool tlsOptional) {
  if (tls && !key.present) return invalidArgument("store server: BRAID_TLS=1 needs the job's key");
  if (tls && !tlsAvailable())
    return invalidArgument("store server: BRAID_TLS=1, but this braid was built without OpenSSL");
  if (tls) tlsWarmUp();
  const std::string where = (host.empty() ? std::string("0.0.0.0") : host) + ":" + std::to_string(port);
  if (port < 0 || port > 65535) return invalidArgument("store server: port " + std::to_string(port) + " is out of range");
  sockaddr_in sa;
  Status rs = resolveIpv4(host, port, true, &sa);
  if (!rs.isOk()) return rs.withContext("store server cannot bind " + where);

  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->host_ = host;
  server->impl_ = std::make_unique<Impl>();
  Impl& im = *server->impl_;
  im.expectedNonce = expectedNonce;
  im.key = key;
  im.tls = tls;
  im.tlsOptional = tls && tlsOptional;
  im.standbyWaiting = standby;
  if (const char* v = std::getenv("BRAID_STORE_HELLO_SEC")) {
    char* end = nullptr;
    double sec = std::strtod(v, &end);
    if (!*v || *end || !(sec > 0) || sec > 86400)
      return invalidArgument(std::string("BRAID_STORE_HELLO_SEC='") + v + "' must be a number of seconds in (0, 86400]");
    im.helloTimeoutNs = static_cast<int64_t>(sec * 1e9);
  }
  for (auto [name, out] : {std::pair<const char*, int*>{"BRAID_STORE_MAX_PENDING", &im.maxPending},
                           {"BRAID_STORE_MAX_PENDING_PER_SOURCE", &im.maxPendingPerSource}}) {
    const char* v = std::getenv(name);
    if (!v) continue;
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > 1000000)
      return invalidArgument(std::string(name) + "='" + v + "' must be an integer in [1, 1000000]");
    *out = static_cast<int>(n);
  }

  Status bound = im.listen(sa, &server->port_);
  if (!bound.isOk()) return bound.withContext("store server cannot bind " + where);
  im.name = (host.empty() ? std::string("0.0.0.0") : host) + ":" + std::to_string(server->port_);

  im.thread = std::thread([&im] { im.run(); });
  BRAID_INFO("store %s on %s (%s)", standby ? "standing by" : "serving", im.name.c_str(),
             key.present ? ("clients prove key " + key.fingerprint()).c_str() : "no key: unauthenticated");
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  if (!impl_) return;
  impl_->stopping.store(true);
  uint64_t one = 1;
  (void)!write(impl_->wakeFd, &one, sizeof(one));
  if (impl_->thread.joinable()) impl_->thread.join();
}

void TcpStoreServer::setLocalClient(uint64_t clientId) { impl_->localClient.store(clientId); }

void TcpStoreServer::setStandbyWait(double sec) {
  impl_->standbyWaitNs.store(static_cast<int64_t>(std::clamp(sec, 0.01, kMirrorSec) * 1e9));
}

void TcpStoreServer::standFor(const std::string& host, int port, double silenceSec) {
  std::lock_guard<std::mutex> lock(impl_->standForMu);
  impl_->primaryHost = host;
  impl_->primaryPort = port;
  impl_->silenceNs = silenceSec > 0 ? static_cast<int64_t>(silenceSec * 1e9) : 0;
}

TcpStoreServer::Stats TcpStoreServer::stats() const {
  Stats s;
  s.accepted = impl_->accepted.load();
  s.open = impl_->open.load();
  s.rejected = impl_->rejected.load();
  s.requests = impl_->requests.load();
  s.mirrored = impl_->mirrored.load();
  s.promoted = impl_->promoted.load();
  s.superseded = impl_->superseded.load();
  s.stoodDown = impl_->stoodDown.load();
  return s;
}

// ---------------------------------------------------------------------------------------
// Client

namespace {

uint64_t timeoutMillis(Deadline d) {
  return d.never() ? proto::kNoTimeout : static_cast<uint64_t>(d.remainingMillis(INT_MAX));
}

// The client waits a little longer than the deadline it sends, so that the server's own
// TIMEOUT reply (naming the missing key) normally arrives first.
Deadline withGrace(Deadline d) {
  if (d.never()) return d;
  return Deadline::after(d.remainingMillis(INT_MAX) / 1000.0 + kReplyGraceSec);
}

std::string keyList(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 4; ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 4) s += ", ...";
  return s;
}

// What pollWatched returns when `watchFd` has something to read first.
constexpr int kWatched = 2;

// Waits up to `ms` for `events` on `fd`, and (when `watchFd` >= 0) for something to read on
// `watchFd`: 1 when the events came, 0 when not (yet), -1 with errno when poll failed,
// kWatched when `watchFd` is readable.
int pollWatched(int fd, short events, int watchFd, int ms) {
  pollfd p[2] = {{fd, events, 0}, {watchFd, POLLIN, 0}};
  const int pr = poll(p, watchFd >= 0 ? 2 : 1, ms);
  if (pr > 0 && watchFd >= 0 && p[1].revents != 0) return kWatched;
  return pr > 0 ? 1 : pr;
}

// One non-blocking connect attempt, waiting at most `ms` (and no longer than until `watchFd`
// has something to read). Returns the fd or -1 with `err`.
int connectOnce(const sockaddr_in& sa, int ms, std::string* err, int watchFd = -1) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = "socket failed: " + errnoText(errno);
    return -1;
  }
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    *err = errnoText(errno);
    close(fd);
    return -1;
  }
  if (rc != 0) {
    int pr;
    do {
      pr = pollWatched(fd, POLLOUT, watchFd, ms);
    } while (pr < 0 && errno == EINTR);
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (pr == kWatched) {
      *err = "given up: the watched connection has something to read";
      close(fd);
      return -1;
    }
    if (pr == 0) {
      *err = "connect timed out";
      close(fd);
      return -1;
    }
    if (pr < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
      *err = errnoText(pr < 0 ? errno : soerr);
      close(fd);
      return -1;
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

TcpStoreClient::TcpStoreClient(std::string address, int fd, double opTimeoutSec)
    : address_(std::move(address)), opTimeoutSec_(opTimeoutSec), fd_(fd) {}

TcpStoreClient::~TcpStoreClient() {
  tls_.reset();
  if (fd_ >= 0) close(fd_);
}

StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::connect(const std::string& host, int port, uint64_t nonce,
                                                                  Deadline deadline, double opTimeoutSec,
                                                                  const AuthKey& key, bool tls) {
  const std::string address = host + ":" + std::to_string(port);
  if (host.empty()) return invalidArgument("store address '" + address + "' has no host");
  if (port < 1 || port > 65535) return invalidArgument("store address '" + address + "': port out of range");
  const int64_t t0 = nowNanos();
  int backoffMs = 10;
  std::string lastError;
  auto pause = [&] {
    usleep(static_cast<useconds_t>(std::max(1, std::min(backoffMs, deadline.remainingMillis(backoffMs)))) * 1000);
    backoffMs = std::min(backoffMs * 2, 500);
  };
  for (;;) {
    sockaddr_in sa;
    int fd = -1;
    // Resolution is retried too: in a starting cluster the store's name may not exist yet.
    Status rs = resolveIpv4(host, port, false, &sa);
    if (rs.isOk()) {
      fd = connectOnce(sa, deadline.remainingMillis(2000), &lastError);
    } else {
      lastError = rs.message();
    }
    if (fd >= 0) {
      bool dropped = false;
      uint64_t id = 0;
      while (id == 0) id = randomNonce();
      auto client = handshake(address, fd, nonce, key, opTimeoutSec, tls, id, deadline, &dropped);
      if (client.isOk()) {
        client.value()->nonce_ = nonce;
        client.value()->key_ = key;
        client.value()->tlsWanted_ = tls;
        client.value()->clientId_ = id;
      }
      // A store that closed the connection before answering (it drops the oldest connections
      // not admitted yet when a flood of them arrives) is tried again until the deadline; a
      // store that answered, even with a refusal, is not.
      if (client.isOk() || !dropped || deadline.expired()) return client;
      BRAID_TRACE("store at %s closed the connection before answering; connecting again", address.c_str());
      lastError = client.status().message();
    }
    if (deadline.expired()) {
      char secs[32];
      snprintf(secs, sizeof(secs), "%.1f", (nowNanos() - t0) / 1e9);
      return Status(Code::kTimeout, "store at " + address + " is unreachable: " + lastError + " (retried for " + secs + " s)");
    }
    pause();
  }
}

StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::handshake(const std::string& address, int fd, uint64_t nonce,
                                                                    const AuthKey& key, double opTimeoutSec, bool tls,
                                                                    uint64_t clientId, Deadline until, bool* dropped,
                                                                    int watchFd) {
  if (tls && !key.present) {
    close(fd);
    return invalidArgument("store client: BRAID_TLS=1 needs the job's key");
  }
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(address, fd, opTimeoutSec));
  client->watchFd_ = watchFd;
  proto::Request hello;
  hello.op = proto::Op::kHello;
  hello.nonce = nonce;
  hello.clientId = clientId;
  if (key.present) hello.challenge = randomString(proto::kChallengeBytes);
  proto::Reply rep;
  Status s = client->roundTrip(hello, client->bounded(until), &rep);
  if (!s.isOk()) {
    if (s.code() == Code::kRemoteError) {
      *dropped = client->closedByPeer_;
      return Status(Code::kRemoteError, s.message() + " (during the HELLO handshake: is something else listening there?)");
    }
    if (s.code() == Code::kTimeout)
      return Status(Code::kTimeout, s.message() + " (a store answers HELLO at once: is something else listening there?)");
    return s;  // the store's own reason (a nonce mismatch), or the watched socket's (kAborted)
  }
  std::string serverChallenge;
  if (key.present) {
    // A store without the key answers OK: it may be a stranger's, and this rank would hand
    // it the job's data. Only a store that proves the key is talked to.
    if (rep.op != proto::Op::kChallenge)
      return Status(Code::kRemoteError, "authentication failed: the store at " + address +
                                            " does not ask for the job's key, which this rank has (BRAID_AUTH_KEY or "
                                            "BRAID_AUTH_KEY_FILE): it was started without it, or it is not the job's");
    const std::string_view n(reinterpret_cast<const char*>(&nonce), 8);
    if (!checkAuthProof(authProof(key, kServerLabel, {n, hello.challenge, rep.challenge}), rep.proof))
      return Status(Code::kRemoteError, "authentication failed: the store at " + address +
                                            " does not know this rank's key (a different BRAID_AUTH_KEY, or not the "
                                            "job's store)");
    serverChallenge = rep.challenge;
    proto::Request auth;
    auth.op = proto::Op::kAuth;
    const Digest proof = authProof(key, kClientLabel, {n, hello.challenge, rep.challenge});
    auth.proof.assign(reinterpret_cast<const char*>(proof.data()), proof.size());
    s = client->roundTrip(auth, client->bounded(until), &rep);
    if (!s.isOk()) {
      // Until AUTH is answered the connection is not admitted: a flood of strangers' may
      // still push it out (the oldest such go first), and then it is tried again like one
      // dropped before its HELLO was answered.
      if (s.code() == Code::kRemoteError) *dropped = client->closedByPeer_;
      return s;
    }
  }
  if (rep.op != proto::Op::kOk) return Status(Code::kRemoteError, "store at " + address + " answered HELLO with " + proto::opName(rep.op));
  if (tls) BRAID_RETURN_IF_ERROR(client->startTls(key, "store" + hello.challenge + serverChallenge));
  BRAID_TRACE("connected to store at %s%s", address.c_str(), tls ? " (TLS)" : "");
  return client;
}

Status TcpStoreClient::startTls(const AuthKey& key, const std::string& binding) {
  auto t = TlsStream::create(fd_, TlsStream::Role::kClient, key, binding);
  if (!t.isOk()) return t.status();
  tls_ = std::move(t).value();
  const Deadline d = opDeadline();
  for (;;) {
    const int r = tls_->handshake();
    if (r == 1) return Status::ok();
    if (r < 0 || d.expired())
      return Status(Code::kRemoteError, "TLS with the store at " + address_ + " failed: " +
                                            (r < 0 ? tls_->error() : std::string("no answer")) +
                                            " (is BRAID_TLS the same for every rank and the store's process?)");
    if (waitLocked(tls_->wantEvents(), d.remainingMillis(200)) == kWatched) return watchedLocked();
  }
}

int TcpStoreClient::waitLocked(short events, int ms) { return pollWatched(fd_, events, watchFd_, ms); }

Status TcpStoreClient::watchedLocked() const {
  return Status(Code::kAborted, "given up on the store at " + address_ + ": the connection it was asked for has an answer");
}

Status TcpStoreClient::lose(const std::string& why) {
  tls_.reset();
  {
    std::lock_guard<std::mutex> lock(fdMu_);
    if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  const bool asked = interrupted_.load();
  // After going over to a standby, the store lost now is that standby.
  const std::string at = servingPort_ != 0 ? servingHost_ + ":" + std::to_string(servingPort_) : address_;
  broken_ = Status(Code::kRemoteError, "store at " + at + " is unreachable: " + (asked ? "interrupted" : why));
  inbuf_.clear();
  // With a standby to go to, the loss is told when the client goes there.
  if (!asked && !quiet_.load() && !canFailOverLocked()) BRAID_WARN("%s", broken_.message().c_str());
  return broken_;
}

bool TcpStoreClient::canFailOverLocked() const {
  return fd_ < 0 && standbyPort_ != 0 && !failedOver_ && !interrupted_.load();
}

void TcpStoreClient::setStandby(const std::string& host, int port, double silenceSec) {
  std::lock_guard<std::mutex> lock(mu_);
  // A client that went over to its standby already may go over once more, to a standby
  // started since for the store it uses now.
  if (failedOver_ && !(host == servingHost_ && port == servingPort_)) failedOver_ = false;
  standbyHost_ = host;
  standbyPort_ = port;
  probeAfterNs_ = 0;
  takeOverNs_ = 0;
  if (silenceSec > 0) {
    const double probeAfter = std::clamp(silenceSec / 4, 0.25, 10.0);
    probeAfterNs_ = static_cast<int64_t>(probeAfter * 1e9);
    takeOverNs_ = static_cast<int64_t>((silenceSec + 2 * probeAfter + TcpStoreServer::kHeartbeatSec) * 1e9);
  }
}

StatusOr<bool> TcpStoreClient::probe(const std::string& host, int port, uint64_t nonce, const AuthKey& key, bool tls,
                                     double timeoutSec, int watchFd) {
  const std::string where = host + ":" + std::to_string(port);
  const Deadline deadline = Deadline::after(timeoutSec);
  sockaddr_in sa;
  BRAID_RETURN_IF_ERROR(resolveIpv4(host, port, false, &sa));
  std::string err;
  int fd = connectOnce(sa, std::max(1, deadline.remainingMillis(INT_MAX)), &err, watchFd);
  if (fd < 0) return Status(Code::kRemoteError, "nothing answers at " + where + ": " + err);
  bool dropped = false;
  auto c = handshake(where, fd, nonce, key, std::max(0.001, deadline.remainingMillis(INT_MAX) / 1000.0), tls, 0,
                     deadline, &dropped, watchFd);
  if (!c.isOk()) return c.status();
  proto::Request req;
  req.op = proto::Op::kCheck;
  req.keys = {kStandbyKey};
  proto::Reply rep;
  Status s = c.value()->roundTrip(req, deadline, &rep);
  if (s.code() == Code::kInProgress) return false;
  BRAID_RETURN_IF_ERROR(s);
  return true;
}

Status TcpStoreClient::probeStandbyIfDueLocked(Deadline deadline) {
  if (probeAfterNs_ == 0 || standbyPort_ == 0 || failedOver_ || interrupted_.load()) return Status::ok();
  const int64_t now = nowNanos();
  if (now < nextProbeNs_) return Status::ok();
  nextProbeNs_ = now + probeAfterNs_;
  // A standby that is stopped too does not hold the request past its deadline, nor its reply
  // once it came: the question ends when the store's connection has something to read.
  const double budget = std::clamp(deadline.remainingMillis(INT_MAX) / 1000.0, 0.1, kProbeSec);
  auto serves = probe(standbyHost_, standbyPort_, nonce_, key_, tlsWanted_, budget, fd_);
  if (!serves.isOk() || !serves.value()) return Status::ok();
  char why[160];
  snprintf(why, sizeof(why), "it has not answered for %.1f s, and its standby at %s:%d serves in its place",
           (nowNanos() - requestSentNs_) / 1e9, standbyHost_.c_str(), standbyPort_);
  return lose(why);
}

bool TcpStoreClient::servingStandby(std::string* host, int* port) {
  std::lock_guard<std::mutex> lock(mu_);
  if (servingPort_ == 0 || fd_ < 0) return false;
  *host = servingHost_;
  *port = servingPort_;
  return true;
}

std::string TcpStoreClient::localHost() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return "";
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "";
  char buf[INET_ADDRSTRLEN] = "";
  return inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf)) ? buf : "";
}

Status TcpStoreClient::declareStandbySource(Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kStandby;
  proto::Reply rep;
  return roundTrip(req, bounded(deadline), &rep);
}

Status TcpStoreClient::failOverLocked(Deadline deadline) {
  failedOver_ = true;
  const Status lost = broken_;
  const std::string where = standbyHost_ + ":" + std::to_string(standbyPort_);
  sockaddr_in sa;
  BRAID_RETURN_IF_ERROR(resolveIpv4(standbyHost_, standbyPort_, false, &sa));
  std::string err;
  // The standby listens from the start: a refused connection means it is gone too, and a
  // caller without a deadline still gets an answer within the op timeout.
  deadline = bounded(deadline);
  for (;;) {
    errno = 0;
    int fd = connectOnce(sa, std::max(1, deadline.remainingMillis(2000)), &err);
    if (fd < 0 && err == errnoText(ECONNREFUSED))
      return Status(Code::kRemoteError, "its standby at " + where + " is gone too: " + err);
    if (fd >= 0) {
      bool dropped = false;
      auto c = handshake(where, fd, nonce_, key_, opTimeoutSec_, tlsWanted_, clientId_, deadline, &dropped);
      if (c.isOk()) {
        std::unique_ptr<TcpStoreClient> other = std::move(c).value();
        std::lock_guard<std::mutex> lock(fdMu_);
        if (interrupted_.load()) return broken_;
        fd_ = other->fd_;
        other->fd_ = -1;
        tls_ = std::move(other->tls_);
        inbuf_ = std::move(other->inbuf_);
        owedReplies_ = 0;
        closedByPeer_ = false;
        broken_ = Status::ok();
        servingHost_ = standbyHost_;
        servingPort_ = standbyPort_;
        break;
      }
      err = c.status().message();
      if (!dropped) return Status(Code::kRemoteError, "its standby at " + where + " refused: " + err);
    }
    if (deadline.expired() || interrupted_.load())
      return Status(Code::kRemoteError, "its standby at " + where + " is unreachable too: " + err);
    usleep(20 * 1000);
  }
  if (!quiet_.load())
    BRAID_WARN("%s; going on with its standby at %s", lost.message().c_str(), where.c_str());
  // This client's SET_ON_CLOSE keys, held by the lost store for this connection, are asked
  // of the standby again (it asks again while the standby does not serve yet).
  for (const auto& [k, v] : onClose_) {
    proto::Request r;
    r.op = proto::Op::kSetOnClose;
    r.keys = {k};
    r.value = v;
    proto::Reply rep;
    Status s;
    while ((s = roundTripLocked(r, deadline, &rep)).code() == Code::kInProgress && !deadline.expired()) usleep(10 * 1000);
    BRAID_RETURN_IF_ERROR(s);
  }
  return Status::ok();
}

void TcpStoreClient::interrupt() {
  std::lock_guard<std::mutex> lock(fdMu_);
  interrupted_.store(true);
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

ssize_t TcpStoreClient::readChunkLocked(int flags) {
  const size_t old = inbuf_.size();
  inbuf_.resize(old + kReadChunk);
  ssize_t n;
  if (tls_) {
    iovec v{&inbuf_[old], kReadChunk};
    n = tls_->readv(&v, 1);
  } else {
    n = recv(fd_, &inbuf_[old], kReadChunk, flags);
  }
  const int err = errno;
  inbuf_.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
  errno = err;
  return n;
}

Status TcpStoreClient::readReply(Deadline deadline, proto::Reply* reply, bool* timedOut) {
  *timedOut = false;
  // A store that stopped answering may be about to be replaced by its standby: wait until
  // the standby could have taken over (and been asked) before giving up.
  if (probeAfterNs_ > 0 && standbyPort_ != 0 && !failedOver_ && !deadline.never() &&
      deadline.nanos() < requestSentNs_ + takeOverNs_)
    deadline = Deadline::atNanos(requestSentNs_ + takeOverNs_);
  for (;;) {
    proto::Frame f;
    proto::DecodeResult r = proto::decodeFrame(inbuf_.data(), inbuf_.size(), proto::Direction::kReply, &f);
    if (r.kind == proto::DecodeResult::kMalformed) return lose("it sent a malformed reply: " + r.error);
    if (r.kind == proto::DecodeResult::kFrame) {
      inbuf_.erase(0, r.consumed);
      auto parsed = proto::parseReply(f);
      if (!parsed.isOk()) return lose("it sent a malformed reply: " + parsed.status().message());
      *reply = std::move(parsed).value();
      return Status::ok();
    }
    if (deadline.expired()) {
      *timedOut = true;
      return Status(Code::kTimeout, "no reply");
    }
    BRAID_RETURN_IF_ERROR(probeStandbyIfDueLocked(deadline));
    // With a standby to ask, wait in short steps so that the question is asked on time.
    const int stepMs = probeAfterNs_ > 0 && !failedOver_ ? 250 : 1000;
    // Over TLS the session may hold decrypted bytes the socket no longer shows: read first,
    // wait only when it has nothing.
    if (!tls_) {
      const int pr = waitLocked(POLLIN, deadline.remainingMillis(stepMs));
      if (pr == kWatched) return watchedLocked();
      if (pr < 0 && errno != EINTR) return lose("poll failed: " + errnoText(errno));
      if (pr <= 0) continue;
    }
    const ssize_t n = readChunkLocked(0);
    if (tls_ && n < 0 && errno == EAGAIN) {
      const int pr = waitLocked(tls_->wantEvents(), deadline.remainingMillis(stepMs));
      if (pr == kWatched) return watchedLocked();
      if (pr < 0 && errno != EINTR) return lose("poll failed: " + errnoText(errno));
      continue;
    }
    if (tls_ && n < 0 && errno == EPROTO) return lose("TLS failed: " + tls_->error());
    if (n == 0) {
      closedByPeer_ = true;
      return lose("the connection was closed by the store");
    }
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) closedByPeer_ = true;
    if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return lose("recv failed: " + errnoText(errno));
    // A reply that is arriving comes from a store that answers, however long a large value
    // takes to cross a slow link: each piece gives it the grace again, up to the op timeout
    // from the request (a parked GET's own deadline is only its slice plus the grace). That
    // may pass the caller's own deadline: the rest of the reply would have to be read before
    // the connection's next request anyway.
    if (n > 0 && !deadline.never()) {
      const int64_t more = std::min<int64_t>(nowNanos() + static_cast<int64_t>(kReplyGraceSec * 1e9),
                                             requestSentNs_ + static_cast<int64_t>(opTimeoutSec_ * 1e9));
      if (more > deadline.nanos()) deadline = Deadline::atNanos(more);
    }
  }
}

Status TcpStoreClient::parkedRoundTrip(proto::Request req, Deadline deadline, proto::Reply* reply) {
  const double sliceSec =
      std::min(kParkSliceMaxSec, kParkSliceSec * std::max(1.0, static_cast<double>(req.keys.size()) / 64.0));
  for (;;) {
    const bool last = !deadline.never() && deadline.remainingMillis(INT_MAX) <= sliceSec * 1000;
    const Deadline slice = last ? deadline : Deadline::after(sliceSec);
    req.timeoutMs = timeoutMillis(slice);
    BRAID_RETURN_IF_ERROR(roundTrip(req, withGrace(slice), reply));
    if (reply->op != proto::Op::kTimeout || last) return Status::ok();
    // Whoever queued for the connection meanwhile goes first (a mutex lets its unlocker
    // take it straight back), for a moment at most.
    for (int i = 0; i < 100 && queued_.load(std::memory_order_relaxed) > 0; ++i) usleep(100);
  }
}

Status TcpStoreClient::roundTrip(const proto::Request& req, Deadline replyDeadline, proto::Reply* reply) {
  queued_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  queued_.fetch_sub(1, std::memory_order_relaxed);
  Status s = roundTripLocked(req, replyDeadline, reply);
  // The store is gone and its standby is known: ask there (once), as often as it says it does
  // not serve yet (it may not have seen the store go), until the deadline.
  if (!s.isOk() && canFailOverLocked()) {
    // A request given time past its deadline for the standby to take over (readReply) gets a
    // moment there too.
    if (!replyDeadline.never() && replyDeadline.remainingMillis(INT_MAX) < kProbeSec * 1000)
      replyDeadline = Deadline::after(kProbeSec);
    Status f = failOverLocked(replyDeadline);
    if (!f.isOk()) {
      broken_ = Status(Code::kRemoteError, s.message() + "; " + f.message());
      if (!quiet_.load()) BRAID_WARN("%s", broken_.message().c_str());
      return broken_;
    }
    proto::Request again = req;
    bool notServing = false;
    for (;;) {
      // A wait's server-side timeout counts from now.
      if (again.timeoutMs != proto::kNoTimeout && !replyDeadline.never())
        again.timeoutMs = std::min<uint64_t>(
            req.timeoutMs, static_cast<uint64_t>(std::max(0, replyDeadline.remainingMillis(INT_MAX) -
                                                                 static_cast<int>(kReplyGraceSec * 1000))));
      s = roundTripLocked(again, replyDeadline, reply);
      if (s.code() != Code::kInProgress && !(notServing && s.code() == Code::kTimeout)) break;
      notServing = true;
      if (replyDeadline.expired())
        return Status(Code::kRemoteError, "the store at " + address_ + " is gone and its standby at " + standbyHost_ +
                                              ":" + std::to_string(standbyPort_) +
                                              " did not take over (it never stood by for it)");
      usleep(10 * 1000);
    }
  }
  return s;
}

Status TcpStoreClient::roundTripLocked(const proto::Request& req, Deadline replyDeadline, proto::Reply* reply) {
  std::string frame;
  BRAID_RETURN_IF_ERROR(proto::encodeRequest(req, &frame));
  if (fd_ < 0) return broken_;
  requestSentNs_ = nowNanos();
  nextProbeNs_ = requestSentNs_ + probeAfterNs_;
  bool timedOut = false;
  // Replies to requests whose callers gave up are still on their way: consume them first so
  // that this request gets its own reply.
  while (owedReplies_ > 0) {
    proto::Reply stale;
    Status s = readReply(replyDeadline, &stale, &timedOut);
    if (timedOut)
      return Status(Code::kTimeout, "store at " + address_ + " has not answered an earlier request; is it stalled?");
    if (!s.isOk()) return s;
    --owedReplies_;
  }
  const int leftMs = replyDeadline.remainingMillis(INT_MAX);
  BRAID_RETURN_IF_ERROR(sendFrameLocked(frame, replyDeadline, req.op, false));
  Status s = readReply(replyDeadline, reply, &timedOut);
  if (timedOut) {
    ++owedReplies_;
    if (!inbuf_.empty())
      return Status(Code::kTimeout, "store at " + address_ + " stopped sending its reply to a " +
                                        proto::opName(req.op) + " request after " + std::to_string(inbuf_.size()) +
                                        " bytes; is it stalled?");
    // Name the wait: a caller whose own time had nearly run out is not a stalled store.
    return Status(Code::kTimeout, "store at " + address_ + " did not answer a " + proto::opName(req.op) +
                                      " request in " + std::to_string(leftMs) +
                                      " ms (the time the caller had left); is it stalled?");
  }
  if (!s.isOk()) return s;
  if (reply->op == proto::Op::kError) return Status(reply->code, "store at " + address_ + ": " + reply->message);
  return Status::ok();
}

Status TcpStoreClient::sendFrameLocked(const std::string& frame, Deadline deadline, proto::Op op, bool orNothing) {
  size_t sent = 0;
  // Over TLS, sent counts what the session took; what it still holds goes out below.
  while (sent < frame.size() || (tls_ && tls_->pending() > 0)) {
    ssize_t n;
    if (sent == frame.size()) {
      n = tls_->flush() == 0 ? 0 : -1;
      if (n == 0) continue;
    } else if (tls_) {
      iovec v{const_cast<char*>(frame.data()) + sent, frame.size() - sent};
      n = tls_->writev(&v, 1);
    } else {
      n = send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return lose(std::string(tls_ ? "TLS write failed: " + tls_->error() : "send failed: " + errnoText(errno)));
    // A socket that takes none of it now: a request that may be skipped is.
    if (orNothing && sent == 0 && !(tls_ && tls_->pending() > 0)) return Status(Code::kWouldBlock, "socket full");
    if (deadline.expired()) {
      // Half a frame on the wire cannot be taken back: the stream is unusable.
      if (sent > 0) return lose("timed out in the middle of sending a request");
      return Status(Code::kTimeout, "store at " + address_ + " did not accept a " + proto::opName(op) +
                                        " request in time; is it stalled?");
    }
    const int pr = waitLocked(tls_ ? tls_->wantEvents() : static_cast<short>(POLLOUT), deadline.remainingMillis(1000));
    if (pr == kWatched) return watchedLocked();
    if (pr < 0 && errno != EINTR) return lose("poll failed: " + errnoText(errno));
  }
  return Status::ok();
}

Status TcpStoreClient::ping(Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return broken_;
  // The replies to earlier pings that have come, read without waiting; the store's end of
  // the connection, if it came instead.
  for (;;) {
    proto::Frame f;
    proto::DecodeResult r = proto::decodeFrame(inbuf_.data(), inbuf_.size(), proto::Direction::kReply, &f);
    if (r.kind == proto::DecodeResult::kMalformed) return lose("it sent a malformed reply: " + r.error);
    if (r.kind == proto::DecodeResult::kFrame) {
      inbuf_.erase(0, r.consumed);
      if (owedReplies_ > 0) --owedReplies_;
      continue;
    }
    const ssize_t n = readChunkLocked(MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) {
      closedByPeer_ = true;
      return lose("the connection was closed by the store");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == ECONNRESET || errno == EPIPE) closedByPeer_ = true;
    return lose(tls_ ? "TLS read failed: " + tls_->error() : "recv failed: " + errnoText(errno));
  }
  proto::Request req;
  req.op = proto::Op::kCheck;
  req.keys = {kStandbyKey};
  std::string frame;
  BRAID_RETURN_IF_ERROR(proto::encodeRequest(req, &frame));
  Status s = sendFrameLocked(frame, deadline, req.op, true);
  if (s.code() == Code::kWouldBlock) return Status::ok();  // its earlier ones wait unread: it knows we are here
  BRAID_RETURN_IF_ERROR(s);
  ++owedReplies_;
  return Status::ok();
}

namespace {

Status unexpected(const std::string& address, proto::Op req, proto::Op rep) {
  return Status(Code::kRemoteError, "store at " + address + " answered " + proto::opName(req) + " with " + proto::opName(rep));
}

// Splits a key list into runs that each fit one frame with room to spare, so that a wait
// on every rank's key works for any number of ranks.
std::vector<std::pair<size_t, size_t>> keyBatches(const std::vector<std::string>& keys) {
  constexpr size_t kMaxBatchKeys = 8192;
  constexpr size_t kMaxBatchBytes = 16u << 20;
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0, bytes = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > begin && (i - begin >= kMaxBatchKeys || bytes + keys[i].size() + 4 > kMaxBatchBytes)) {
      out.emplace_back(begin, i);
      begin = i;
      bytes = 0;
    }
    bytes += keys[i].size() + 4;
  }
  if (begin < keys.size()) out.emplace_back(begin, keys.size());
  return out;
}

Status waitTimeout(const std::string& what, const std::string& missingKey) {
  return Status(Code::kTimeout, "timed out waiting for store key '" + missingKey + "' (" + what + ")");
}

}  // namespace

Status TcpStoreClient::set(const std::string& key, const std::string& value, Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kSet;
  req.keys = {key};
  req.value = value;
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
  if (rep.op != proto::Op::kOk) return unexpected(address_, req.op, rep.op);
  return Status::ok();
}

StatusOr<std::string> TcpStoreClient::get(const std::string& key, Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kGet;
  req.keys = {key};
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(parkedRoundTrip(req, deadline, &rep));
  if (rep.op == proto::Op::kTimeout) return waitTimeout("get", rep.value);
  if (rep.op != proto::Op::kValue) return unexpected(address_, req.op, rep.op);
  return std::move(rep.value);
}

StatusOr<int64_t> TcpStoreClient::add(const std::string& key, int64_t delta, Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kAdd;
  req.keys = {key};
  req.delta = delta;
  req.requestNumber = ++lastAddNumber_;  // asked again of a standby, it is not counted twice
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
  if (rep.op != proto::Op::kInt) return unexpected(address_, req.op, rep.op);
  return rep.number;
}

StatusOr<std::string> TcpStoreClient::compareSet(const std::string& key, const std::string& expected,
                                                 const std::string& desired, Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kCompareSet;
  req.keys = {key};
  req.expected = expected;
  req.value = desired;
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
  if (rep.op != proto::Op::kValue) return unexpected(address_, req.op, rep.op);
  return std::move(rep.value);
}

StatusOr<int64_t> TcpStoreClient::fence(const std::vector<uint64_t>& clients, const std::string& why,
                                        Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kFence;
  req.clients = clients;
  req.value = why;
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
  if (rep.op != proto::Op::kInt) return unexpected(address_, req.op, rep.op);
  return rep.number;
}

Status TcpStoreClient::setOnClose(const std::string& key, const std::string& value, Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kSetOnClose;
  req.keys = {key};
  req.value = value;
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
  if (rep.op != proto::Op::kOk) return unexpected(address_, req.op, rep.op);
  std::lock_guard<std::mutex> lock(mu_);
  onClose_[key] = value;  // for a standby, should this connection be lost
  return Status::ok();
}

Status TcpStoreClient::addOnClose(const std::string& key, int64_t delta, Deadline deadline) {
  // One entry per key holds the sum ("\x01add N"); the store keeps the last value sent.
  std::lock_guard<std::mutex> serial(addOnCloseMu_);
  int64_t sum = delta;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = onClose_.find(key);
    int64_t cur = 0;
    if (it != onClose_.end() && it->second.rfind("\x01" "add ", 0) == 0 && parseCounter(it->second.substr(5), &cur))
      sum = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
  }
  if (sum == 0) return cancelOnClose(key, deadline).status();
  return setOnClose(key, "\x01" "add " + std::to_string(sum), deadline);
}

StatusOr<bool> TcpStoreClient::cancelOnClose(const std::string& key, Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kCancelOnClose;
  req.keys = {key};
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
  if (rep.op != proto::Op::kBool) return unexpected(address_, req.op, rep.op);
  std::lock_guard<std::mutex> lock(mu_);
  onClose_.erase(key);
  return rep.flag;
}

Status TcpStoreClient::wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (auto [begin, end] : keyBatches(keys)) {
    proto::Request req;
    req.op = proto::Op::kWait;
    req.keys.assign(keys.begin() + begin, keys.begin() + end);
    proto::Reply rep;
    BRAID_RETURN_IF_ERROR(parkedRoundTrip(req, deadline, &rep));
    if (rep.op == proto::Op::kTimeout) return waitTimeout("wait for " + keyList(keys), rep.value);
    if (rep.op != proto::Op::kOk) return unexpected(address_, req.op, rep.op);
  }
  return Status::ok();
}

StatusOr<bool> TcpStoreClient::check(const std::vector<std::string>& keys, Deadline deadline) {
  for (auto [begin, end] : keyBatches(keys)) {
    proto::Request req;
    req.op = proto::Op::kCheck;
    req.keys.assign(keys.begin() + begin, keys.begin() + end);
    proto::Reply rep;
    BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
    if (rep.op != proto::Op::kBool) return unexpected(address_, req.op, rep.op);
    if (!rep.flag) return false;
  }
  return true;
}

StatusOr<bool> TcpStoreClient::deleteKey(const std::string& key, Deadline deadline) {
  proto::Request req;
  req.op = proto::Op::kDelete;
  req.keys = {key};
  proto::Reply rep;
  BRAID_RETURN_IF_ERROR(roundTrip(req, bounded(deadline), &rep));
  if (rep.op != proto::Op::kBool) return unexpected(address_, req.op, rep.op);
  return rep.flag;
}

StatusOr<std::vector<std::string>> TcpStoreClient::multiGet(const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (auto [begin, end] : keyBatches(keys)) {
    proto::Request req;
    req.op = proto::Op::kMultiGet;
    req.keys.assign(keys.begin() + begin, keys.begin() + end);
    proto::Reply rep;
    Status s = parkedRoundTrip(req, deadline, &rep);
    if (s.code() == Code::kWouldBlock) {
      // The values exist but do not fit one reply frame: fetch them one at a time.
      BRAID_ASSIGN_OR_RETURN(auto part, Store::multiGet(req.keys, deadline));
      for (auto& v : part) values.push_back(std::move(v));
      continue;
    }
    BRAID_RETURN_IF_ERROR(s);
    if (rep.op == proto::Op::kTimeout) return waitTimeout("multiGet of " + keyList(keys), rep.value);
    if (rep.op != proto::Op::kValues) return unexpected(address_, req.op, rep.op);
    if (rep.values.size() != req.keys.size()) {
      std::lock_guard<std::mutex> lock(mu_);
      return lose("it answered MULTI_GET of " + std::to_string(req.keys.size()) + " keys with " +
                  std::to_string(rep.values.size()) + " values");
    }
    for (auto& v : rep.values) values.push_back(std::move(v));
  }
  return values;
}

}  // namespace braid::bootstrap

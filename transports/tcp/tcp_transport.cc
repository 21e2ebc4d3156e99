#include "transports/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/random.h"
#include "common/tls.h"
#include "transports/tcp/socket_util.h"
#include "transports/tcp/tcp_connection.h"

namespace braid::transport {
namespace tcp {
namespace {

// Sockets accepted whose handshake has not arrived yet. Anyone can connect to the port, so
// their number is bounded; the oldest is dropped first when a flood arrives.
constexpr size_t kMaxUnidentified = 1024;
constexpr int kListenBacklog = 4096;
constexpr int kMaxSocketsPerPeer = 64;

// Refused or unreachable connects are retried with a growing pause: the receiver may still
// be coming up, and a tight loop would flood a busy listener with SYNs.
constexpr int64_t kFirstRetryNs = 10 * 1000 * 1000;
constexpr int64_t kMaxRetryNs = 500 * 1000 * 1000;

bool retryableConnectError(int err) {
  return isConnectionLoss(err) || err == EAGAIN || err == EADDRNOTAVAIL || err == EINPROGRESS;
}

std::string errnoText(int err) { return err == 0 ? std::string("no answer") : std::strerror(err); }

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportConfig& cfg) : cfg_(cfg) {}
  ~TcpTransport() override {
    for (Listener& l : listeners_) closeFd(l.fd);
    for (Incoming& in : incoming_) closeFd(in.fd);
  }

  const char* name() const override { return "tcp"; }

  // Any two ranks of the same job can talk over TCP; everything else is preferred.
  int canConnect(const PeerInfo& local, const PeerInfo& remote) const override {
    return local.nonce == remote.nonce ? 10 : 0;
  }

  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override;
  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override;
  Status establish(Deadline deadline) override;

  // A peer's end shows on every socket to or from it at once (the kernel closes them with its
  // process), whatever the connection was doing; a stalled peer's do not end.
  bool sawPeerFail(int rank) override {
    for (const auto& w : sendWatch_)
      if (auto s = w.lock(); s && s->peer == rank)
        for (int fd : s->fds)
          if (socketEnded(fd)) return true;
    for (const auto& w : recvSets_)
      if (auto s = w.lock(); s && s->peer == rank)
        for (int fd : s->fds)
          if (socketEnded(fd)) return true;
    return false;
  }

 private:
  // An accepted socket whose handshake is still arriving.
  struct Incoming {
    int fd = -1;
    sockaddr_in from{};
    uint8_t buf[kHandshakeBytes] = {0};
    size_t have = 0;
  };

  // A listening socket, one per distinct bind address (channels may use different NICs).
  struct Listener {
    std::string netIf;  // what it was opened for ("" = cfg.netIf)
    int fd = -1;
    sockaddr_in addr{};  // the advertised address
    std::string blob;    // the same, as text
  };

  Status checkConfig(int peer, int channel) const;
  // The interface channel `channel` listens on: its cfg.channelNetIfs entry when that names
  // an interface with an IPv4 address here, else cfg.netIf.
  std::string netIfForChannel(int channel);
  StatusOr<const Listener*> ensureListening(const std::string& netIf);
  void acceptAll();
  void acceptFrom(int listenFd);
  // Reads handshakes of unidentified sockets; binds or refuses each complete one.
  void serviceIncoming();
  // Returns true when `in` was bound to its receive connection.
  bool bindIncoming(Incoming& in);
  // The receive connection waiting for (`peer`, `channel`), or null.
  std::shared_ptr<SocketSet> expectedSet(int peer, int channel);
  int missingSockets();
  Status timeoutError();

  TransportConfig cfg_;
  std::vector<Listener> listeners_;
  std::map<int, std::string> channelNetIf_;  // resolved netIfForChannel() answers
  // Receive connections still waiting for sockets, by (peer, channel).
  std::map<std::pair<int, int>, std::weak_ptr<SocketSet>> expected_;
  // Every connection's sockets, for sawPeerFail.
  std::vector<std::weak_ptr<SocketSet>> recvSets_;
  std::vector<std::weak_ptr<const SocketWatch>> sendWatch_;
  std::vector<Incoming> incoming_;
  // Why the last connection that claimed to come from a rank was refused; surfaced in the
  // establish() timeout because a misconfigured peer otherwise just looks missing.
  std::map<int, std::string> refusedFrom_;
  // BRAID_TLS: sessions whose handshake establish() still has to complete (both roles).
  struct Handshaking {
    std::weak_ptr<TlsStream> tls;
    int fd = -1;
    int peer = -1;
    int channel = -1;
  };
  std::vector<Handshaking> handshakes_;
  // Advances every pending TLS handshake once; the number still pending, or a failure
  // naming the peer. Adds what they wait for to `pfds`.
  StatusOr<int> driveHandshakes(std::vector<pollfd>* pfds);
};

Status TcpTransport::checkConfig(int peer, int channel) const {
  if (peer < 0 || peer >= cfg_.nranks || peer == cfg_.rank) {
    return invalidArgument("tcp: peer rank " + std::to_string(peer) + " out of range for rank " +
                           std::to_string(cfg_.rank) + " of " + std::to_string(cfg_.nranks));
  }
  if (channel < 0) return invalidArgument("tcp: negative channel " + std::to_string(channel));
  if (cfg_.slotBytes == 0 || cfg_.slotBytes > UINT32_MAX) {
    return invalidArgument("tcp: slotBytes must be in [1, 4 GiB), got " + std::to_string(cfg_.slotBytes));
  }
  if (cfg_.nslots < 1) return invalidArgument("tcp: nslots must be at least 1");
  if (cfg_.socketsPerPeer < 1 || cfg_.socketsPerPeer > kMaxSocketsPerPeer) {
    return invalidArgument("tcp: socketsPerPeer must be in [1, " + std::to_string(kMaxSocketsPerPeer) +
                           "], got " + std::to_string(cfg_.socketsPerPeer));
  }
  return Status::ok();
}

std::string TcpTransport::netIfForChannel(int channel) {
  if (channel < 0 || channel >= static_cast<int>(cfg_.channelNetIfs.size()) || cfg_.channelNetIfs[channel].empty())
    return cfg_.netIf;
  auto it = channelNetIf_.find(channel);
  if (it != channelNetIf_.end()) return it->second;
  // The NIC comes from the topology, which may describe another machine (BRAID_TOPO_FILE)
  // or name an interface without an IPv4 address: then the default address serves.
  const std::string& want = cfg_.channelNetIfs[channel];
  std::string use = want;
  auto addr = resolveBindAddress(want);
  if (!addr.isOk()) {
    BRAID_INFO("tcp: rank %d channel %d: topology NIC interface %s has no IPv4 address here; using %s", cfg_.rank,
               channel, want.c_str(), cfg_.netIf.empty() ? "the default address" : cfg_.netIf.c_str());
    use = cfg_.netIf;
  }
  channelNetIf_[channel] = use;
  return use;
}

StatusOr<const TcpTransport::Listener*> TcpTransport::ensureListening(const std::string& netIf) {
  for (const Listener& l : listeners_)
    if (l.netIf == netIf) return &l;
  BRAID_ASSIGN_OR_RETURN(in_addr bindAddr, resolveBindAddress(netIf));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return systemError("socket", errno);
  auto fail = [fd](Status s) {
    closeFd(fd);
    return s;
  };
  // Before listen(): accepted sockets inherit the buffer sizes, and the window scale is
  // fixed during the TCP handshake.
  Status s = setBufferSizes(fd);
  if (!s.isOk()) return fail(s);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr = bindAddr;
  addr.sin_port = 0;
  if (cfg_.portLo > 0) {
    // BRAID_PORT_RANGE: the first free port of the range.
    bool bound = false;
    for (int p = cfg_.portLo; p <= cfg_.portHi && !bound; ++p) {
      addr.sin_port = htons(static_cast<uint16_t>(p));
      if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        bound = true;
      } else if (errno != EADDRINUSE && errno != EACCES) {
        return fail(systemError("bind", errno).withContext("tcp: listening on " + formatAddress(addr)));
      }
    }
    if (!bound) {
      addr.sin_port = 0;
      return fail(Status(Code::kSystemError, "tcp: no free port in BRAID_PORT_RANGE=" + std::to_string(cfg_.portLo) +
                                                 "-" + std::to_string(cfg_.portHi) + " on " +
                                                 formatAddress(addr) + " (rank " + std::to_string(cfg_.rank) + ")"));
    }
  } else if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return fail(systemError("bind", errno).withContext("tcp: listening on " + formatAddress(addr)));
  }
  if (listen(fd, kListenBacklog) != 0) return fail(systemError("listen", errno));
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return fail(systemError("getsockname", errno));
  }
  if (addr.sin_addr.s_addr == htonl(INADDR_ANY)) addr.sin_addr = defaultAdvertisedAddress();
  Listener l;
  l.netIf = netIf;
  l.fd = fd;
  l.addr = addr;
  l.blob = formatAddress(addr);
  BRAID_INFO("tcp: rank %d listening on %s%s%s", cfg_.rank, l.blob.c_str(), netIf.empty() ? "" : " for ",
             netIf.c_str());
  listeners_.push_back(std::move(l));
  return &listeners_.back();
}

StatusOr<std::unique_ptr<Connection>> TcpTransport::createRecv(int peer, int channel, std::string* blob) {
  BRAID_RETURN_IF_ERROR(checkConfig(peer, channel));
  auto key = std::make_pair(peer, channel);
  auto it = expected_.find(key);
  if (it != expected_.end() && !it->second.expired()) {
    return invalidArgument("tcp: a receive connection from rank " + std::to_string(peer) + " on channel " +
                           std::to_string(channel) + " is already being set up");
  }
  BRAID_ASSIGN_OR_RETURN(const Listener* listener, ensureListening(netIfForChannel(channel)));
  auto set = std::make_shared<SocketSet>(peer, channel, cfg_.socketsPerPeer);
  set->challenge = randomString(kChallengeBytes);
  expected_[key] = set;
  recvSets_.push_back(set);
  *blob = formatBlob(listener->addr, set->challenge);
  return std::unique_ptr<Connection>(new TcpRecvConnection(cfg_, std::move(set)));
}

StatusOr<std::unique_ptr<Connection>> TcpTransport::connectSend(int peer, int channel, const std::string& blob) {
  BRAID_RETURN_IF_ERROR(checkConfig(peer, channel));
  sockaddr_in addr{};
  std::string challenge;
  if (!parseBlob(blob, &addr, &challenge)) {
    return invalidArgument("tcp: malformed address '" + blob + "' from rank " + std::to_string(peer));
  }

  enum class State { kIdle, kConnecting, kHandshake, kDone };
  struct Outgoing {
    int fd = -1;
    State state = State::kIdle;
    int64_t retryAt = 0;
    int64_t backoff = kFirstRetryNs;
    size_t sent = 0;
    int lastErr = 0;
    uint8_t hs[kHandshakeBytes];
  };
  const int nsockets = cfg_.socketsPerPeer;
  std::vector<Outgoing> out(static_cast<size_t>(nsockets));
  for (int i = 0; i < nsockets; ++i) {
    Handshake h;
    h.nonce = cfg_.nonce;
    h.srcRank = cfg_.rank;
    h.dstRank = peer;
    h.channel = channel;
    h.socketIndex = i;
    h.socketsPerPeer = nsockets;
    h.slotBytes = cfg_.slotBytes;
    if (cfg_.authKey.present) signHandshake(cfg_.authKey, challenge, &h);
    encodeHandshake(h, out[static_cast<size_t>(i)].hs);
  }
  auto closeAll = [&out] {
    for (Outgoing& o : out) closeFd(o.fd);
  };
  auto retryLater = [](Outgoing& o, int err) {
    closeFd(o.fd);
    o.fd = -1;
    o.state = State::kIdle;
    o.sent = 0;
    o.lastErr = err;
    o.retryAt = nowNanos() + o.backoff;
    o.backoff = std::min(o.backoff * 2, kMaxRetryNs);
  };
  auto hardFailure = [&](const char* call, int err) {
    closeAll();
    return systemError(call, err).withContext("tcp: connecting to rank " + std::to_string(peer) + " at " + blob);
  };

  const Deadline deadline = Deadline::after(cfg_.connectTimeoutSec);
  AbortCheckPacer aborted(cfg_.abortCheck);
  int done = 0;
  std::vector<pollfd> pfds;
  std::vector<int> owner;  // index into `out` per pollfd, -1 for the listening socket
  while (done < nsockets) {
    for (Outgoing& o : out) {
      if (o.state == State::kIdle && nowNanos() >= o.retryAt) {
        o.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (o.fd < 0) return hardFailure("socket", errno);
        Status s = configureDataSocket(o.fd);
        if (!s.isOk()) {
          closeAll();
          return s;
        }
        // Data flows from this end: its congestion control is the one that matters.
        std::string now;
        const std::string paced = unpaceLocalSocket(o.fd, addr.sin_addr, &now);
        static std::atomic<bool> logged{false};  // once per process: every communicator does the same
        if (!paced.empty() && !logged.exchange(true)) {
          BRAID_INFO("tcp: rank %d: connections within this host use %s, not the kernel's %s, which paces them",
                     cfg_.rank, now.c_str(), paced.c_str());
        }
        if (connect(o.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
          o.state = State::kHandshake;
        } else if (errno == EINPROGRESS || errno == EINTR) {
          o.state = State::kConnecting;
        } else if (retryableConnectError(errno)) {
          retryLater(o, errno);
        } else {
          return hardFailure("connect", errno);
        }
      }
      if (o.state == State::kHandshake) {
        ssize_t n = send(o.fd, o.hs + o.sent, kHandshakeBytes - o.sent, MSG_NOSIGNAL);
        if (n > 0) {
          o.sent += static_cast<size_t>(n);
          if (o.sent == kHandshakeBytes) {
            o.state = State::kDone;
            ++done;
          }
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          if (!retryableConnectError(errno)) return hardFailure("send", errno);
          retryLater(o, errno);
        }
      }
    }
    if (done == nsockets) break;
    if (Status st = aborted.poll(); !st.isOk()) {
      closeAll();
      return st;
    }
    if (deadline.expired()) {
      int lastErr = 0;
      for (const Outgoing& o : out) lastErr = o.lastErr != 0 ? o.lastErr : lastErr;
      closeAll();
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", cfg_.connectTimeoutSec);
      return Status(Code::kTimeout,
                    "tcp: rank " + std::to_string(cfg_.rank) + " could not connect to rank " + std::to_string(peer) +
                        " (channel " + std::to_string(channel) + ") at " + blob + " within " + secs +
                        " s: " + errnoText(lastErr),
                    peer);
    }

    // Sleep until a connect completes, a handshake can be written, a retry is due, or a
    // peer connects to us. Accepting our own incoming sockets meanwhile keeps this rank's
    // accept queue short, so peers connecting to it never stall behind a full backlog.
    pfds.clear();
    owner.clear();
    int64_t wakeAt = INT64_MAX;
    for (size_t i = 0; i < out.size(); ++i) {
      const Outgoing& o = out[i];
      if (o.state == State::kConnecting || o.state == State::kHandshake) {
        pfds.push_back({o.fd, POLLOUT, 0});
        owner.push_back(static_cast<int>(i));
      } else if (o.state == State::kIdle) {
        wakeAt = std::min(wakeAt, o.retryAt);
      }
    }
    for (const Listener& l : listeners_) {
      pfds.push_back({l.fd, POLLIN, 0});
      owner.push_back(-1);
    }
    int timeoutMs = deadline.remainingMillis(100);
    if (wakeAt != INT64_MAX) {
      int64_t untilRetry = (wakeAt - nowNanos()) / 1000000 + 1;
      timeoutMs = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(timeoutMs, untilRetry)));
    }
    int rc = poll(pfds.data(), pfds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) return hardFailure("poll", errno);
    for (size_t k = 0; rc > 0 && k < pfds.size(); ++k) {
      if (pfds[k].revents == 0) continue;
      if (owner[k] < 0) {
        acceptFrom(pfds[k].fd);
        continue;
      }
      Outgoing& o = out[static_cast<size_t>(owner[k])];
      if (o.state != State::kConnecting) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(o.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err == 0) {
        o.state = State::kHandshake;
      } else if (retryableConnectError(err)) {
        retryLater(o, err);
      } else {
        return hardFailure("connect", err);
      }
    }
  }

  std::vector<int> fds;
  fds.reserve(out.size());
  for (Outgoing& o : out) fds.push_back(o.fd);
  BRAID_TRACE("tcp: rank %d connected %d socket(s) to rank %d channel %d at %s", cfg_.rank, nsockets, peer, channel,
              blob.c_str());
  std::vector<std::shared_ptr<TlsStream>> tls;
  if (cfg_.tls) {
    // The client side of each socket's TLS session; establish() completes the handshakes,
    // when every rank is there to answer.
    for (int i = 0; i < nsockets; ++i) {
      auto t = TlsStream::create(fds[static_cast<size_t>(i)], TlsStream::Role::kClient, cfg_.authKey,
                                 tlsBinding(cfg_.nonce, cfg_.rank, peer, channel, i));
      if (!t.isOk()) {
        for (int fd : fds) closeFd(fd);
        return t.status().withContext("tcp: rank " + std::to_string(cfg_.rank) + " to rank " + std::to_string(peer));
      }
      tls.push_back(std::shared_ptr<TlsStream>(std::move(t).value()));
      handshakes_.push_back({tls.back(), fds[static_cast<size_t>(i)], peer, channel});
    }
  }
  auto conn = std::make_unique<TcpSendConnection>(cfg_, peer, std::move(fds), std::move(tls));
  sendWatch_.push_back(conn->watch());
  return std::unique_ptr<Connection>(std::move(conn));
}

void TcpTransport::acceptAll() {
  for (const Listener& l : listeners_) acceptFrom(l.fd);
}

void TcpTransport::acceptFrom(int listenFd) {
  for (;;) {
    Incoming in;
    socklen_t len = sizeof(in.from);
    in.fd = accept4(listenFd, reinterpret_cast<sockaddr*>(&in.from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (in.fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        BRAID_WARN("tcp: rank %d: accept failed: %s", cfg_.rank, std::strerror(errno));
      }
      return;
    }
    Status s = configureDataSocket(in.fd);
    if (!s.isOk()) {
      BRAID_WARN("tcp: rank %d: dropping connection from %s: %s", cfg_.rank, formatAddress(in.from).c_str(),
                 s.toString().c_str());
      closeFd(in.fd);
      continue;
    }
    if (incoming_.size() >= kMaxUnidentified) {
      BRAID_WARN("tcp: rank %d: too many connections without a handshake; dropping the one from %s", cfg_.rank,
                 formatAddress(incoming_.front().from).c_str());
      closeFd(incoming_.front().fd);
      incoming_.erase(incoming_.begin());
    }
    incoming_.push_back(in);
  }
}

void TcpTransport::serviceIncoming() {
  size_t keep = 0;
  for (size_t i = 0; i < incoming_.size(); ++i) {
    Incoming& in = incoming_[i];
    bool drop = false;
    for (;;) {
      ssize_t n = recv(in.fd, in.buf + in.have, kHandshakeBytes - in.have, 0);
      if (n > 0) {
        in.have += static_cast<size_t>(n);
        if (in.have == kHandshakeBytes) {
          if (!bindIncoming(in)) closeFd(in.fd);
          drop = true;  // bound or refused: no longer unidentified either way
          break;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      BRAID_WARN("tcp: rank %d: connection from %s closed before its handshake", cfg_.rank,
                 formatAddress(in.from).c_str());
      closeFd(in.fd);
      drop = true;
      break;
    }
    if (!drop) incoming_[keep++] = in;
  }
  incoming_.resize(keep);
}

bool TcpTransport::bindIncoming(Incoming& in) {
  const Handshake h = decodeHandshake(in.buf);
  std::string why;
  std::shared_ptr<SocketSet> set;
  if (h.magic != kHandshakeMagic) {
    why = "not a braid handshake";
  } else if (h.version != kHandshakeVersion) {
    why = "protocol version " + std::to_string(h.version) + ", this rank speaks " + std::to_string(kHandshakeVersion);
  } else if (h.nonce != cfg_.nonce) {
    why = "it belongs to another job (nonce mismatch)";
  } else if (cfg_.authKey.present && !(set = expectedSet(h.srcRank, h.channel))) {
    why = "no connection from rank " + std::to_string(h.srcRank) + " on channel " + std::to_string(h.channel) +
          " is expected";
  } else if (cfg_.authKey.present && !verifyHandshake(cfg_.authKey, set->challenge, h)) {
    why = (h.flags & kHandshakeKeyed) ? "authentication failed: its handshake does not prove this job's key"
                                      : "authentication failed: it has no key and this job has one";
    // Claimed, not proven; still the likeliest explanation if that rank never connects.
    refusedFrom_[h.srcRank] = why;
    set.reset();
  } else {
    // From here on the sender is part of this job: its rank is worth reporting.
    if (h.dstRank != cfg_.rank) {
      why = "it was meant for rank " + std::to_string(h.dstRank);
    } else if (h.socketsPerPeer != cfg_.socketsPerPeer) {
      why = "it uses " + std::to_string(h.socketsPerPeer) + " sockets per peer, this rank " +
            std::to_string(cfg_.socketsPerPeer);
    } else if (h.slotBytes > cfg_.slotBytes) {
      why = "its slots of " + std::to_string(h.slotBytes) + " bytes exceed this rank's " +
            std::to_string(cfg_.slotBytes);
    } else {
      set = expectedSet(h.srcRank, h.channel);
      if (!set) {
        why = "no connection from rank " + std::to_string(h.srcRank) + " on channel " + std::to_string(h.channel) +
              " is expected";
      } else if (h.socketIndex < 0 || h.socketIndex >= static_cast<int>(set->fds.size())) {
        why = "socket index " + std::to_string(h.socketIndex) + " out of range";
      } else if (set->fds[static_cast<size_t>(h.socketIndex)] >= 0) {
        why = "socket " + std::to_string(h.socketIndex) + " of rank " + std::to_string(h.srcRank) + " channel " +
              std::to_string(h.channel) + " is already connected";
      }
    }
    if (!why.empty()) refusedFrom_[h.srcRank] = why;
  }
  if (!why.empty()) {
    if (why.rfind("authentication failed", 0) == 0)
      BRAID_SECURITY("tcp: rank %d refused a connection from %s: %s", cfg_.rank, formatAddress(in.from).c_str(),
                     why.c_str());
    else
      BRAID_WARN("tcp: rank %d refused a connection from %s: %s", cfg_.rank, formatAddress(in.from).c_str(),
                 why.c_str());
    return false;
  }
  if (cfg_.tls) {
    auto t = TlsStream::create(in.fd, TlsStream::Role::kServer, cfg_.authKey,
                               tlsBinding(cfg_.nonce, h.srcRank, cfg_.rank, h.channel, h.socketIndex));
    if (!t.isOk()) {
      BRAID_WARN("tcp: rank %d: no TLS session for the connection from %s: %s", cfg_.rank,
                 formatAddress(in.from).c_str(), t.status().toString().c_str());
      return false;
    }
    if (set->tls.size() != set->fds.size()) set->tls.resize(set->fds.size());
    set->tls[static_cast<size_t>(h.socketIndex)] = std::shared_ptr<TlsStream>(std::move(t).value());
    handshakes_.push_back({set->tls[static_cast<size_t>(h.socketIndex)], in.fd, h.srcRank, h.channel});
  }
  set->fds[static_cast<size_t>(h.socketIndex)] = in.fd;
  ++set->bound;
  BRAID_TRACE("tcp: rank %d accepted socket %d of rank %d channel %d from %s", cfg_.rank, h.socketIndex, h.srcRank,
              h.channel, formatAddress(in.from).c_str());
  return true;
}

std::shared_ptr<SocketSet> TcpTransport::expectedSet(int peer, int channel) {
  auto it = expected_.find(std::make_pair(peer, channel));
  return it == expected_.end() ? nullptr : it->second.lock();
}

int TcpTransport::missingSockets() {
  int missing = 0;
  for (auto it = expected_.begin(); it != expected_.end();) {
    std::shared_ptr<SocketSet> set = it->second.lock();
    if (!set || set->complete()) {
      // Completed sets leave the table so that a replayed handshake finds nothing to join.
      it = expected_.erase(it);
      continue;
    }
    missing += static_cast<int>(set->fds.size()) - set->bound;
    ++it;
  }
  return missing;
}

Status TcpTransport::timeoutError() {
  std::string who;
  int firstRank = -1;
  for (const auto& [key, weak] : expected_) {
    std::shared_ptr<SocketSet> set = weak.lock();
    if (!set || set->complete()) continue;
    if (firstRank < 0) firstRank = key.first;
    if (!who.empty()) who += ", ";
    who += "rank " + std::to_string(key.first) + " (channel " + std::to_string(key.second) + ": " +
           std::to_string(set->bound) + " of " + std::to_string(set->fds.size()) + " sockets)";
    auto refused = refusedFrom_.find(key.first);
    if (refused != refusedFrom_.end()) who += " [refused a connection from it: " + refused->second + "]";
  }
  return Status(Code::kTimeout,
                "tcp: rank " + std::to_string(cfg_.rank) + " timed out waiting for connections from " + who,
                firstRank);
}

StatusOr<int> TcpTransport::driveHandshakes(std::vector<pollfd>* pfds) {
  int pending = 0;
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    std::shared_ptr<TlsStream> t = it->tls.lock();
    const int r = t ? t->handshake() : 1;
    if (r < 0) {
      return Status(Code::kRemoteError,
                    "tcp: rank " + std::to_string(cfg_.rank) + ": TLS handshake with rank " + std::to_string(it->peer) +
                        " (channel " + std::to_string(it->channel) + ") failed: " + t->error() +
                        " (another job key, or a peer without BRAID_TLS=1)",
                    it->peer);
    }
    if (r == 1) {
      it = handshakes_.erase(it);
      continue;
    }
    pfds->push_back({it->fd, t->wantEvents(), 0});
    ++pending;
    ++it;
  }
  return pending;
}

Status TcpTransport::establish(Deadline deadline) {
  std::vector<pollfd> pfds;
  // Sockets still to be accepted, and (BRAID_TLS) handshakes still to be completed: both
  // sides of every session are driven here, where every rank is, so no handshake waits on
  // a peer that is busy elsewhere.
  for (;;) {
    acceptAll();
    serviceIncoming();
    pfds.clear();
    BRAID_ASSIGN_OR_RETURN(int handshaking, driveHandshakes(&pfds));
    if (missingSockets() == 0 && handshaking == 0) break;
    if (deadline.expired()) {
      if (missingSockets() > 0) return timeoutError();
      return Status(Code::kTimeout,
                    "tcp: rank " + std::to_string(cfg_.rank) + " timed out completing " + std::to_string(handshaking) +
                        " TLS handshake(s), the first with rank " + std::to_string(handshakes_.front().peer),
                    handshakes_.front().peer);
    }
    if (cfg_.abortCheck) BRAID_RETURN_IF_ERROR(cfg_.abortCheck());
    for (const Listener& l : listeners_) pfds.push_back({l.fd, POLLIN, 0});
    for (const Incoming& in : incoming_) pfds.push_back({in.fd, POLLIN, 0});
    int rc = poll(pfds.data(), pfds.size(), deadline.remainingMillis(cfg_.abortCheck ? 200 : 1000));
    if (rc < 0 && errno != EINTR) return systemError("poll", errno).withContext("tcp: establish");
  }
  // Every expected socket is bound; whatever else connected is a stranger or a duplicate.
  for (Incoming& in : incoming_) {
    BRAID_WARN("tcp: rank %d: closing connection from %s that never identified itself", cfg_.rank,
               formatAddress(in.from).c_str());
    closeFd(in.fd);
  }
  incoming_.clear();
  return Status::ok();
}

}  // namespace
}  // namespace tcp

std::unique_ptr<Transport> createTcpTransport(const TransportConfig& cfg) {
  return std::unique_ptr<Transport>(new tcp::TcpTransport(cfg));
}

}  // namespace braid::transport

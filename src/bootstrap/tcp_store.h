#pragma once
// braid's embedded TCP store: one server thread per job (in rank 0, in braidrun, or behind
// braidGetUniqueId), a standby in rank 1 where rank 0 serves, and a client per process. The
// wire format is in store_protocol.h.
//
// The server is a single epoll thread: requests are cheap map operations, so one thread
// keeps up with thousands of ranks, and a get/wait on a missing key is parked (not a
// thread) until the key is set or the client's deadline passes. A client that sends
// anything malformed loses its own connection and nothing else.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/store.h"
#include "bootstrap/store_protocol.h"
#include "common/auth.h"
#include "common/tls.h"

namespace braid::bootstrap {

class TcpStoreClient;

// The key under which a standby store's address ("host:port") is set on the store it is to
// stand by for: setting it there makes that store copy its keys to the standby and mirror
// every write from then on. Not a printable key, so no key of braid's can meet it.
inline const std::string kStandbyKey = "\x01standby";

class TcpStoreServer {
 public:
  // Counters for tests and diagnostics; read without locking, so only roughly consistent.
  struct Stats {
    uint64_t accepted = 0;        // connections accepted
    uint64_t open = 0;            // connections open now
    uint64_t rejected = 0;        // connections closed for a protocol violation or bad HELLO
    uint64_t requests = 0;        // requests served
    bool mirrored = false;        // a standby takes every write
    bool promoted = false;        // a standby whose store is gone: it serves now
    bool superseded = false;      // a store whose standby serves in its place: it serves nobody
    bool stoodDown = false;       // a standby its store dropped (and serves on): it never serves
  };

  // Binds `host`:`port` (host "" or "0.0.0.0" = every interface; port 0 = an ephemeral
  // port, see port()) and starts the serving thread. With `expectedNonce` != 0 a client
  // whose HELLO presents another nonce is refused; 0 accepts any. With a `key`, only
  // clients that prove it are served (store_protocol.h); the others are refused, logged with
  // their address. Does not block beyond the bind. kSystemError naming host:port if the
  // address cannot be bound.
  // With `tls` (BRAID_TLS=1, needs `key`) an admitted connection continues over TLS 1.3
  // keyed by the job key and both challenges (common/tls.h).
  //
  // With `standby` it is a standby store: it serves nobody until a store names it (a
  // client sets kStandbyKey there to "host:port" of this one) and that store, having copied
  // its keys over, mirrors each write to it before answering the client that made it. When
  // that store's connection to it ends (its process died, or its host), the standby serves
  // every key the store had acknowledged, and clients that knew of it (setStandby) come
  // over. Until then clients are answered kInProgress. A store whose standby took over while
  // it was stopped (standFor) serves nobody from the moment it finds out, before it answers
  // anything: its clients go to the standby.
  //
  // With `tls` and `tlsOptional`, a client may go on in plaintext after admission as well:
  // only for a process whose own BRAID_TLS was refused and that serves the store merely so
  // that the others read why it fails (they may speak either).
  static StatusOr<std::unique_ptr<TcpStoreServer>> start(const std::string& host, int port,
                                                         uint64_t expectedNonce, const AuthKey& key = AuthKey{},
                                                         bool tls = false, bool standby = false,
                                                         bool tlsOptional = false);

  // Stops the serving thread and closes every connection; clients then see kRemoteError.
  // Blocks until the thread has exited (at most one loop iteration).
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The bound port (the ephemeral one when started with port 0). Thread-safe.
  int port() const { return port_; }
  // The host it was asked to bind. Thread-safe.
  const std::string& host() const { return host_; }
  // A snapshot of the counters. Thread-safe.
  Stats stats() const;
  // The id of the serving process's own client (TcpStoreClient::clientId): its SET_ON_CLOSE
  // keys are mirrored to the standby too, which applies them when it takes over (that
  // process is gone then, and cannot set them again there). Thread-safe.
  void setLocalClient(uint64_t clientId);
  // For a standby: the address of the store it stands by for, and how long that store may
  // send nothing (it sends at least every kHeartbeatSec) before this standby takes over, as
  // it does when that store's process dies: a store that is stopped or cut off keeps its
  // connection open. When the connection ends instead, this standby asks that address
  // first: a store that still answers dropped this standby (it took too long to take a write)
  // and serves on, and the standby stands down. Without it, a standby takes over only when
  // the connection ends. Call before naming the standby. Thread-safe.
  void standFor(const std::string& host, int port, double silenceSec);
  // How long a write waits for the standby to take it before this store drops the standby
  // and serves on (at most, and by default, 5 s): the store serves nobody meanwhile, so a
  // stopped standby must not hold it longer than its clients wait. Thread-safe.
  void setStandbyWait(double sec);
  // How often a store that has a standby writes to it at least.
  static constexpr double kHeartbeatSec = 0.2;

 private:
  struct Impl;  // the serving loop; defined in tcp_store.cc
  TcpStoreServer() = default;

  std::string host_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

class TcpStoreClient : public Store {
 public:
  // Bounds set/add/check/deleteKey, which take no deadline: a stalled server must not hang
  // the caller forever.
  static constexpr double kDefaultOpTimeoutSec = 30;

  // Connects to the store at `host`:`port` and performs the HELLO handshake presenting
  // `nonce` (0 when the job has none). Clients usually start before the server, so refused
  // or unreachable connections are retried with backoff until `deadline`; then kTimeout
  // saying the store is unreachable. A server that refuses the HELLO (nonce or version
  // mismatch) fails at once with its reason. With a `key` the client and the store prove it
  // to each other, and a store that does not ask for it is refused ("authentication
  // failed"). Blocks; the caller owns the client.
  static StatusOr<std::unique_ptr<TcpStoreClient>> connect(const std::string& host, int port, uint64_t nonce,
                                                           Deadline deadline,
                                                           double opTimeoutSec = kDefaultOpTimeoutSec,
                                                           const AuthKey& key = AuthKey{}, bool tls = false);
  ~TcpStoreClient() override;
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  // Store methods: thread-safe (one request in flight at a time, serialized by a mutex, so a
  // long get() delays other threads' calls on the same client). get/wait/multiGet wait
  // server-side until `deadline`; the others until the earlier of `deadline` and the op
  // timeout (a caller in a collective passes the operation's deadline). Once the
  // connection is lost every call fails fast with kRemoteError "store at host:port is
  // unreachable"; the client does not reconnect to the same store, because a store that
  // comes back has lost its keys. It goes over to a standby (setStandby) once: that one
  // holds every acknowledged write, and answers a numbered add asked again.
  Status set(const std::string& key, const std::string& value, Deadline deadline = Deadline()) override;
  StatusOr<std::string> get(const std::string& key, Deadline deadline) override;
  StatusOr<int64_t> add(const std::string& key, int64_t delta, Deadline deadline = Deadline()) override;
  StatusOr<std::string> compareSet(const std::string& key, const std::string& expected, const std::string& desired,
                                   Deadline deadline = Deadline()) override;
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override;
  StatusOr<bool> check(const std::vector<std::string>& keys, Deadline deadline = Deadline()) override;
  StatusOr<bool> deleteKey(const std::string& key, Deadline deadline = Deadline()) override;
  // Held by the server for this client's one connection (the client never reconnects).
  Status setOnClose(const std::string& key, const std::string& value, Deadline deadline = Deadline()) override;
  StatusOr<bool> cancelOnClose(const std::string& key, Deadline deadline = Deadline()) override;
  StatusOr<std::vector<std::string>> multiGet(const std::vector<std::string>& keys, Deadline deadline) override;
  // Shuts the connection down under a blocked call (which then fails, quietly); later calls
  // fail at once.
  void interrupt() override;
  // A lost connection is not logged (a client whose loss its owner expects and handles).
  void setQuiet() { quiet_ = true; }

  // "host:port", for messages. Thread-safe.
  const std::string& address() const { return address_; }

  // The store's standby (TcpStoreServer::start with `standby`): when the connection to the
  // store is lost the client connects there once, with the same nonce and key, sets its
  // SET_ON_CLOSE keys again, and repeats the request it was making (a numbered add is not
  // counted twice). With `silenceSec` > 0 (the standby takes over from a store that sent it
  // nothing for that long: TcpStoreServer::standFor), a request the store has not answered
  // for a quarter of it (at least 0.25 s, at most 10 s) asks the standby (a connection of its
  // own) whether it serves, and again as often: a standby that took over from a stopped store
  // makes the request go there too. Such a request is not given up before the standby could
  // have taken over (the silence, two questions and a heartbeat after it was sent), even past
  // its deadline. A store that is merely slow keeps its clients. Named again after the client
  // went over to its standby, another standby lets it go over once more. Thread-safe.
  void setStandby(const std::string& host, int port, double silenceSec = 0);
  // One attempt to reach a store of this job (nonce and key) at `host`:`port`, bounded by
  // `timeoutSec`: whether it serves (false: a standby that does not serve yet). An error when
  // nothing of this job answered there: refused, unreachable, stalled, or another job's store.
  // With `watchFd`, the attempt ends (kAborted) as soon as that socket has something to read:
  // a client asking on behalf of a request stops asking once the store answers it.
  static StatusOr<bool> probe(const std::string& host, int port, uint64_t nonce, const AuthKey& key, bool tls,
                              double timeoutSec, int watchFd = -1);
  // Sent in HELLO: names this client's numbered adds and, to the store in its own process,
  // the client whose SET_ON_CLOSE keys the standby keeps. Thread-safe.
  uint64_t clientId() const override { return clientId_; }
  StatusOr<int64_t> fence(const std::vector<uint64_t>& clients, const std::string& why,
                          Deadline deadline = Deadline()) override;
  // Adds `delta` to this connection's pending on-close addition to `key` (a counter): when
  // the connection ends the store adds the sum; withdrawn when the sum returns to 0.
  Status addOnClose(const std::string& key, int64_t delta, Deadline deadline = Deadline()) override;
  // Whether the client went over to a standby, and then the address of the last one, which
  // serves it now. Thread-safe.
  bool servingStandby(std::string* host, int* port);
  // Makes this connection the source of a standby store (TcpStoreServer does this).
  Status declareStandbySource(Deadline deadline);
  // Sends a CHECK without waiting for its answer (read by a later request, or a later ping,
  // which first reads whatever answers have come): a store that does not read is not waited
  // for. Fails when the connection is lost, closed by the store included. Thread-safe.
  Status ping(Deadline deadline);
  // This end's IPv4 address on the connection to the store ("" when lost): an address the
  // store's host reaches this one at. Thread-safe.
  std::string localHost();

 private:
  TcpStoreClient(std::string address, int fd, double opTimeoutSec);
  // HELLO (and the key's proofs) on a connected socket `fd`, which the client then owns.
  // `*dropped` says whether the store closed the connection without an answer. Each answer
  // is waited for until `until` or the op timeout, whichever comes first: a listener that
  // accepts and never answers (not a store) does not outlast the caller's deadline. With
  // `watchFd` the client's waits end (kAborted) when that socket has something to read.
  static StatusOr<std::unique_ptr<TcpStoreClient>> handshake(const std::string& address, int fd, uint64_t nonce,
                                                             const AuthKey& key, double opTimeoutSec, bool tls,
                                                             uint64_t clientId, Deadline until, bool* dropped,
                                                             int watchFd = -1);
  // Waits up to `ms` for `events` on the connection: 1 when they came, 0 when not (yet), -1
  // with errno when poll failed, 2 when watchFd_ has something to read first.
  int waitLocked(short events, int ms);
  // What a wait that the watched socket ended returns (kAborted, naming this store).
  Status watchedLocked() const;
  // Reads what the connection has, up to kReadChunk, onto inbuf_: the bytes read, 0 at the
  // store's end, or -1 with errno. `flags` go to recv (a TLS session reads as it was set up).
  // Caller holds mu_.
  ssize_t readChunkLocked(int flags);
  // roundTrip's one attempt on the current connection. Caller holds mu_.
  Status roundTripLocked(const proto::Request& req, Deadline replyDeadline, proto::Reply* reply);
  // The connection is lost and a standby is known (and not used yet). Caller holds mu_.
  bool canFailOverLocked() const;
  // Connects to the standby in place of the lost store, and sets this client's SET_ON_CLOSE
  // keys there. Caller holds mu_.
  Status failOverLocked(Deadline deadline);
  // A request unanswered for probeAfter: asks the standby whether it serves in the store's
  // place, and if it does, loses this connection so that the caller goes there. Caller holds mu_.
  Status probeStandbyIfDueLocked(Deadline deadline);
  // Runs the TLS handshake on the admitted connection (blocking up to the op timeout).
  Status startTls(const AuthKey& key, const std::string& binding);

  // Sends `req` and reads its reply; `replyDeadline` bounds the whole exchange. An ERROR
  // reply becomes its Status; a TIMEOUT reply is returned for the caller to word. Takes mu_.
  Status roundTrip(const proto::Request& req, Deadline replyDeadline, proto::Reply* reply);
  // A request the store may park until `deadline` (GET, WAIT, MULTI_GET), asked for in short
  // slices (kParkSliceSec; longer for many keys): the connection is shared by every communicator of the process and roundTrip
  // holds mu_ for a whole exchange, so one long wait would hold every other thread's quick
  // question until its caller's time had run out. Ends at a reply other than TIMEOUT, or at
  // the deadline with the last slice's TIMEOUT reply.
  Status parkedRoundTrip(proto::Request req, Deadline deadline, proto::Reply* reply);
  // Sends a whole request frame by `deadline`. With `orNothing`, a socket that takes none of
  // it now gives kWouldBlock and nothing is sent. Caller holds mu_.
  Status sendFrameLocked(const std::string& frame, Deadline deadline, proto::Op op, bool orNothing);
  // Reads one whole reply frame into `reply`. Caller holds mu_.
  Status readReply(Deadline deadline, proto::Reply* reply, bool* timedOut);
  // Closes the socket and records why; every later call returns it. Caller holds mu_.
  Status lose(const std::string& why);
  Deadline opDeadline() const { return Deadline::after(opTimeoutSec_); }
  // The earlier of the caller's deadline and the op timeout.
  Deadline bounded(Deadline deadline) const {
    Deadline op = opDeadline();
    return !deadline.never() && deadline.nanos() < op.nanos() ? deadline : op;
  }

  const std::string address_;
  const double opTimeoutSec_;
  std::mutex mu_;
  std::atomic<int> queued_{0};  // threads waiting for mu_ in roundTrip: a parked wait lets them in
  std::mutex fdMu_;       // orders interrupt()'s shutdown against lose()'s close
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> quiet_{false};
  int fd_ = -1;           // guarded by mu_ (written under fdMu_ too); -1 once the connection is lost
  int watchFd_ = -1;      // set once by handshake: a socket whose readiness ends this client's waits
  Status broken_;         // guarded by mu_; why the connection was lost
  int owedReplies_ = 0;   // guarded by mu_; replies to requests we stopped waiting for
  bool closedByPeer_ = false;  // guarded by mu_; the store closed or reset the connection
  std::unique_ptr<TlsStream> tls_;  // guarded by mu_; BRAID_TLS: requests and replies go through it
  std::string inbuf_;     // guarded by mu_; received bytes not yet decoded

  // What a connection to the standby needs, set by connect().
  uint64_t nonce_ = 0;
  AuthKey key_;
  bool tlsWanted_ = false;
  uint64_t clientId_ = 0;                      // sent in HELLO; names the numbered adds
  std::atomic<uint64_t> lastAddNumber_{0};
  std::string standbyHost_;                    // guarded by mu_
  int standbyPort_ = 0;                        // guarded by mu_; 0: none
  bool failedOver_ = false;                    // guarded by mu_; armed again by a new standby
  std::string servingHost_;                    // guarded by mu_; the standby it went over to last
  int servingPort_ = 0;                        // guarded by mu_; 0: never went over
  int64_t probeAfterNs_ = 0;                   // guarded by mu_; 0: never ask the standby early
  int64_t takeOverNs_ = 0;                     // guarded by mu_; how long a request waits at least
  int64_t requestSentNs_ = 0;                  // guarded by mu_; when the request in flight went out
  int64_t nextProbeNs_ = 0;                    // guarded by mu_
  std::map<std::string, std::string> onClose_;  // guarded by mu_; SET_ON_CLOSE keys held now
  std::mutex addOnCloseMu_;                    // one addOnClose at a time (read, then replace)
};

}  // namespace braid::bootstrap

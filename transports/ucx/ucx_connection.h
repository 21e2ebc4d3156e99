#pragma once
// The two halves of a UCX connection and the per-channel worker they share (see
// ucx_transport.h for the design).

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/auth.h"
#include "common/status.h"
#include "transports/transport.h"

namespace braid::transport::ucx {

// A UCX tag: [kind: 2 bits][sender's rank: 20 bits][42 bits]. The low bits carry, for a
// data message, the executor's tag (its operation number's low 10 bits and the whole call-
// shape hash, in place), so a payload travels with no header and can be sent from and
// received into the callers' buffers; for hellos and credits, the job's nonce.
constexpr uint64_t kKindData = 1;
constexpr uint64_t kKindHello = 2;
constexpr uint64_t kKindCredit = 3;
constexpr int kRankBits = 20;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr uint64_t kLowMask = (uint64_t{1} << 42) - 1;
// What a receive matches on: the kind and the sender.
constexpr uint64_t kMatchMask = ~kLowMask;
// The bits of an executor tag a data message carries (Connection::tagMask).
constexpr uint64_t kExecTagMask = (uint64_t{0x3ff} << 32) | 0xffffffffull;

inline uint64_t ucxTag(uint64_t kind, int rank, uint64_t low) {
  return kind << 62 | (static_cast<uint64_t>(rank) & (kMaxRanks - 1)) << 42 | (low & kLowMask);
}
inline uint64_t jobBits(uint64_t nonce) { return (nonce ^ (nonce >> 32)) & kLowMask; }

// A hello: [job bits: 8][sender's rank: 8][proof: 32][the sender's worker address]. The proof
// is authProof under the job's key over the nonce, both ranks, the channel, the receiver's
// challenge (from its blob) and the address; all zeros in a job without a key.
constexpr size_t kHelloHeaderBytes = 48;
constexpr size_t kChallengeBytes = 16;
Digest helloProof(const AuthKey& key, uint64_t nonce, int sender, int receiver, int channel,
                  std::string_view challenge, std::string_view address);

// How deep this thread is in braid's own drive of a UCX worker outside an operation (a
// request awaited, a connection torn down, an endpoint closed, a worker destroyed, the
// failed peers asked about): what UCX logs there is about braid's endpoints, whose failures
// braid reports itself (ucx_transport.cc, logHandler). Not set by Worker::progress, which
// every wait of an operation calls: a thread-local in a plugin costs a call to reach.
inline thread_local int tDrivingWorker = 0;
struct DrivingWorker {
  DrivingWorker() { ++tDrivingWorker; }
  ~DrivingWorker() { --tDrivingWorker; }
  DrivingWorker(const DrivingWorker&) = delete;
  DrivingWorker& operator=(const DrivingWorker&) = delete;
};

// An endpoint to one remote worker, shared by the send connection to that worker and the
// receive connection from it. UCX reports a failed peer through the error callback, which
// runs inside ucp_worker_progress on the worker's own thread.
struct Endpoint {
  ucp_ep_h ep = nullptr;
  int peer = -1;
  ucs_status_t failure = UCS_OK;
  // Created with peer error handling. UCX 1.13's shared-memory transports cannot offer it;
  // their endpoints are created without, and braid's own liveness checks watch the peer.
  bool watched = false;
  // Watched, and over lanes that hear of the peer's end by themselves (tcp's socket), so a
  // connection that only waits still fails soon after the peer dies
  // (Connection::seesPeerFailure). Over RDMA lanes UCX hears of it only when it next sends
  // there or its keepalive asks, and braid's own liveness checks cover the wait.
  bool hearsPeerEnd = false;
  // A message to the peer never completed (a stopped peer): the endpoint is closed by force,
  // which fails what UCX still holds, instead of flushed (UCX asserts when a worker goes with
  // sends still queued on an endpoint).
  bool stuck = false;
};

// The peers a transport's teardown found not taking messages (a stopped peer), or that the
// communicator said failed (Transport::peerFailed), so that at most the first connection to
// each waits for its messages to go. A peer process on this host that is stopped or gone is
// remembered by the whole process, for every communicator's teardown; another peer only by
// this transport (it may merely have been busy).
struct PeerBook {
  std::string localHost;                      // this process's host id
  std::map<int, std::pair<std::string, int64_t>> ids;  // rank -> (host id, pid), from canConnect
  mutable std::mutex mu;                      // guards stalled
  std::set<int> stalled;
  bool isStalled(int peer) const;
  void markStalled(int peer);
};

// What a torn-down connection left with UCX: requests still in flight (a message the peer
// has not taken yet, a receive UCX did not cancel) and the memory their callbacks point
// into. The connection's destructor hands them to its worker rather than wait for them on
// the caller's thread; the transport's teardown waits for all of them at once, on its own
// thread (settleLeftovers in ucx_transport.cc), and frees them once the worker is gone.
struct Leftover {
  virtual ~Leftover() = default;
  // Some request is still with UCX.
  virtual bool pending() const = 0;
  // Some of them waits for the peer to take a message (a send, a credit): while it does,
  // the peer is not taking messages.
  virtual bool waitsForPeer() const = 0;
  // Cancels what UCX can cancel; a send it cannot (a rendezvous) fails when the endpoint
  // closes by force.
  virtual void cancel(ucp_worker_h worker) = 0;
  int peer = -1;
  Endpoint* ep = nullptr;
};

class UcxRecvConnection;

// One channel's worker, its endpoints and the hellos it is waiting for.
struct Worker {
  ucp_worker_h worker = nullptr;
  int efd = -1;
  // An eventfd that is always readable: what a waiter polls when UCX has events pending
  // and must not be slept on (ucp_worker_arm said busy).
  int ready = -1;
  std::string address;                              // this worker's UCP address
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  PeerBook* peers = nullptr;  // the transport's, which outlives its workers
  std::vector<std::unique_ptr<Leftover>> leftovers;  // of its torn-down connections
  std::vector<UcxRecvConnection*> recvs;  // its receive connections, while they live
  // The largest message UCX sends eagerly (below its rendezvous threshold), as the transport
  // works it out: only those are worth a receive posted ahead (UcxRecvConnection::expectRecv).
  size_t eagerMaxBytes = 0;

  // Drives UCX until it has nothing more to do right now (bounded).
  void progress() {
    for (int i = 0; i < 64 && ucp_worker_progress(worker) != 0; ++i) {
    }
  }
};

// The largest message a connection carries from the caller's memory to the caller's memory
// (Connection::maxMessageBytes), where receives are posted on demand: UCX moves a tagged
// message of any size, so this only bounds what one step hands it at once.
constexpr size_t kMaxMessageBytes = size_t{1} << 30;

// The largest eager message under a UCX_RNDV_THRESH value in UCX's syntax ("262145",
// "64k", "inf"; the threshold is the first size sent by rendezvous), or `unknown` for one
// UCX works out itself ("auto") or that does not parse.
size_t eagerMaxUnder(const char* rndvThresh, size_t unknown);

// What a receive that reduces on arrival unpacks into (UcxRecvConnection::peekRecvReduce):
// UCX hands each piece of the payload, as it comes off the wire and still in its own
// buffer, to a UCP generic datatype's unpack, which reduces the whole elements in it
// straight into the destination and keeps the bytes of an element split between two
// pieces until the element is whole. So a payload is read once, where a receive into a slot
// copies it out of UCX's buffer and the executor reads it again to reduce it.
constexpr size_t kMaxArrivalElemBytes = 32;
struct ArrivalLanding {
  ArrivalReduce r;      // r.fn null: dropped, nothing more is written (the operation is gone)
  char* dst = nullptr;
  size_t bytes = 0;
  struct Split {
    size_t elem = 0;    // element index
    size_t have = 0;    // bytes of it received
    unsigned char b[kMaxArrivalElemBytes];
  };
  std::vector<Split> splits;
  // Folds payload bytes [offset, offset + length) into dst; false for bytes past `bytes`.
  bool unpack(size_t offset, const void* src, size_t length);
  // Whether every element met so far is whole (no bytes wait for the rest of one).
  bool whole() const { return splits.empty(); }

 private:
  void addSplit(size_t at, const unsigned char* src, size_t n);
};
// The UCP datatype whose unpack is ArrivalLanding::unpack (created once per process).
ucp_datatype_t arrivalDatatype();

// Whether connections with slots of `slotBytes` post their receives when the executor asks
// for a message (rather than ahead into every slot); BRAID_UCX_ZCOPY=0 says never.
bool receivesOnDemand(size_t slotBytes);

// What a failed UCX call or completion becomes: kRemoteError naming the peer.
Status peerFailure(int peer, const char* what, ucs_status_t st);

class UcxSendConnection final : public Connection {
 public:
  UcxSendConnection(const TransportConfig& cfg, int peer, Worker* worker, Endpoint* ep);
  ~UcxSendConnection() override;

  size_t slotBytes() const override { return slotBytes_; }
  // Progresses the worker when the next slot's message is still unmatched.
  Status reserveSend(Slot* s) override;
  Status postSend(const Slot& s, size_t bytes) override;
  bool sendsFromUser() const override { return fromUser_; }
  Status postSendFrom(const Slot& s, const void* src, size_t bytes) override;
  uint64_t tagMask() const override { return kExecTagMask; }
  // Whole messages from the caller's memory when the receiver posts its receives on demand
  // (it then lands any size at the caller's destination); else a slot.
  size_t maxMessageBytes() const override { return maxMessage_; }
  // The staging slots every payload not sent from the caller's memory goes out of (the
  // direct GPU path registers them).
  MemoryRange slotMemory() const override;
  Status peekRecv(Slot* s) override;
  Status releaseRecv(const Slot& s) override;
  Status progress() override;
  // UCX completed every posted message: it no longer reads the slot or the caller's memory.
  // An eager message's bytes may still be in UCX's own transport buffers (tcp's, when the
  // socket would block) and are lost if this process dies; waiting for them to leave
  // (ucp_ep_flush_nbx) would wait for the receiver to progress, so a collective's end would
  // hang on a peer busy elsewhere.
  bool flushed() const override { return inFlight_ == 0; }
  bool seesPeerFailure() const override { return ep_->hearsPeerEnd; }
  WaitHandle waitHandle(bool forSend) override;
  int peer() const override { return peer_; }

  // Sends this side's hello (its worker's address) so the receiver can watch it; in a job
  // with a key, with the proof over the receiver's challenge (helloProof).
  Status sendHello(int channel, const std::string& challenge);
  // Whether the hello has left; fails if UCX failed it.
  StatusOr<bool> helloSent();

 private:
  struct Staging {
    uint8_t* buf = nullptr;
    void* request = nullptr;  // UCX request while the message is in flight
    bool busy = false;
    ucs_status_t status = UCS_OK;
  };
  // The receiver's credit messages: its cumulative count of released slots.
  struct CreditLanding {
    uint64_t count = 0;
    void* request = nullptr;
    bool done = false;
    ucs_status_t status = UCS_OK;
  };
  static void sendDone(void* request, ucs_status_t status, void* user);
  static void creditDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
  Status checkSlot(Staging& st);
  Status send(const void* buf, size_t bytes, uint64_t execTag);
  Status postCreditRecv();
  Status takeCredits();
  Status failed() const;

  int peer_;
  int rank_;
  uint64_t job_;
  bool fromUser_;  // BRAID_UCX_ZCOPY=0 turns zero copy off (both directions), for comparison
  size_t slotBytes_;
  size_t maxMessage_;
  Worker* worker_;
  Endpoint* ep_;
  std::vector<Staging> slots_;
  std::unique_ptr<uint8_t[]> memory_;
  uint64_t postSeq_ = 0;
  uint64_t released_ = 0;  // slots the receiver has released, from its credit messages
  int inFlight_ = 0;
  // On the heap: a request UCX never completes keeps pointing at them (see the destructor).
  std::unique_ptr<Staging> hello_ = std::make_unique<Staging>();
  std::unique_ptr<CreditLanding> credit_ = std::make_unique<CreditLanding>();
  std::vector<uint8_t> helloBuf_;
  uint64_t nonce_;
  AuthKey key_;
};

class UcxRecvConnection final : public Connection {
 public:
  UcxRecvConnection(const TransportConfig& cfg, int peer, Worker* worker);
  ~UcxRecvConnection() override;

  size_t slotBytes() const override { return slotBytes_; }
  Status reserveSend(Slot* s) override;
  Status postSend(const Slot& s, size_t bytes) override;
  // Progresses the worker when the oldest slot has not arrived yet.
  Status peekRecv(Slot* s) override;
  // On demand mode only: the message lands at dst when its receive is posted here.
  Status peekRecvInto(Slot* s, void* dst, size_t bytes) override;
  // On demand mode only: posts the announced message's receive now, where its peek would.
  Status expectRecv(size_t ahead, void* dst, size_t bytes) override;
  bool takesAnnouncements() const override { return onDemand_; }
  // Where UCX copies a payload out of a buffer of its own, a payload to be reduced is
  // reduced from that buffer instead (ArrivalLanding): over tcp every message; over shared
  // memory an eager one only (UcxTransport::reducesOnArrival).
  enum class Arrival { kOff, kEagerOnly, kAll };
  bool reducesOnArrival() const override { return arrival_ != Arrival::kOff && onDemand_; }
  Status peekRecvReduce(Slot* s, void* dst, size_t bytes, const ArrivalReduce& r) override;
  Status expectReduce(size_t ahead, void* dst, size_t bytes, const ArrivalReduce& r) override;
  void setReducesOnArrival(Arrival a) { arrival_ = a; }
  uint64_t tagMask() const override { return kExecTagMask; }
  size_t maxMessageBytes() const override { return onDemand_ ? kMaxMessageBytes : slotBytes_; }
  // The slots every message not landed at the caller's destination arrives in.
  MemoryRange slotMemory() const override;
  // The next message's tag; on demand, while its receive is not posted, from UCX's
  // unexpected queue (ucp_tag_probe_nb, leaving the message there).
  Status peekTag(uint64_t* tag) override;
  // Re-posts the slot's receive.
  Status releaseRecv(const Slot& s) override;
  Status progress() override;
  bool seesPeerFailure() const override { return ep_ && ep_->hearsPeerEnd; }
  WaitHandle waitHandle(bool forSend) override;
  int peer() const override { return peer_; }

  // Posts the receive of the sender's hello, and those of every slot unless receives are
  // posted on demand. `challenge` goes into this connection's blob; in a job with a key,
  // only a hello that proves the key over it is taken.
  Status start(int channel, std::string challenge);
  // The sender's worker address once its hello arrived, else "". A malformed hello, or one
  // without the proof the job's key asks for, is refused (logged, a SECURITY line in a job
  // with a key, and refusal() says why) and the receive posted again: the real sender's may
  // still come.
  StatusOr<std::string> hello();
  // Why the last hello claiming to be from the peer was refused, or "".
  const std::string& refusal() const { return refusal_; }
  // The endpoint back to the sender: watched for its failure, and what credits travel on.
  void watch(Endpoint* ep) { ep_ = ep; }
  // For a worker driven outside any operation (UcxTransport::sawPeerFail): cancels the
  // receives posted into the caller's memory, which belong to an operation that has ended
  // and must land there no more. False when one cannot be cancelled (UCX is landing it):
  // the worker must not be driven then.
  bool dropCallerLandings();

 private:
  struct Landing {
    uint8_t* buf = nullptr;
    void* request = nullptr;
    bool posted = false;
    bool done = false;
    ucs_status_t status = UCS_OK;
    size_t length = 0;
    uint64_t senderTag = 0;
    void* into = nullptr;   // where the payload was received (buf or the caller's memory)
    size_t capacity = 0;
    bool reducing = false;  // posted with reduction on arrival, into red.dst
    ArrivalLanding red;
  };
  static void recvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
  static void creditSent(void* request, ucs_status_t status, void* user);
  Status post(Landing& l, uint64_t tag, void* into, size_t capacity, const ArrivalReduce* r = nullptr);
  // Whether a message of `bytes` to be reduced with `r` can be reduced on arrival.
  bool arrivalFits(size_t bytes, const ArrivalReduce& r) const;
  // On demand: the data receive of the next message into `dst` (or its slot).
  Status postFor(Landing& l, void* dst, size_t bytes);
  Status peek(Slot* s, void* dst, size_t bytes);
  // Logs why the hello that arrived is not taken, and posts the hello's receive again.
  StatusOr<std::string> refuseHello(const std::string& why);
  // Tells the sender how many slots have been released once enough have been since the
  // last credit message, or (`all`) once any have, and none is still in flight.
  Status maybeSendCredit(bool all = false);
  Status failed() const;

  int peer_;
  uint64_t tag_;        // data from the peer, matched under kMatchMask
  uint64_t helloTag_;
  size_t slotBytes_;
  // Receives posted when the executor asks for a message (so large payloads land straight in
  // its buffers: UCX's rendezvous waits for the receive), rather than ahead into slots.
  bool onDemand_;
  Arrival arrival_ = Arrival::kOff;  // which payloads are reduced on arrival
  Worker* worker_;
  Endpoint* ep_ = nullptr;
  std::vector<Landing> slots_;
  std::unique_ptr<uint8_t[]> memory_;
  uint64_t peekSeq_ = 0;
  uint64_t creditTag_;
  uint64_t creditedSeq_ = 0;   // the release count the sender was last told
  uint64_t progressSeq_ = 0;   // peekSeq_ at the last progress(): no release since means idle
  uint64_t creditBatch_;       // releases per credit message
  struct CreditOut {
    uint64_t count = 0;
    void* request = nullptr;
    ucs_status_t status = UCS_OK;
  };
  std::unique_ptr<CreditOut> creditOut_ = std::make_unique<CreditOut>();
  std::unique_ptr<Landing> hello_ = std::make_unique<Landing>();
  std::unique_ptr<uint8_t[]> helloMemory_;
  int rank_;
  int channel_ = -1;
  uint64_t nonce_;
  AuthKey key_;
  std::string challenge_;
  std::string refusal_;
};

}  // namespace braid::transport::ucx

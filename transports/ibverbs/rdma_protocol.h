#pragma once
// The protocol of the verbs transport, kept apart from the verbs calls so that every rule
// of it (slot ring, credits, immediates, ordering checks, error translation, address blobs)
// runs in unit tests on a machine without an RDMA device. The plugin drives it through
// RdmaQueue backed by a real queue pair (ibverbs_device.h); the tests drive it through an
// in-memory fake with the same semantics (tests/unit/ibverbs/fake_rdma.h).
//
// The wire protocol of one connection (one direction, one RC queue pair):
//
//   receiver memory (registered, remote-writable by this QP only):
//     slot slab: nslots slots of kSlotHeaderBytes + slotBytes, each rounded up to 64 bytes;
//       slot i = [SlotHeader: tag u64, bytes u32, seq u32][payload]
//   sender memory (registered):
//     staging slab: the same layout; the executor writes into it (reserveSend) and the
//       sender moves slot i of it to slot i of the receiver with one RDMA WRITE WITH IMM.
//     credit word: u64, remote-writable; the receiver's count of released slots.
//
//   data (sender -> receiver): RDMA WRITE WITH IMM of header + payload, slot = seq % nslots.
//     The immediate is encodeDataImm(seq, bytes): its top 8 bits are seq mod 256, its low
//     24 bits the payload length (or kLongLength when the payload is 16 MiB - 1 or more, in
//     which case only the header says how long it is). The receiver knows which sequence
//     number comes next (RC delivers in order), so the 8 bits are an ordering check; the
//     slot index follows from the sequence number and needs no bits of its own. The
//     header repeats the length and the full low 32 bits of seq, and both must agree with
//     the immediate: a torn, stale or foreign write is caught before it reaches the
//     executor.
//   credits (receiver -> sender): RDMA WRITE WITH IMM of the receiver's release counter
//     (u64) into the sender's credit word, immediate = its low 32 bits. Why a write with
//     immediate rather than a plain write or a send: the word holds the whole counter, so
//     each update supersedes the ones before it (a receiver under pressure can fold many
//     releases into one, and nothing is lost if the sender reads the word late) and no
//     receive buffer has to be parsed; the immediate makes the update a completion on the
//     sender's CQ, so a sender that ran out of credits can sleep on its completion
//     channel instead of spinning on a word the NIC writes without waking anyone.
//   device messages (GPUDirect RDMA, BRAID_CUDA_PATH=ipc): each end may also have a device
//     area, GPU memory registered with the NIC, of nslots payloads of slotBytes (slot i at
//     i * slotBytes). The sender's kernels write the payload into slot i of its own area;
//     the sender then posts two work requests: an RDMA WRITE (no immediate, unsignaled) of
//     the payload to slot i of the receiver's area, and the RDMA WRITE WITH IMM of the slot
//     header alone, with kDeviceBit set in its length, into the slot FIFO. RC executes
//     them in order, so the header's arrival says the payload is in the receiver's area,
//     and a failed payload write fails the header's too. The immediate carries the payload
//     length as for any message; the header write carries kSlotHeaderBytes.
//   ready: the receiver's first credit message (counter 0) is sent as soon as its queue
//     pair is connected; before it arrives the sender's reserveSend reports kWouldBlock,
//     so no data is ever written into a queue pair that cannot take it yet.
//
// Flow control: the sender may have at most nslots slots posted and not yet released,
// and reuses a staging slot only after its write completed locally. The receiver gets at
// most nslots data writes ahead of its releases; it never posts more than
// kMaxCreditsInFlight credit writes at once and folds further releases into the next one.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/auth.h"
#include "common/status.h"
#include "transports/transport.h"

namespace braid::transport::ibverbs {

// ---- slot layout ------------------------------------------------------------------------

// In front of every payload, in the staging slot and in the receiver's slot.
struct SlotHeader {
  uint64_t tag;    // the executor's tag
  uint32_t bytes;  // payload length
  uint32_t seq;    // low 32 bits of the connection's sequence number
};
static_assert(sizeof(SlotHeader) == 16, "the slot header is part of the wire format");
// Set in SlotHeader::bytes of a device message: its payload is in the device area.
constexpr uint32_t kDeviceBit = 1u << 31;
constexpr size_t kSlotHeaderBytes = sizeof(SlotHeader);

// Bytes between the starts of two slots: header + payload rounded up to a cache line.
size_t slotStride(size_t slotBytes);

// ---- immediates -------------------------------------------------------------------------

// The low 24 bits of a data immediate when the header alone carries the length.
constexpr uint32_t kLongLength = 0xFFFFFF;

// The immediate (host byte order; the device converts) of the data write of sequence
// number `seq` carrying `bytes` of payload.
uint32_t encodeDataImm(uint64_t seq, size_t bytes);

struct DataImm {
  uint32_t seq8 = 0;     // seq mod 256
  uint32_t length = 0;   // payload bytes, valid when !longForm
  bool longForm = false; // the length is only in the slot header
};
DataImm decodeDataImm(uint32_t imm);

// The immediate of a credit write carrying release counter `released`.
inline uint32_t encodeCreditImm(uint64_t released) { return static_cast<uint32_t>(released); }

// The 64-bit counter a 32-bit immediate stands for, given the last value seen (`prev`):
// counters only grow, and by less than 2^31 between two messages.
uint64_t widenCounter(uint64_t prev, uint32_t low32);

// ---- what the protocol needs from a queue pair -------------------------------------------

// One completion, from the send side (a write this side posted finished) or the receive
// side (the peer's write with immediate landed in this side's memory).
struct Completion {
  enum class Op : uint8_t { kWrite, kCredit, kArrival };
  Op op = Op::kArrival;
  bool ok = true;
  int status = 0;                // the device's status code when !ok
  const char* error = "";        // its text (ibv_wc_status_str) when !ok; static storage
  uint32_t imm = 0;              // kArrival: the immediate, host order
  uint32_t byteLen = 0;          // kArrival: bytes the write carried
};

// One RC queue pair with its memory, as the protocol sees it. Implementations: VerbsQueue
// (ibverbs_device.h) and FakeQueue (the unit tests). Used by one thread at a time.
class RdmaQueue {
 public:
  virtual ~RdmaQueue() = default;

  // Sender: RDMA WRITE WITH IMM of `bytes` at `offset` of the local slab to the same offset
  // of the peer's slot slab; exactly one kWrite completion follows. Does not block; the
  // protocol never has more than nslots writes outstanding, which the queue is sized for.
  virtual Status postWrite(size_t offset, size_t bytes, uint32_t imm) = 0;
  // Sender, zero copy: as postWrite, one write with immediate to the same offset of the
  // peer's slab, gathering `headerBytes` at `offset` of the local slab and then `bytes` read
  // from `user` (registered memory, local key `lkey`). The NIC reads `user` until the
  // write's kWrite completion.
  virtual Status postWriteFrom(size_t offset, size_t headerBytes, const void* user, size_t bytes, uint32_t lkey,
                               uint32_t imm) = 0;
  // Sender, device messages: RDMA WRITE (no immediate, unsignaled) of `bytes` at `offset`
  // of the local device area to the same offset of the peer's. No completion follows on
  // success; a failure puts the queue pair in error, so the header write posted after it
  // completes with an error. Fails when either area is missing.
  virtual Status postAreaWrite(size_t offset, size_t bytes) = 0;
  // Receiver: writes `released` into the peer's credit word, with immediate `imm`; exactly
  // one kCredit completion follows.
  virtual Status postCredit(uint64_t released, uint32_t imm) = 0;
  // Up to `max` completions into `out`, oldest first; 0 when none. Never blocks. Arrivals
  // are in the order the peer posted them (RC). Fails only if polling itself fails.
  virtual StatusOr<int> poll(Completion* out, int max) = 0;
  // Sender: the credit word as the peer last wrote it.
  virtual uint64_t creditWord() const = 0;
  // The local slab: staging slots on the sender, the slot FIFO on the receiver.
  virtual uint8_t* slab() = 0;
  // A fatal asynchronous event the device reported for this queue pair, its port or its
  // device (e.g. "port 1 went down (IBV_EVENT_PORT_ERR)"), or nullptr. Once set it stays
  // set, and the string lives as long as the queue.
  virtual const char* asyncFailure() = 0;
};

// ---- error translation ------------------------------------------------------------------

// A failed completion: kRemoteError naming `peer`, e.g. "ibverbs: RDMA write to rank 3
// failed: transport retry counter exceeded (status 12)".
Status completionFailure(int peer, Completion::Op op, int status, const char* text);
// A fatal async event: kRemoteError naming `peer`.
Status asyncEventFailure(int peer, const char* what);
// The peer broke the protocol (or something else wrote into its queue pair): kRemoteError.
Status protocolViolation(int peer, const std::string& what);

// ---- the two halves of a connection -------------------------------------------------------

// Sender half. Not thread-safe (one executor thread at a time).
class SendProtocol {
 public:
  SendProtocol(RdmaQueue* q, int peer, int nslots, size_t slotBytes);

  // A staging slot to write up to slotBytes into, or kWouldBlock while the receiver holds
  // every slot (or has not said it is ready). Repeated calls return the same slot.
  Status reserve(Slot* s);
  // Posts the reserved slot with `bytes` of payload and `s.tag`.
  Status post(const Slot& s, size_t bytes);
  // Zero copy: posts the reserved slot's header with `bytes` of payload read from `src`
  // (registered, local key `lkey`) instead of the slot's. The message is number posted()
  // before the call; `src` is read until completed() exceeds that number.
  Status postFrom(const Slot& s, const void* src, size_t bytes, uint32_t lkey);
  // Device messages: once both ends' areas are registered and the peer's is known
  // (RdmaQueue::postAreaWrite works), postDevice sends the reserved slot's payload from
  // offset areaOffset(s) of this end's area to the same offset of the receiver's.
  void enableDeviceArea(bool on) { device_ = on; }
  size_t areaOffset(const Slot& s) const;
  Status postDevice(const Slot& s, size_t bytes);
  // Polls completions: credits, finished writes, errors (sticky once seen).
  Status progress();
  // Every posted write has completed (the RC ack came back, so the data is in the peer).
  bool flushed() const { return completed_ == posted_; }
  // The receiver's ready message has arrived.
  bool ready() const { return ready_; }
  // A slot is free right now (after the last progress).
  bool canReserve() const;
  uint64_t posted() const { return posted_; }
  uint64_t completed() const { return completed_; }
  uint64_t released() const { return released_; }
  size_t slotBytes() const { return slotBytes_; }

 private:
  Status take(const Completion& c);
  // `user`: the payload's memory for a zero-copy message (its key `lkey`), else null.
  Status postHeader(const Slot& s, size_t bytes, bool device, const void* user = nullptr, uint32_t lkey = 0);

  RdmaQueue* q_;
  int peer_;
  uint64_t nslots_;
  size_t slotBytes_;
  size_t stride_;
  bool device_ = false;
  uint64_t posted_ = 0;     // data writes posted
  uint64_t completed_ = 0;  // of those, completed locally
  uint64_t released_ = 0;   // the receiver's release counter as last seen
  uint64_t creditImm_ = 0;  // the counter the last credit immediate stood for
  bool ready_ = false;
  Status failure_;
};

// Receiver half. Not thread-safe.
class RecvProtocol {
 public:
  RecvProtocol(RdmaQueue* q, int peer, int nslots, size_t slotBytes);

  // Sends the ready message; call once the queue pair is connected.
  Status start();
  // The oldest unreleased slot, or kWouldBlock. Repeated calls return the same slot. A
  // device message's slot has `device` set; its payload is at areaOffset(s) of the area.
  Status peek(Slot* s);
  // Device messages are accepted once this end's area is registered (before its name
  // goes to the sender); before that, one is a protocol error.
  void enableDeviceArea(bool on) { device_ = on; }
  size_t areaOffset(const Slot& s) const;
  // Hands the oldest slot back and returns its credit to the sender.
  Status release(const Slot& s);
  Status progress();
  // A slot has arrived and is not yet released (after the last progress).
  bool canPeek() const { return consumed_ < arrived_; }
  uint64_t arrived() const { return arrived_; }
  uint64_t consumed() const { return consumed_; }
  size_t slotBytes() const { return slotBytes_; }

  // At most this many credit writes are outstanding; later releases wait and coalesce.
  static constexpr int kMaxCreditsInFlight = 4;

 private:
  Status take(const Completion& c);
  Status arrival(const Completion& c);
  Status sendCredit();

  RdmaQueue* q_;
  int peer_;
  uint64_t nslots_;
  size_t slotBytes_;
  size_t stride_;
  uint64_t arrived_ = 0;   // data writes landed and checked
  uint64_t consumed_ = 0;  // slots released by the executor
  uint64_t credited_ = 0;  // the release counter last sent
  int creditsInFlight_ = 0;
  bool started_ = false;
  bool device_ = false;
  std::vector<uint32_t> lengths_;  // per slot, the payload length checked on arrival
  std::vector<uint8_t> inArea_;    // per slot, whether the payload is in the device area
  Status failure_;
};

// ---- address blobs ------------------------------------------------------------------------

// Where a queue pair can be reached.
struct QpAddress {
  uint32_t qpn = 0;
  uint32_t psn = 0;       // its first packet sequence number
  uint16_t lid = 0;       // InfiniBand: the port's LID; 0 on RoCE
  uint8_t port = 0;
  uint8_t mtu = 0;        // the port's active MTU as an ibv_mtu value (1..5)
  uint8_t gid[16] = {};   // RoCE / routed InfiniBand: the GID traffic is addressed to
  bool global = false;    // whether packets to it need a GRH (RoCE always does)
};

// What a receiver publishes (createRecv) for its sender.
struct RecvBlob {
  uint64_t nonce = 0;
  int32_t rank = -1;          // the receiver
  int32_t channel = -1;
  uint32_t nslots = 0;
  uint64_t slotBytes = 0;
  uint64_t slabAddr = 0;      // the slot slab, remote address and key
  uint32_t slabRkey = 0;
  QpAddress data;             // the connection's RC queue pair
  QpAddress hello;            // the receiving transport's UD queue pair for hellos
  uint32_t helloQkey = 0;
  // Drawn for this connection; in a job with a key the sender's hello proves the key over
  // it (helloProof), so that a datagram from outside the job cannot connect this queue pair.
  std::array<uint8_t, 16> challenge{};
};

// What a sender tells the receiver (a datagram to RecvBlob::hello) so it can connect its
// queue pair back: the sender's queue pair and credit word.
struct SenderHello {
  uint64_t nonce = 0;
  int32_t rank = -1;          // the sender
  int32_t channel = -1;
  uint32_t recvQpn = 0;       // the receiver's queue pair it answers (RecvBlob::data.qpn)
  QpAddress data;
  uint64_t creditAddr = 0;
  uint32_t creditRkey = 0;
  Digest proof{};             // helloProof, or all zeros in a job without a key
};

std::string encodeRecvBlob(const RecvBlob& b);
// Decodes what `peer` published for `channel`; kInvalidArgument naming the rank for a
// blob that is truncated, of another format or version, another rank's or channel's, of
// another job (nonce), or of another slot geometry than `nslots` x `slotBytes`.
StatusOr<RecvBlob> decodeRecvBlob(const std::string& blob, int peer, int channel, uint64_t nonce, int nslots,
                                  size_t slotBytes);

// A receiver's device area as its sender needs it (GPUDirect RDMA): where it is and its
// remote key, and its size. Text ("ibarea:<addr>:<rkey>:<bytes>", hexadecimal), since it
// travels in a string of names ';' and '|' separate (Session::setupDeviceSlots).
struct AreaName {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t bytes = 0;
};
std::string encodeAreaName(const AreaName& a);
// kInvalidArgument naming `peer` for a malformed name or one of another size than `bytes`.
StatusOr<AreaName> decodeAreaName(const std::string& name, int peer, uint64_t bytes);

// The hello travels as a datagram; kHelloBytes is its fixed size.
std::string encodeHello(const SenderHello& h);
// Decodes a datagram; kInvalidArgument for a malformed one (the caller ignores those: a
// datagram of another job or program is not this job's failure). Checks the nonce.
StatusOr<SenderHello> decodeHello(const void* data, size_t bytes, uint64_t nonce);
constexpr size_t kHelloBytes = 128;

// The proof a hello carries: authProof under the job's key over the hello's fields (its own
// proof left out), the receiver's rank and the challenge of the receiver's blob.
Digest helloProof(const AuthKey& key, const SenderHello& h, int receiver, const std::array<uint8_t, 16>& challenge);
// Whether `h` proves `key` for this receiver and challenge ("" if it does, else why not, as
// a SECURITY line says it).
std::string checkHelloProof(const AuthKey& key, const SenderHello& h, int receiver,
                            const std::array<uint8_t, 16>& challenge);

}  // namespace braid::transport::ibverbs

#pragma once
// The transport seam. Every transport (loopback, shm, tcp, and later UCX, verbs, CUDA IPC)
// offers one-directional connections that carry fixed-size slots in FIFO order, NCCL's
// connector idea: the executor asks for a slot, writes (or reduces) straight into it, and
// posts it; the receiver peeks the oldest slot, consumes it in place, and releases it.
//
// Memory transports (shm, loopback) hand out slots that live in the receiver's memory, so a
// fused step writes straight into the peer. Stream transports (tcp) hand out local staging
// slots and move them during progress().

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/auth.h"
#include "common/clock.h"
#include "common/status.h"

namespace braid::transport {

// One slot of a connection's FIFO.
struct Slot {
  void* data = nullptr;  // reserveSend: where to write; peekRecv: the payload
  size_t bytes = 0;      // peekRecv: payload length
  uint64_t tag = 0;      // travels with the payload; the executor uses it to detect
                         // collectives issued in a different order on different ranks
  bool device = false;   // peekRecv: the payload is in the connection's device area
};

// A reduction a receiver hands to its transport with a receive (Connection::peekRecvReduce):
// the payload is to be combined with `local` into the destination, element by element, as it
// arrives, rather than landed in a slot and read again.
struct ArrivalReduce {
  const void* local = nullptr;  // may be the destination itself (in place)
  // dst[0, bytes) = payload (op) local[0, bytes), `bytes` a whole number of elements; the
  // transport passes the three pointers already advanced to the same offset.
  void (*fn)(void* ctx, void* dst, const void* payload, const void* local, size_t bytes) = nullptr;
  void* ctx = nullptr;
  size_t elemBytes = 1;
};

// How a waiter can sleep until a connection may have work: a futex word in shared memory
// (memory transports) and/or a file descriptor to poll (stream transports).
struct WaitHandle {
  const uint32_t* futexWord = nullptr;  // sleep while *futexWord == futexValue
  uint32_t futexValue = 0;
  int fd = -1;                          // poll for fdEvents
  short fdEvents = 0;
};

// One direction, one peer, one channel. No method blocks; none is thread-safe: a
// connection belongs to one executor thread at a time.
class Connection {
 public:
  virtual ~Connection() = default;

  // Largest payload a slot holds.
  virtual size_t slotBytes() const = 0;

  // Sender: a free slot to write up to slotBytes() into, or kWouldBlock when the FIFO is
  // full. Calling it again before postSend returns the same slot.
  virtual Status reserveSend(Slot* s) = 0;
  // Sender: publishes the reserved slot with `bytes` of payload and `s.tag`.
  virtual Status postSend(const Slot& s, size_t bytes) = 0;

  // Receiver: the oldest unreleased incoming slot, or kWouldBlock. Calling it again
  // without releaseRecv returns the same slot.
  virtual Status peekRecv(Slot* s) = 0;
  // Receiver: hands the slot back to the sender.
  virtual Status releaseRecv(const Slot& s) = 0;

  // Zero copy (optional). A transport that can move a message straight between the
  // callers' buffers says so here; the executor then skips staging where a step allows it.
  //
  // Sender: after a successful reserveSend, posts `bytes` read from `src` (the caller's
  // memory) as the next message instead of the slot's contents. `src` must stay unchanged
  // until flushed().
  virtual bool sendsFromUser() const { return false; }
  // A memory transport: the slots are the receiver's memory, so a slot-sized send already
  // costs one copy, and a reduction writes straight into the receiver's memory. Sends from
  // the caller's memory then pay only where the receiver copies once instead of twice.
  virtual bool inReceiverMemory() const { return false; }
  virtual Status postSendFrom(const Slot& s, const void* src, size_t bytes) {
    return Status(Code::kInternal, "this transport cannot send from the caller's memory");
  }
  // Receiver: peekRecv, asking that the payload (`bytes` long) land at `dst`. A transport
  // that can do so returns s->data == dst; otherwise it returns a slot as peekRecv does.
  // Calling it again before releaseRecv returns the same message.
  virtual Status peekRecvInto(Slot* s, void* dst, size_t bytes) { return peekRecv(s); }
  // Receiver: the message `ahead` places after the oldest unreleased one (0: the next to be
  // peeked) will be asked for with peekRecvInto(dst, bytes), or peekRecv when dst is null. A
  // transport that posts receives may post it now, so that it lands in place even when it
  // arrives before the peek. The caller announces only messages its operation will take, in
  // order, with the same dst and bytes when it repeats one, and leaves dst's bytes alone
  // until the peek. A hint: the peek still says where the message landed.
  virtual Status expectRecv(size_t ahead, void* dst, size_t bytes) { return Status::ok(); }
  // Reduction on arrival (optional). Receiver: peekRecv, asking that `dst` (`bytes` long)
  // become the payload reduced with r.local (ArrivalReduce). s->data == dst says it did;
  // otherwise the payload is in a slot, as from peekRecv, and dst is untouched. Calling it
  // again before releaseRecv returns the same message. The payload's tag and length are
  // checked after: a message of another call may already have been folded into dst.
  virtual bool reducesOnArrival() const { return false; }
  virtual Status peekRecvReduce(Slot* s, void* dst, size_t bytes, const ArrivalReduce& r) { return peekRecv(s); }
  // expectRecv for a message that will be asked for with peekRecvReduce(dst, bytes, r): the
  // caller then leaves dst and r.local alone until the peek. A hint, as expectRecv.
  virtual Status expectReduce(size_t ahead, void* dst, size_t bytes, const ArrivalReduce& r) {
    return expectRecv(ahead, nullptr, bytes);
  }
  // False when expectRecv never acts on this connection: the executor then announces
  // nothing to a channel whose connections all say so (a small call saves the calls).
  virtual bool takesAnnouncements() const { return false; }
  // The bits of Slot::tag this connection carries; a receiver compares tags under it.
  virtual uint64_t tagMask() const { return ~uint64_t{0}; }
  // Large messages (optional). The largest message this connection carries when it goes
  // from the caller's memory (postSendFrom) to the caller's memory (peekRecvInto, which then
  // must land it at dst), never through a slot; the same on both ends of a connection. The
  // communicator sends messages above slotBytes() only when every connection of every rank
  // carries them, and only in schedules marked wholeBlocks (exec/schedule.h).
  virtual size_t maxMessageBytes() const { return slotBytes(); }
  // Receiver: the tag of the oldest incoming message, without taking it, or kWouldBlock. A
  // transport whose peekRecv would commit that message to a slot (UCX posts a receive, too
  // small for a large message) looks without committing; the others peek.
  virtual Status peekTag(uint64_t* tag) {
    Slot s;
    Status st = peekRecv(&s);
    if (st.isOk()) *tag = s.tag;
    return st;
  }

  // Drives I/O (stream transports) and reports a failed peer as kRemoteError naming it.
  // The executor calls it on every connection of a channel while the channel waits: by
  // its return a receiver has told its sender of every slot released, or started to (a
  // ring may wait to send on every rank at once, each sender counting on its whole FIFO).
  virtual Status progress() = 0;

  // Whether every posted send has been handed to the peer (stream transports may still
  // hold staged bytes). Memory transports are always flushed.
  virtual bool flushed() const { return true; }

  // Whether this connection itself reports a dead peer as kRemoteError (a socket's EOF, a
  // UCX endpoint's error callback). Memory transports cannot; the communicator's liveness
  // checks (pidfds, deadlines, abort records) cover them.
  virtual bool seesPeerFailure() const { return false; }

  // What to sleep on while waiting for this connection to become ready to send (forSend)
  // or to receive. Arms any wake-up the peer must deliver; call disarm() after waking.
  virtual WaitHandle waitHandle(bool forSend) = 0;
  virtual void disarm(bool forSend) {}

  virtual int peer() const = 0;

  // Memory transports: the memory this connection's slots live in, as mapped in this process
  // (so a device path can register it with the GPU and reduce straight from and into the
  // slots, as NCCL's shm transport does); {nullptr, 0} where slots are not such memory.
  struct MemoryRange {
    void* base = nullptr;
    size_t bytes = 0;
  };
  virtual MemoryRange slotMemory() const { return {}; }

  // Device slots (the direct GPU path over CUDA IPC, docs/cuda.md): a memory transport may
  // carry a device call's payloads in an area of GPU memory beside its FIFO, one slot per
  // FIFO slot, the receiver's, which the sender's kernels write through CUDA IPC. The FIFO
  // still orders them; a message says which area it is in (Slot::device).
  // Bytes an area needs (0: this connection cannot have one), and the area once made.
  virtual size_t deviceAreaBytes() const { return 0; }
  virtual void setDeviceArea(void* base) {}
  // Where slot `s` (reserved for sending, or received with s.device) lives in the area;
  // nullptr without an area.
  virtual void* deviceData(const Slot& s) const { return nullptr; }
  // Sender: posts the reserved slot, whose payload was written at deviceData(s).
  virtual Status postSendDevice(const Slot& s, size_t bytes) {
    return Status(Code::kInternal, "this transport has no device slots");
  }

  // How the device area is reached. kShared: the receiver's area alone, which the sender
  // opens (CUDA IPC) and its kernels write into; setDeviceArea gets the receiver's own area
  // on the receiving end and the opened one on the sending end. kRegistered (GPUDirect
  // RDMA): each end has an area of its own registered with the NIC; the sender's kernels
  // write into the sender's, and the transport moves each payload into the receiver's;
  // setDeviceArea gets each end's own area, after registerDeviceArea (both ends) and
  // attachPeerDeviceArea (the sender).
  enum class DeviceAreaKind { kNone, kShared, kRegistered };
  virtual DeviceAreaKind deviceAreaKind() const {
    return deviceAreaBytes() ? DeviceAreaKind::kShared : DeviceAreaKind::kNone;
  }
  // GPU memory given to the NIC: a dmabuf of it where the GPU gives one (fd >= 0, the
  // area at `offset` in it), else the area's address alone.
  struct DeviceMemory {
    void* base = nullptr;
    int dmabufFd = -1;
    uint64_t dmabufOffset = 0;
  };
  // kRegistered: registers this end's area with the NIC and returns the name the sender
  // needs (on a sending end, "" or anything: nobody reads it). Undone by
  // releaseDeviceArea, which must come before the area is freed.
  virtual StatusOr<std::string> registerDeviceArea(const DeviceMemory& area) {
    return Status(Code::kInternal, "this transport registers no device areas");
  }
  // kRegistered, sending end: the receiver's area, by the name its registerDeviceArea gave.
  virtual Status attachPeerDeviceArea(const std::string& name) {
    return Status(Code::kInternal, "this transport registers no device areas");
  }
  virtual void releaseDeviceArea() {}
};

// What a rank tells the others about itself, through the bootstrap.
struct PeerInfo {
  int rank = -1;
  std::string hostId;   // hostname + boot id, or BRAID_HOST_ID
  // Its pid, meaningful on its host only within its pid namespace (pidNs): containers that
  // share a host's name may number their processes apart, each rank as pid 1. A plugin gets
  // 0 for a peer whose pid namespace is not its own.
  int64_t pid = 0;
  uint64_t nonce = 0;   // session nonce: connections carrying another one are refused
  uint64_t pidNs = 0;   // common/process_state.h pidNamespace(), 0: unknown
  // common/process_state.h processToken(): equal for ranks of one process, and only for
  // them. 0 in a record made by hand (tests), where pid stands in for it.
  uint64_t process = 0;
  // common/process_state.h sharedMemoryDevice(): ranks of one host whose /dev/shm differ
  // (containers with IPC of their own) cannot meet in shared memory. 0: unknown.
  uint64_t shmDev = 0;
  // common/process_state.h networkNamespace(): ranks of one host whose network namespaces
  // differ do not share its loopback interface. 0: unknown.
  uint64_t netNs = 0;
};

// Whether two ranks run in one process (threads of it).
inline bool sameProcess(const PeerInfo& a, const PeerInfo& b) {
  if (a.process != 0 || b.process != 0) return a.process == b.process;
  return a.pid == b.pid;
}
// Whether two ranks of one host see the same /dev/shm (or either cannot tell).
inline bool shareDevShm(const PeerInfo& a, const PeerInfo& b) {
  return a.shmDev == 0 || b.shmDev == 0 || a.shmDev == b.shmDev;
}
// Whether two ranks share one network namespace (or either cannot tell).
inline bool shareNetNs(const PeerInfo& a, const PeerInfo& b) {
  return a.netNs == 0 || b.netNs == 0 || a.netNs == b.netNs;
}
// Whether `a`'s pid names the same process on `b`'s host as on its own: the same host and
// the same pid namespace (or one that neither could tell).
inline bool pidMeaningfulTo(const PeerInfo& a, const PeerInfo& b) {
  return a.hostId == b.hostId && a.pidNs == b.pidNs;
}

// Settings every transport gets from the communicator.
struct TransportConfig {
  int rank = 0;
  int nranks = 1;
  uint64_t nonce = 0;
  // The job's key (common/auth.h): a transport whose peers connect to it (tcp) admits only
  // connections that prove it. Absent: admitted on the nonce alone.
  AuthKey authKey;
  // tcp: run TLS 1.3 keyed by authKey on every data socket (common/tls.h).
  bool tls = false;
  size_t slotBytes = 512 * 1024;  // payload per slot
  int nslots = 8;                 // FIFO depth
  int numaNode = -1;              // where to place receive buffers, -1 for anywhere
  double connectTimeoutSec = 60;
  int socketsPerPeer = 1;         // tcp: sockets striped per connection
  std::string netIf;              // tcp: interface, address or NCCL-style list to listen on
  int portLo = 0, portHi = 0;     // tcp: listen on a free port in [portLo, portHi]; 0 = any
  // tcp: the interface ring channel c listens on (and advertises) is channelNetIfs[c], the
  // NIC the topology gives that channel; an empty entry, a channel past the end, or an
  // interface without an IPv4 address on this host means netIf.
  std::vector<std::string> channelNetIfs;
  std::string ibHca;              // RDMA transports: NICs in NCCL_IB_HCA syntax
  int ibGidIndex = -1;            // RDMA transports: RoCE GID index, -1 = from sysfs
  // Setup calls that wait on a peer (tcp's connect retries) run this every few hundred ms
  // and give up with its error: a peer that failed its own setup publishes an abort record,
  // and the others must not wait out the whole connect timeout for it.
  std::function<Status()> abortCheck;
};

// Runs a TransportConfig's abortCheck at most every kPeriodNs, for setup loops that wait on
// peers (a store round trip per turn would slow them): a peer that died or failed while the
// others connect to it then ends their wait within the period, not at the deadline.
class AbortCheckPacer {
 public:
  static constexpr int64_t kPeriodNs = 200 * 1000 * 1000;
  explicit AbortCheckPacer(std::function<Status()> check) : check_(std::move(check)) {}
  Status poll() {
    if (!check_ || nowNanos() < next_) return Status::ok();
    next_ = nowNanos() + kPeriodNs;
    return check_();
  }

 private:
  std::function<Status()> check_;
  int64_t next_ = nowNanos() + kPeriodNs;
};

// A transport instance belongs to one communicator. Setup runs in three phases so that
// every transport can be wired up through the store without a per-connection round trip:
//   1. createRecv() for every incoming connection; its blob goes to the sending peer.
//   2. connectSend() on the sender with the receiver's blob.
//   3. after a barrier among all ranks, establish() finishes what needs both sides
//      (tcp accepts and matches sockets; shm unlinks its segments).
class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // One line on what this instance found (devices, sub-transports), for braid-info.
  virtual std::string describe() const { return ""; }

  // Score for carrying traffic from `local` to `remote`; 0 = cannot. Higher wins.
  virtual int canConnect(const PeerInfo& local, const PeerInfo& remote) const = 0;

  // Phase 1: resources for receiving from `peer` on `channel`; `blob` is what the sender
  // needs to attach. The connection may not carry data before establish().
  virtual StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel,
                                                           std::string* blob) = 0;
  // Phase 2: attach to the receiver described by `blob`.
  virtual StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel,
                                                            const std::string& blob) = 0;
  // Phase 3: completes every connection created so far. Blocks up to `deadline`.
  virtual Status establish(Deadline deadline) = 0;

  // The communicator learnt that `rank` failed (exited, stopped, made no progress for the
  // timeout, or agreed failed by the survivors): a transport whose teardown waits for what
  // is in flight to or from a peer (UCX's flushes) may stop waiting for this one. Called at
  // a communicator's teardown, before its connections close, from the thread that closes
  // them.
  virtual void peerFailed(int rank) {}

  // Whether this transport has seen `rank` fail: a connection to or from it that sees peer
  // failure (Connection::seesPeerFailure) found it gone. Drives what must be driven for the
  // news to arrive, without waiting. The communicator asks while an agreement waits for the
  // votes of ranks no other check has found dead, from the agreeing thread, and only while
  // no operation is in flight (no connection is in use); false where it cannot tell. A
  // failed call may have left receives posted into its caller's memory: nothing may land
  // there any more (the caller may have freed it), so they are cancelled before anything
  // is driven, and what cannot be is not driven.
  virtual bool sawPeerFail(int rank) { return false; }
};

// The registry: the built-in transports, listed once in registry.cc, then the plugins found
// through BRAID_TRANSPORT_PLUGIN and the plugin folder (plugin_loader.h).
struct TransportFactory {
  const char* name;
  // Fails when the transport cannot run here (a plugin's library finds no device, say).
  std::function<StatusOr<std::unique_ptr<Transport>>(const TransportConfig& cfg)> create;
  std::string origin = "built in";  // or the plugin's file
  std::string version;              // a plugin's own version string
};
const std::vector<TransportFactory>& registry();

// A plugin that was found but could not be loaded: its transport name (from the file name
// libbraid-net-<name>.so, or the file itself) and why. Selecting that name with
// BRAID_TRANSPORT fails with this reason; otherwise it was a one-line warning.
struct PluginFailure {
  std::string name;
  std::string file;
  std::string reason;
};
const std::vector<PluginFailure>& pluginFailures();

// The names a user may give BRAID_TRANSPORT, comma-separated, plugins marked.
std::string availableTransports();

}  // namespace braid::transport

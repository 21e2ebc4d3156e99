#pragma once
// The two halves of a tcp connection. Both sides keep cfg.nslots local staging slots of
// cfg.slotBytes and stream them as frames (socket_util.h) over socketsPerPeer sockets.
//
// The sender hands out its staging slots in order; a slot becomes free again once its
// frame is completely written to the kernel, so the FIFO a sender sees is its own slots plus
// the kernel's socket buffers plus the receiver's slots. The receiver reads each frame
// straight into one of its slots (no intermediate buffer) and reads the next frame's header
// in the same readv() as the current payload, so a stream of large frames costs about one
// system call per slot on each side.
//
// Zero copy: a frame may be written from the caller's memory instead of its slot
// (postSendFrom), and read into the caller's memory instead of its slot (peekRecvInto).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/tls.h"
#include "transports/tcp/socket_util.h"
#include "transports/transport.h"

namespace braid::transport::tcp {

// The sockets of one receive connection. The transport fills them in during establish()
// while the connection already exists, so both hold it; the connection owns the fds once
// bound (closed here), the transport only keeps a weak reference to find it.
struct SocketSet {
  SocketSet(int peer, int channel, int sockets) : peer(peer), channel(channel), fds(sockets, -1) {}
  ~SocketSet();
  SocketSet(const SocketSet&) = delete;
  SocketSet& operator=(const SocketSet&) = delete;

  bool complete() const { return bound == static_cast<int>(fds.size()); }

  int peer;
  int channel;
  std::string challenge;  // kChallengeBytes drawn for this connection; handshakes prove the key over it
  std::vector<int> fds;  // by socket index; -1 until the handshake for it arrives
  // BRAID_TLS: each socket's TLS session (server side), made when the socket is bound; the
  // transport completes the handshakes in establish().
  std::vector<std::shared_ptr<TlsStream>> tls;
  int bound = 0;
};

// The sockets of one send connection as its transport watches them for the peer's end
// (TcpTransport::sawPeerFail). The connection owns the fds and keeps this alive while they
// are open; the transport holds a weak reference.
struct SocketWatch {
  int peer = -1;
  std::vector<int> fds;
};

// Whether the other end of connected socket `fd` is gone: it closed its side (its process
// ended) or reset the connection. Reads nothing.
bool socketEnded(int fd);

// The TLS binding of socket `index` of the connection from `src` to `dst` on `channel`:
// both ends derive the session's key from the job key and this.
std::string tlsBinding(uint64_t nonce, int src, int dst, int channel, int index);

// Page-aligned staging memory for all slots of one connection.
struct AlignedFree {
  void operator()(uint8_t* p) const;
};
using SlotMemory = std::unique_ptr<uint8_t, AlignedFree>;

class TcpSendConnection final : public Connection {
 public:
  // `fds` are connected sockets that already carried their handshake, ordered by socket
  // index; the connection owns and closes them. With BRAID_TLS, `tls` holds their sessions
  // (client side), whose handshakes the transport completes in establish().
  TcpSendConnection(const TransportConfig& cfg, int peer, std::vector<int> fds,
                    std::vector<std::shared_ptr<TlsStream>> tls = {});
  ~TcpSendConnection() override;

  // Its sockets, for the transport to watch.
  std::weak_ptr<const SocketWatch> watch() const { return watch_; }

  size_t slotBytes() const override { return slotBytes_; }
  // Calls progress() when the next slot is still being written, so a sender loop needs no
  // separate progress calls.
  Status reserveSend(Slot* s) override;
  // Writes the frame right away when its socket has nothing queued before it.
  Status postSend(const Slot& s, size_t bytes) override;
  // Zero copy on the sending side: the frame's payload is written from `src` (up to
  // slotBytes) instead of the reserved slot, which stays unused. BRAID_TCP_ZCOPY=0 turns it
  // off, for comparison.
  bool sendsFromUser() const override { return fromUser_; }
  Status postSendFrom(const Slot& s, const void* src, size_t bytes) override;
  Status peekRecv(Slot* s) override;
  Status releaseRecv(const Slot& s) override;
  // Writes queued frames until the kernel pushes back. Free when nothing is queued.
  Status progress() override;
  bool seesPeerFailure() const override { return true; }
  // Does not write by itself: a caller waiting for the flush keeps calling progress().
  bool flushed() const override { return queued_ == 0 && !tlsPending(); }
  // forSend: POLLOUT on the socket whose frame the sender waits for. Otherwise POLLIN on
  // the first socket, which only ever becomes readable when the peer goes away.
  WaitHandle waitHandle(bool forSend) override;
  int peer() const override { return peer_; }
  // Every payload is staged in these slots (zero copy aside), so the direct GPU path can
  // register them and have its kernels write and read them (docs/cuda.md).
  MemoryRange slotMemory() const override {
    return {memory_.get(), memory_ ? slotStride_ * static_cast<size_t>(nslots_) : 0};
  }

 private:
  struct Frame {
    uint8_t header[kFrameHeaderBytes];
    uint32_t bytes = 0;
    bool busy = false;  // posted and not completely written yet
    const uint8_t* src = nullptr;  // the payload: the caller's memory (postSendFrom) or the slot
  };
  struct Stream {
    int fd = -1;
    uint64_t nextSeq = 0;  // oldest frame of this socket not completely written
    size_t offset = 0;     // bytes of that frame (header included) already written
    uint32_t queued = 0;   // frames posted to this socket and not completely written
    std::shared_ptr<TlsStream> tls;  // BRAID_TLS: frames go through it
  };
  bool tlsPending() const {
    if (!hasTls_) return false;  // plain tcp: nothing to look at on every flushed()
    for (const Stream& st : streams_)
      if (st.tls && st.tls->pending() > 0) return true;
    return false;
  }

  uint8_t* slotData(uint64_t seq) const {
    return memory_.get() + (seq % static_cast<uint64_t>(nslots_)) * slotStride_;
  }
  Status post(const Slot& s, const uint8_t* src, size_t bytes);
  Status writeStream(Stream& st);
  Status fail(Status s);

  const int peer_;
  const size_t slotBytes_;
  const size_t slotStride_;
  const int nslots_;
  SlotMemory memory_;
  std::vector<Frame> frames_;
  std::vector<Stream> streams_;
  std::shared_ptr<SocketWatch> watch_;
  uint64_t postSeq_ = 0;  // sequence number of the next frame to reserve and post
  uint32_t queued_ = 0;   // frames posted and not completely written, all sockets
  bool hasTls_ = false;   // BRAID_TLS: the streams write through TLS sessions
  bool fromUser_ = true;  // BRAID_TCP_ZCOPY=0 clears it
  Status error_;          // sticky: a connection that lost its peer stays failed
};

class TcpRecvConnection final : public Connection {
 public:
  TcpRecvConnection(const TransportConfig& cfg, std::shared_ptr<SocketSet> sockets);
  ~TcpRecvConnection() override = default;

  size_t slotBytes() const override { return slotBytes_; }
  Status reserveSend(Slot* s) override;
  Status postSend(const Slot& s, size_t bytes) override;
  // Calls progress() when the oldest slot is not complete yet. Returns complete slots that
  // arrived before a failure ahead of reporting the failure.
  Status peekRecv(Slot* s) override;
  // Zero copy on the receiving side: the oldest frame's payload is read from the socket
  // straight into `dst` unless it is already in its slot (what was read of it so far is
  // moved there). While the executor asks this way, the payloads of later frames are left in
  // the kernel until they are asked for, so that they can land too; peekRecv reads ahead
  // into the slots again. BRAID_TCP_ZCOPY=0 or =send turns it off.
  Status peekRecvInto(Slot* s, void* dst, size_t bytes) override;
  // `s` must be the message peekRecv or peekRecvInto returned last.
  Status releaseRecv(const Slot& s) override;
  // Reads frames into free slots (into a landing, for the frame peekRecvInto waits for).
  // Costs no system call while every slot is full.
  Status progress() override;
  bool seesPeerFailure() const override { return true; }
  // POLLIN on the socket that carries the oldest incomplete frame.
  WaitHandle waitHandle(bool forSend) override;
  int peer() const override { return peer_; }
  // Every payload is staged in these slots (zero copy aside), so the direct GPU path can
  // register them and have its kernels write and read them (docs/cuda.md).
  MemoryRange slotMemory() const override {
    return {memory_.get(), memory_ ? slotStride_ * static_cast<size_t>(nslots_) : 0};
  }

 private:
  enum class SlotState : uint8_t { kFree, kFilling, kFull };
  struct RecvSlot {
    uint32_t bytes = 0;
    uint64_t tag = 0;
    SlotState state = SlotState::kFree;
    uint8_t* data = nullptr;  // where the payload goes: the slot, or a landing (peekRecvInto)
  };
  struct Stream {
    int fd = -1;
    uint64_t nextSeq = 0;      // frame being read on this socket
    uint8_t header[kFrameHeaderBytes];  // the header of nextSeq while it is being read
    uint32_t headerHave = 0;   // header bytes read
    uint32_t payloadHave = 0;  // payload bytes read, once the header is complete
    bool inPayload = false;    // header of nextSeq decoded, payload being read
    bool eof = false;          // peer closed this socket at a frame boundary
    std::shared_ptr<TlsStream> tls;  // BRAID_TLS: frames come through it
  };

  uint8_t* slotData(uint64_t seq) const {
    return memory_.get() + (seq % static_cast<uint64_t>(nslots_)) * slotStride_;
  }
  bool adoptSockets();
  // The oldest frame once complete (progress() first), else kWouldBlock or the failure.
  Status peekOldest(Slot* s);
  Status readStream(Stream& st);
  Status closedError(const char* why, int err) const;

  const int peer_;
  const size_t slotBytes_;
  const size_t slotStride_;
  const int nslots_;
  std::shared_ptr<SocketSet> sockets_;
  bool ready_ = false;  // sockets_ complete and copied into streams_
  SlotMemory memory_;
  std::vector<RecvSlot> slots_;
  std::vector<Stream> streams_;
  uint64_t peekSeq_ = 0;  // oldest frame not released
  // peekRecvInto: where frame peekSeq_ lands when its payload has not been read yet, and
  // whether the executor asked so last (payloads of later frames then wait in the kernel).
  uint8_t* landing_ = nullptr;
  size_t landingBytes_ = 0;
  bool landingAsked_ = false;
  bool intoUser_ = true;  // BRAID_TCP_ZCOPY=0 or =send clears it
  Status error_;          // sticky, once a socket failed mid-frame or reset
};

}  // namespace braid::transport::tcp

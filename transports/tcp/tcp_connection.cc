#include "transports/tcp/tcp_connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace braid::transport::tcp {
namespace {

// Frames gathered into one sendmsg(). 32 frames amortize the call for small slots; large
// slots fill the socket buffer with the first few anyway.
constexpr int kMaxIov = 64;

Status wouldBlock() { return Status(Code::kWouldBlock); }

// BRAID_TCP_ZCOPY: "0" stages every payload in a slot on both ends, "send" lands none
// (receives go through slots), anything else or unset is zero copy both ways.
const char* zeroCopySetting() {
  const char* v = std::getenv("BRAID_TCP_ZCOPY");
  return v ? v : "";
}
bool sendsFromCaller() { return std::strcmp(zeroCopySetting(), "0") != 0; }
bool landsInCaller() { return sendsFromCaller() && std::strcmp(zeroCopySetting(), "send") != 0; }

// Slots start on cache-line boundaries so that reduce kernels writing into neighbouring
// slots never share a line.
size_t strideFor(size_t slotBytes) { return (slotBytes + 63) & ~size_t{63}; }

SlotMemory allocateSlots(size_t stride, int nslots) {
  void* p = nullptr;
  size_t total = stride * static_cast<size_t>(nslots);
  if (posix_memalign(&p, 4096, total == 0 ? 4096 : total) != 0) return SlotMemory(nullptr);
  return SlotMemory(static_cast<uint8_t*>(p));
}

Status closed(int peer, const std::string& why) {
  return Status(Code::kRemoteError, "tcp: connection to rank " + std::to_string(peer) + " closed (" + why + ")", peer);
}

// Turns a failed send/recv into the Status callers see: a lost connection names the peer.
Status ioError(int peer, const char* call, int err, const TlsStream* tls = nullptr) {
  if (tls && err == EPROTO)
    return Status(Code::kRemoteError,
                  "tcp: TLS on the connection to rank " + std::to_string(peer) + " failed (" + tls->error() +
                      "): data altered on the way, or not the job's peer",
                  peer);
  if (isConnectionLoss(err)) return closed(peer, std::string(call) + ": " + std::strerror(err));
  Status s = systemError(call, err);
  return Status(s.code(), "tcp: connection to rank " + std::to_string(peer) + ": " + s.message(), peer);
}

}  // namespace

SocketSet::~SocketSet() {
  tls.clear();  // the sessions refer to the sockets: gone first
  for (int fd : fds) closeFd(fd);
}

std::string tlsBinding(uint64_t nonce, int src, int dst, int channel, int index) {
  std::string b = "tcp";
  b.append(reinterpret_cast<const char*>(&nonce), 8);
  for (int32_t v : {src, dst, channel, index}) b.append(reinterpret_cast<const char*>(&v), 4);
  return b;
}

void AlignedFree::operator()(uint8_t* p) const { std::free(p); }

// ---------------------------------------------------------------------------------------
// Sender

bool socketEnded(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

TcpSendConnection::TcpSendConnection(const TransportConfig& cfg, int peer, std::vector<int> fds,
                                     std::vector<std::shared_ptr<TlsStream>> tls)
    : peer_(peer),
      slotBytes_(cfg.slotBytes),
      slotStride_(strideFor(cfg.slotBytes)),
      nslots_(cfg.nslots),
      memory_(allocateSlots(slotStride_, cfg.nslots)),
      frames_(static_cast<size_t>(cfg.nslots)) {
  streams_.resize(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    streams_[i].fd = fds[i];
    streams_[i].nextSeq = i;
    if (i < tls.size()) streams_[i].tls = std::move(tls[i]);
  }
  hasTls_ = !tls.empty();
  watch_ = std::make_shared<SocketWatch>(SocketWatch{peer, fds});
  fromUser_ = sendsFromCaller();
  if (!memory_) error_ = systemError("posix_memalign", ENOMEM);
}

TcpSendConnection::~TcpSendConnection() {
  watch_.reset();  // before its fds close
  for (Stream& st : streams_) {
    st.tls.reset();
    closeFd(st.fd);
  }
}

Status TcpSendConnection::fail(Status s) {
  if (error_.isOk()) error_ = s;
  return error_;
}

Status TcpSendConnection::reserveSend(Slot* s) {
  if (!error_.isOk()) return error_;
  const Frame& f = frames_[postSeq_ % static_cast<uint64_t>(nslots_)];
  if (f.busy) {
    BRAID_RETURN_IF_ERROR(progress());
    if (f.busy) return wouldBlock();
  }
  s->data = slotData(postSeq_);
  s->bytes = slotBytes_;
  return Status::ok();
}

Status TcpSendConnection::postSend(const Slot& s, size_t bytes) {
  return post(s, slotData(postSeq_), bytes);
}

Status TcpSendConnection::postSendFrom(const Slot& s, const void* src, size_t bytes) {
  if (!fromUser_) return internalError("tcp: postSendFrom with BRAID_TCP_ZCOPY=0");
  if (src == nullptr && bytes > 0) return invalidArgument("tcp: postSendFrom of a null buffer");
  return post(s, static_cast<const uint8_t*>(src), bytes);
}

Status TcpSendConnection::post(const Slot& s, const uint8_t* src, size_t bytes) {
  if (!error_.isOk()) return error_;
  Frame& f = frames_[postSeq_ % static_cast<uint64_t>(nslots_)];
  if (f.busy || s.data != slotData(postSeq_)) {
    return invalidArgument("tcp: postSend of a slot that reserveSend did not hand out");
  }
  if (bytes > slotBytes_) {
    return invalidArgument("tcp: postSend of " + std::to_string(bytes) + " bytes into a slot of " +
                           std::to_string(slotBytes_));
  }
  encodeFrameHeader(static_cast<uint32_t>(bytes), s.tag, f.header);
  f.bytes = static_cast<uint32_t>(bytes);
  f.src = src;
  f.busy = true;
  Stream& st = streams_[postSeq_ % streams_.size()];
  ++postSeq_;
  ++queued_;
  // A socket with frames already waiting was full a moment ago; writing again now would
  // most likely just return EAGAIN, so leave it to progress().
  if (++st.queued == 1) return writeStream(st);
  return Status::ok();
}

Status TcpSendConnection::peekRecv(Slot*) {
  return internalError("tcp: peekRecv on a send connection");
}

Status TcpSendConnection::releaseRecv(const Slot&) {
  return internalError("tcp: releaseRecv on a send connection");
}

Status TcpSendConnection::progress() {
  if (!error_.isOk() || (queued_ == 0 && !tlsPending())) return error_;
  for (Stream& st : streams_) {
    if (st.queued > 0 || (st.tls && st.tls->pending() > 0)) BRAID_RETURN_IF_ERROR(writeStream(st));
  }
  return Status::ok();
}

Status TcpSendConnection::writeStream(Stream& st) {
  const uint64_t nsockets = streams_.size();
  const uint64_t nslots = static_cast<uint64_t>(nslots_);
  if (st.tls && st.tls->pending() > 0 && st.tls->flush() < 0) {
    if (errno == EAGAIN) return Status::ok();
    return fail(ioError(peer_, "TLS write", errno, st.tls.get()));
  }
  while (st.queued > 0) {
    // Gather every queued frame of this socket (up to kMaxIov pieces), skipping what an
    // earlier partial write already sent.
    iovec iov[kMaxIov];
    int n = 0;
    size_t total = 0;
    size_t skip = st.offset;
    uint64_t seq = st.nextSeq;
    for (uint32_t k = 0; k < st.queued && n + 2 <= kMaxIov; ++k, seq += nsockets) {
      Frame& f = frames_[seq % nslots];
      if (skip < kFrameHeaderBytes) {
        iov[n].iov_base = f.header + skip;
        iov[n].iov_len = kFrameHeaderBytes - skip;
        total += iov[n++].iov_len;
        skip = 0;
      } else {
        skip -= kFrameHeaderBytes;
      }
      if (f.bytes > skip) {
        iov[n].iov_base = const_cast<uint8_t*>(f.src) + skip;
        iov[n].iov_len = f.bytes - skip;
        total += iov[n++].iov_len;
      }
      skip = 0;
    }
    ssize_t w;
    if (st.tls) {
      // Takes (copies) what it can and encrypts it as the socket allows.
      w = st.tls->writev(iov, n);
    } else {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      w = sendmsg(st.fd, &msg, MSG_NOSIGNAL);
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
      return fail(ioError(peer_, st.tls ? "TLS write" : "sendmsg", errno, st.tls.get()));
    }
    // Retire the frames that are now completely in the kernel.
    size_t left = static_cast<size_t>(w);
    while (st.queued > 0) {
      Frame& f = frames_[st.nextSeq % nslots];
      size_t frameLeft = kFrameHeaderBytes + f.bytes - st.offset;
      if (left < frameLeft) {
        st.offset += left;
        break;
      }
      left -= frameLeft;
      st.offset = 0;
      f.busy = false;
      --st.queued;
      --queued_;
      st.nextSeq += nsockets;
    }
    if (static_cast<size_t>(w) < total) return Status::ok();  // the socket buffer is full
    if (st.tls && st.tls->pending() > 0) return Status::ok();  // taken, not all sent yet
  }
  return Status::ok();
}

WaitHandle TcpSendConnection::waitHandle(bool forSend) {
  WaitHandle h;
  if (streams_.empty()) return h;
  const Stream* st = &streams_[0];
  const uint64_t nslots = static_cast<uint64_t>(nslots_);
  if (postSeq_ >= nslots && frames_[postSeq_ % nslots].busy) {
    // reserveSend waits for exactly this frame to leave.
    st = &streams_[(postSeq_ - nslots) % streams_.size()];
  } else {
    for (const Stream& s : streams_) {
      if (s.queued > 0 || (s.tls && s.tls->pending() > 0)) {
        st = &s;
        break;
      }
    }
  }
  h.fd = st->fd;
  h.fdEvents = forSend ? POLLOUT : POLLIN;
  return h;
}

// ---------------------------------------------------------------------------------------
// Receiver

TcpRecvConnection::TcpRecvConnection(const TransportConfig& cfg, std::shared_ptr<SocketSet> sockets)
    : peer_(sockets->peer),
      slotBytes_(cfg.slotBytes),
      slotStride_(strideFor(cfg.slotBytes)),
      nslots_(cfg.nslots),
      sockets_(std::move(sockets)),
      memory_(allocateSlots(slotStride_, cfg.nslots)),
      slots_(static_cast<size_t>(cfg.nslots)) {
  intoUser_ = landsInCaller();
  if (!memory_) error_ = systemError("posix_memalign", ENOMEM);
}

bool TcpRecvConnection::adoptSockets() {
  if (ready_) return true;
  if (!sockets_->complete()) return false;
  streams_.resize(sockets_->fds.size());
  for (size_t i = 0; i < streams_.size(); ++i) {
    streams_[i].fd = sockets_->fds[i];
    streams_[i].nextSeq = i;
    if (i < sockets_->tls.size()) streams_[i].tls = sockets_->tls[i];
  }
  ready_ = true;
  return true;
}

Status TcpRecvConnection::closedError(const char* why, int err) const {
  std::string reason = why;
  if (err != 0) reason += std::string(": ") + std::strerror(err);
  return closed(peer_, reason);
}

Status TcpRecvConnection::reserveSend(Slot*) {
  return internalError("tcp: reserveSend on a receive connection");
}

Status TcpRecvConnection::postSend(const Slot&, size_t) {
  return internalError("tcp: postSend on a receive connection");
}

Status TcpRecvConnection::peekRecv(Slot* s) {
  landingAsked_ = false;
  return peekOldest(s);
}

Status TcpRecvConnection::peekRecvInto(Slot* s, void* dst, size_t bytes) {
  if (!intoUser_ || dst == nullptr) return peekRecv(s);
  RecvSlot& slot = slots_[peekSeq_ % static_cast<uint64_t>(nslots_)];
  landingAsked_ = true;
  if (slot.state == SlotState::kFree) {
    // Not begun: its payload goes to dst when it is read.
    landing_ = static_cast<uint8_t*>(dst);
    landingBytes_ = bytes;
  } else if (slot.state == SlotState::kFilling && slot.data == slotData(peekSeq_) && slot.bytes <= bytes) {
    // Begun in its slot (so the sockets are adopted): what is there moves, the rest is read
    // into dst.
    const Stream& st = streams_[peekSeq_ % streams_.size()];
    if (st.inPayload && st.payloadHave > 0) std::memcpy(dst, slot.data, st.payloadHave);
    slot.data = static_cast<uint8_t*>(dst);
  }
  return peekOldest(s);
}

Status TcpRecvConnection::peekOldest(Slot* s) {
  RecvSlot* slot = &slots_[peekSeq_ % static_cast<uint64_t>(nslots_)];
  if (slot->state != SlotState::kFull) {
    Status st = progress();
    if (slot->state != SlotState::kFull) {
      if (!st.isOk()) return st;
      // The next frame is owed by a socket the peer has closed: it will never come.
      if (adoptSockets() && streams_[peekSeq_ % streams_.size()].eof) return closedError("end of stream", 0);
      return wouldBlock();
    }
  }
  s->data = slot->data;
  s->bytes = slot->bytes;
  s->tag = slot->tag;
  return Status::ok();
}

Status TcpRecvConnection::releaseRecv(const Slot& s) {
  RecvSlot& slot = slots_[peekSeq_ % static_cast<uint64_t>(nslots_)];
  if (slot.state != SlotState::kFull || s.data != slot.data) {
    return invalidArgument("tcp: releaseRecv of a slot that is not the oldest received one");
  }
  slot.state = SlotState::kFree;
  landing_ = nullptr;
  ++peekSeq_;
  return Status::ok();
}

Status TcpRecvConnection::progress() {
  if (!error_.isOk()) return error_;
  if (!adoptSockets()) return Status::ok();
  const uint64_t window = peekSeq_ + static_cast<uint64_t>(nslots_);
  for (Stream& st : streams_) {
    // Only sockets whose next frame has a free slot are read: this keeps a backed-up
    // receiver free of system calls and leaves flow control to TCP.
    if (!st.eof && st.nextSeq < window) BRAID_RETURN_IF_ERROR(readStream(st));
  }
  // A socket closed at a frame boundary is not an error by itself: a peer that finished
  // its last operation closes cleanly. peekRecv reports it once a frame is actually owed.
  return Status::ok();
}

Status TcpRecvConnection::readStream(Stream& st) {
  const uint64_t nsockets = streams_.size();
  const uint64_t nslots = static_cast<uint64_t>(nslots_);
  for (;;) {
    if (st.nextSeq >= peekSeq_ + nslots) return Status::ok();  // no free slot for it yet
    RecvSlot& slot = slots_[st.nextSeq % nslots];
    if (!st.inPayload) {
      if (st.headerHave < kFrameHeaderBytes) {
        ssize_t n;
        if (st.tls) {
          iovec h{st.header + st.headerHave, kFrameHeaderBytes - st.headerHave};
          n = st.tls->readv(&h, 1);
        } else {
          n = recv(st.fd, st.header + st.headerHave, kFrameHeaderBytes - st.headerHave, 0);
        }
        if (n == 0) {
          if (st.headerHave == 0) {
            st.eof = true;
            return Status::ok();
          }
          return error_ = closedError("end of stream inside a frame header", 0);
        }
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
          return error_ = ioError(peer_, st.tls ? "TLS read" : "recv", errno, st.tls.get());
        }
        st.headerHave += static_cast<uint32_t>(n);
        if (st.headerHave < kFrameHeaderBytes) return Status::ok();
      }
      uint32_t bytes = 0;
      uint64_t tag = 0;
      decodeFrameHeader(st.header, &bytes, &tag);
      if (bytes > slotBytes_) {
        return error_ = Status(Code::kRemoteError,
                               "tcp: malformed frame from rank " + std::to_string(peer_) + ": " +
                                   std::to_string(bytes) + " bytes for a slot of " +
                                   std::to_string(slotBytes_),
                               peer_);
      }
      slot.bytes = bytes;
      slot.tag = tag;
      slot.state = SlotState::kFilling;
      const bool lands = st.nextSeq == peekSeq_ && landing_ && bytes <= landingBytes_;
      slot.data = lands ? landing_ : slotData(st.nextSeq);
      st.inPayload = true;
      st.payloadHave = 0;
      st.headerHave = 0;
    }
    // While the executor lands payloads, a later frame's waits in the kernel for its turn.
    if (landingAsked_ && st.nextSeq != peekSeq_ && st.payloadHave == 0 && slot.bytes > 0) return Status::ok();
    bool drained = false;
    if (st.payloadHave < slot.bytes) {
      // The rest of the payload, and the next frame's header if it is already there: one
      // system call per frame while data keeps coming.
      size_t want = slot.bytes - st.payloadHave;
      iovec iov[2];
      iov[0].iov_base = slot.data + st.payloadHave;
      iov[0].iov_len = want;
      iov[1].iov_base = st.header;
      iov[1].iov_len = kFrameHeaderBytes;
      // Over TLS, readv stops when the session has nothing decrypted and the socket nothing
      // new, as a plain readv does, so a later wait on the socket never strands data.
      ssize_t n = st.tls ? st.tls->readv(iov, 2) : readv(st.fd, iov, 2);
      if (n == 0) return error_ = closedError("end of stream inside a frame", 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
        return error_ = ioError(peer_, st.tls ? "TLS read" : "readv", errno, st.tls.get());
      }
      size_t got = static_cast<size_t>(n);
      if (got < want) {
        st.payloadHave += static_cast<uint32_t>(got);
        return Status::ok();
      }
      st.payloadHave = slot.bytes;
      st.headerHave = static_cast<uint32_t>(got - want);
      drained = got < want + kFrameHeaderBytes;
    }
    slot.state = SlotState::kFull;
    st.inPayload = false;
    st.nextSeq += nsockets;
    if (drained) return Status::ok();
  }
}

WaitHandle TcpRecvConnection::waitHandle(bool forSend) {
  WaitHandle h;
  if (!adoptSockets()) return h;
  h.fd = streams_[peekSeq_ % streams_.size()].fd;
  h.fdEvents = POLLIN;
  return h;
}

}  // namespace braid::transport::tcp

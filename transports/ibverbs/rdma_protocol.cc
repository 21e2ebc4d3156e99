#include "transports/ibverbs/rdma_protocol.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace braid::transport::ibverbs {
namespace {

constexpr uint32_t kBlobMagic = 0x56424942;   // "BIBV"
constexpr uint32_t kHelloMagic = 0x48424942;  // "BIBH"
// 2: blobs carry a challenge and hellos a proof of the job's key.
constexpr uint32_t kWireVersion = 2;
// Completions taken per poll call; a batch keeps the per-call cost of the device low.
constexpr int kPollBatch = 16;

std::string rankName(int peer) { return "rank " + std::to_string(peer); }

// Appends fixed-size fields in host byte order: every rank of a job runs the same build on
// the same architecture, as with every other braid transport's blob.
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out_.append(p, sizeof(T));
  }
  void put(const QpAddress& a) {
    put(a.qpn);
    put(a.psn);
    put(a.lid);
    put(a.port);
    put(a.mtu);
    put(static_cast<uint8_t>(a.global ? 1 : 0));
    out_.append(reinterpret_cast<const char*>(a.gid), sizeof(a.gid));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what Writer wrote; every read is bounds-checked, and a failed one sticks.
class Reader {
 public:
  Reader(const void* data, size_t bytes) : p_(static_cast<const uint8_t*>(data)), left_(bytes) {}
  template <typename T>
  void get(T* v) {
    if (!ok_ || left_ < sizeof(T)) {
      ok_ = false;
      return;
    }
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    left_ -= sizeof(T);
  }
  void get(QpAddress* a) {
    uint8_t global = 0;
    get(&a->qpn);
    get(&a->psn);
    get(&a->lid);
    get(&a->port);
    get(&a->mtu);
    get(&global);
    a->global = global != 0;
    if (!ok_ || left_ < sizeof(a->gid)) {
      ok_ = false;
      return;
    }
    std::memcpy(a->gid, p_, sizeof(a->gid));
    p_ += sizeof(a->gid);
    left_ -= sizeof(a->gid);
  }
  bool ok() const { return ok_; }

 private:
  const uint8_t* p_;
  size_t left_;
  bool ok_ = true;
};

// The encoded size of a RecvBlob: fixed, so a truncated blob is caught before any field.
size_t recvBlobBytes() {
  static const size_t n = encodeRecvBlob(RecvBlob{}).size();
  return n;
}

// ibv_mtu runs from IBV_MTU_256 = 1 to IBV_MTU_4096 = 5.
bool validMtu(uint8_t mtu) { return mtu >= 1 && mtu <= 5; }

const char* opName(Completion::Op op) {
  switch (op) {
    case Completion::Op::kWrite: return "RDMA write to";
    case Completion::Op::kCredit: return "credit update to";
    case Completion::Op::kArrival: return "receive from";
  }
  return "operation with";
}

// Polls `q` until it is empty, handing every completion to `take`. The first failure (an
// async event on the queue, a failed poll, what `take` returns) sticks in `*failure`: the
// connection is dead from then on and reports the same error every time.
template <typename Take>
Status drainCompletions(RdmaQueue* q, int peer, Status* failure, Take&& take) {
  BRAID_RETURN_IF_ERROR(*failure);
  if (const char* why = q->asyncFailure()) {
    *failure = asyncEventFailure(peer, why);
    return *failure;
  }
  Completion batch[kPollBatch];
  for (;;) {
    StatusOr<int> n = q->poll(batch, kPollBatch);
    if (!n.isOk()) {
      *failure = n.status();
      return *failure;
    }
    for (int i = 0; i < n.value(); ++i) {
      Status st = take(batch[i]);
      if (!st.isOk()) {
        *failure = st;
        return *failure;
      }
    }
    if (n.value() < kPollBatch) return Status::ok();
  }
}

}  // namespace

size_t slotStride(size_t slotBytes) { return (kSlotHeaderBytes + slotBytes + 63) / 64 * 64; }

uint32_t encodeDataImm(uint64_t seq, size_t bytes) {
  const uint32_t len = bytes < kLongLength ? static_cast<uint32_t>(bytes) : kLongLength;
  return static_cast<uint32_t>(seq & 0xFF) << 24 | len;
}

DataImm decodeDataImm(uint32_t imm) {
  DataImm d;
  d.seq8 = imm >> 24;
  const uint32_t len = imm & 0xFFFFFF;
  d.longForm = len == kLongLength;
  d.length = d.longForm ? 0 : len;
  return d;
}

uint64_t widenCounter(uint64_t prev, uint32_t low32) {
  return prev + static_cast<uint32_t>(low32 - static_cast<uint32_t>(prev));
}

Status completionFailure(int peer, Completion::Op op, int status, const char* text) {
  return Status(Code::kRemoteError,
                std::string("ibverbs: ") + opName(op) + " " + rankName(peer) + " failed: " + (text ? text : "?") +
                    " (completion status " + std::to_string(status) + ")",
                peer);
}

Status asyncEventFailure(int peer, const char* what) {
  return Status(Code::kRemoteError, "ibverbs: connection with " + rankName(peer) + " failed: " + what, peer);
}

Status protocolViolation(int peer, const std::string& what) {
  return Status(Code::kRemoteError, "ibverbs: protocol error on the connection with " + rankName(peer) + ": " + what,
                peer);
}

// ---------------------------------------------------------------------------------------
// Sender

SendProtocol::SendProtocol(RdmaQueue* q, int peer, int nslots, size_t slotBytes)
    : q_(q), peer_(peer), nslots_(static_cast<uint64_t>(nslots)), slotBytes_(slotBytes), stride_(slotStride(slotBytes)) {}

bool SendProtocol::canReserve() const {
  // Credits bound what the receiver holds; local completions bound staging reuse. The
  // second is implied by the first on a correct peer (its release follows our write's
  // arrival), but checking it costs nothing and keeps the staging slot safe regardless.
  return ready_ && posted_ - released_ < nslots_ && posted_ - completed_ < nslots_;
}

Status SendProtocol::reserve(Slot* s) {
  BRAID_RETURN_IF_ERROR(failure_);
  if (!canReserve()) {
    BRAID_RETURN_IF_ERROR(progress());
    if (!canReserve()) return Status(Code::kWouldBlock, "");
  }
  s->data = q_->slab() + (posted_ % nslots_) * stride_ + kSlotHeaderBytes;
  s->bytes = 0;
  return Status::ok();
}

Status SendProtocol::post(const Slot& s, size_t bytes) { return postHeader(s, bytes, false); }

Status SendProtocol::postFrom(const Slot& s, const void* src, size_t bytes, uint32_t lkey) {
  if (!src || !bytes) return postHeader(s, bytes, false);
  return postHeader(s, bytes, false, src, lkey);
}

size_t SendProtocol::areaOffset(const Slot& s) const {
  const auto at = static_cast<size_t>(static_cast<const uint8_t*>(s.data) - q_->slab());
  return (at - kSlotHeaderBytes) / stride_ * slotBytes_;
}

Status SendProtocol::postDevice(const Slot& s, size_t bytes) {
  if (!device_) return internalError("ibverbs: a device message to " + rankName(peer_) + " without device areas");
  return postHeader(s, bytes, true);
}

// A message: the slot's header and payload in one write with immediate (the payload from
// the caller's memory for a zero-copy one), or, for a device message, the payload from this
// end's area to the receiver's and then the header alone.
Status SendProtocol::postHeader(const Slot& s, size_t bytes, bool device, const void* user, uint32_t lkey) {
  BRAID_RETURN_IF_ERROR(failure_);
  if (!canReserve()) return internalError("ibverbs: postSend to " + rankName(peer_) + " without a reserved slot");
  const size_t idx = posted_ % nslots_;
  uint8_t* slot = q_->slab() + idx * stride_;
  if (s.data != slot + kSlotHeaderBytes) {
    return invalidArgument("ibverbs: postSend to " + rankName(peer_) + " with a slot reserveSend did not hand out");
  }
  if (bytes > slotBytes_) {
    return invalidArgument("ibverbs: postSend of " + std::to_string(bytes) + " bytes to " + rankName(peer_) +
                           " exceeds the slot's " + std::to_string(slotBytes_));
  }
  const uint32_t length = static_cast<uint32_t>(bytes) | (device ? kDeviceBit : 0);
  const SlotHeader h{s.tag, length, static_cast<uint32_t>(posted_)};
  std::memcpy(slot, &h, sizeof(h));
  Status st = device && bytes ? q_->postAreaWrite(idx * slotBytes_, bytes) : Status::ok();
  if (st.isOk() && user)
    st = q_->postWriteFrom(idx * stride_, kSlotHeaderBytes, user, bytes, lkey, encodeDataImm(posted_, bytes));
  else if (st.isOk())
    st = q_->postWrite(idx * stride_, kSlotHeaderBytes + (device ? 0 : bytes), encodeDataImm(posted_, bytes));
  if (!st.isOk()) {
    failure_ = st;
    return st;
  }
  ++posted_;
  return Status::ok();
}

Status SendProtocol::take(const Completion& c) {
  if (!c.ok) return completionFailure(peer_, c.op, c.status, c.error);
  switch (c.op) {
    case Completion::Op::kWrite:
      if (completed_ == posted_) return internalError("ibverbs: a write to " + rankName(peer_) + " completed twice");
      ++completed_;
      return Status::ok();
    case Completion::Op::kCredit:
      return internalError("ibverbs: a credit completion on the send side of " + rankName(peer_));
    case Completion::Op::kArrival: {
      // The immediate is this message's counter; the word may already hold a later one
      // (the NIC places data before it reports the completion, and a later write may
      // have landed too). Either way credits never exceed what was posted.
      creditImm_ = widenCounter(creditImm_, c.imm);
      const uint64_t word = q_->creditWord();
      const uint64_t newest = std::max({released_, creditImm_, word});
      if (newest > posted_) {
        return protocolViolation(peer_, "it released " + std::to_string(newest) + " slots but only " +
                                            std::to_string(posted_) + " were sent");
      }
      released_ = newest;
      ready_ = true;
      return Status::ok();
    }
  }
  return Status::ok();
}

Status SendProtocol::progress() {
  return drainCompletions(q_, peer_, &failure_, [this](const Completion& c) { return take(c); });
}

// ---------------------------------------------------------------------------------------
// Receiver

RecvProtocol::RecvProtocol(RdmaQueue* q, int peer, int nslots, size_t slotBytes)
    : q_(q),
      peer_(peer),
      nslots_(static_cast<uint64_t>(nslots)),
      slotBytes_(slotBytes),
      stride_(slotStride(slotBytes)),
      lengths_(static_cast<size_t>(nslots), 0),
      inArea_(static_cast<size_t>(nslots), 0) {}

Status RecvProtocol::sendCredit() {
  Status st = q_->postCredit(consumed_, encodeCreditImm(consumed_));
  if (!st.isOk()) {
    failure_ = st;
    return st;
  }
  credited_ = consumed_;
  ++creditsInFlight_;
  return Status::ok();
}

Status RecvProtocol::start() {
  BRAID_RETURN_IF_ERROR(failure_);
  if (started_) return Status::ok();
  started_ = true;
  return sendCredit();
}

Status RecvProtocol::peek(Slot* s) {
  BRAID_RETURN_IF_ERROR(failure_);
  if (!canPeek()) {
    BRAID_RETURN_IF_ERROR(progress());
    if (!canPeek()) return Status(Code::kWouldBlock, "");
  }
  const size_t idx = consumed_ % nslots_;
  const uint8_t* slot = q_->slab() + idx * stride_;
  SlotHeader h;
  std::memcpy(&h, slot, sizeof(h));
  s->data = const_cast<uint8_t*>(slot) + kSlotHeaderBytes;
  s->bytes = lengths_[idx];
  s->tag = h.tag;
  s->device = inArea_[idx] != 0;
  return Status::ok();
}

size_t RecvProtocol::areaOffset(const Slot& s) const {
  const auto at = static_cast<size_t>(static_cast<const uint8_t*>(s.data) - q_->slab());
  return (at - kSlotHeaderBytes) / stride_ * slotBytes_;
}

Status RecvProtocol::release(const Slot& s) {
  BRAID_RETURN_IF_ERROR(failure_);
  if (!canPeek()) return internalError("ibverbs: releaseRecv from " + rankName(peer_) + " with no slot held");
  if (s.data != q_->slab() + (consumed_ % nslots_) * stride_ + kSlotHeaderBytes) {
    return invalidArgument("ibverbs: releaseRecv from " + rankName(peer_) + " of a slot that is not the oldest");
  }
  ++consumed_;
  // Completions of earlier credit writes free room; a receiver that always finds data
  // waiting would otherwise never poll, and its sender would starve.
  if (creditsInFlight_ >= kMaxCreditsInFlight) BRAID_RETURN_IF_ERROR(progress());
  if (creditsInFlight_ < kMaxCreditsInFlight && credited_ < consumed_) return sendCredit();
  return Status::ok();
}

Status RecvProtocol::arrival(const Completion& c) {
  const uint64_t k = arrived_;
  if (k - consumed_ >= nslots_) {
    return protocolViolation(peer_, "it wrote slot " + std::to_string(k) + " while all " + std::to_string(nslots_) +
                                        " slots were still held (no credit for it)");
  }
  const DataImm d = decodeDataImm(c.imm);
  if (d.seq8 != (k & 0xFF)) {
    return protocolViolation(peer_, "slot " + std::to_string(k) + " arrived out of order (its immediate says " +
                                        std::to_string(d.seq8) + " mod 256)");
  }
  const size_t idx = k % nslots_;
  SlotHeader h;
  std::memcpy(&h, q_->slab() + idx * stride_, sizeof(h));
  if (h.seq != static_cast<uint32_t>(k)) {
    return protocolViolation(peer_, "slot " + std::to_string(k) + " carries sequence number " + std::to_string(h.seq));
  }
  const bool device = (h.bytes & kDeviceBit) != 0;
  const uint32_t bytes = h.bytes & ~kDeviceBit;
  if (device && !device_) {
    return protocolViolation(peer_, "slot " + std::to_string(k) +
                                        " says its payload is in the device area, which this side has not set up");
  }
  if (bytes > slotBytes_) {
    return protocolViolation(peer_, "slot " + std::to_string(k) + " claims " + std::to_string(bytes) +
                                        " bytes, more than a slot's " + std::to_string(slotBytes_) +
                                        "; is BRAID_SLOT_BYTES the same on every rank?");
  }
  if (d.longForm ? bytes < kLongLength : bytes != d.length) {
    return protocolViolation(peer_, "slot " + std::to_string(k) + ": its header says " + std::to_string(bytes) +
                                        " bytes, its immediate " +
                                        (d.longForm ? std::string("16 MiB or more") : std::to_string(d.length)));
  }
  const size_t written = kSlotHeaderBytes + (device ? 0 : bytes);
  if (c.byteLen != written) {
    return protocolViolation(peer_, "slot " + std::to_string(k) + " was written with " + std::to_string(c.byteLen) +
                                        " bytes for " + (device ? "the header of a device message of " : "a payload of ") +
                                        std::to_string(bytes));
  }
  inArea_[idx] = device ? 1 : 0;
  lengths_[idx] = bytes;
  ++arrived_;
  return Status::ok();
}

Status RecvProtocol::take(const Completion& c) {
  if (!c.ok) return completionFailure(peer_, c.op, c.status, c.error);
  switch (c.op) {
    case Completion::Op::kCredit:
      if (creditsInFlight_ == 0) return internalError("ibverbs: a credit write to " + rankName(peer_) + " completed twice");
      --creditsInFlight_;
      return Status::ok();
    case Completion::Op::kWrite:
      return internalError("ibverbs: a data write completion on the receive side of " + rankName(peer_));
    case Completion::Op::kArrival:
      return arrival(c);
  }
  return Status::ok();
}

Status RecvProtocol::progress() {
  BRAID_RETURN_IF_ERROR(drainCompletions(q_, peer_, &failure_, [this](const Completion& c) { return take(c); }));
  // Releases that waited for room go out now, folded into one update.
  if (started_ && creditsInFlight_ < kMaxCreditsInFlight && credited_ < consumed_) return sendCredit();
  return Status::ok();
}

// ---------------------------------------------------------------------------------------
// Blobs

std::string encodeAreaName(const AreaName& a) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "ibarea:%llx:%x:%llx", static_cast<unsigned long long>(a.addr), a.rkey,
                static_cast<unsigned long long>(a.bytes));
  return buf;
}

StatusOr<AreaName> decodeAreaName(const std::string& name, int peer, uint64_t bytes) {
  auto malformed = [&](const std::string& why) {
    return invalidArgument("ibverbs: malformed device area name from " + rankName(peer) + " (" + name + "): " + why);
  };
  if (name.compare(0, 7, "ibarea:") != 0) return malformed("not an area name");
  AreaName a;
  uint64_t fields[3] = {};
  size_t at = 7;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? name.find(':', at) : name.size();
    if (end == std::string::npos || end == at || end - at > 16) return malformed("expected three hexadecimal fields");
    for (size_t j = at; j < end; ++j) {
      const char c = name[j];
      const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) return malformed("expected three hexadecimal fields");
      fields[i] = fields[i] << 4 | static_cast<uint64_t>(v);
    }
    at = end + 1;
  }
  if (fields[1] > UINT32_MAX) return malformed("the key does not fit 32 bits");
  a.addr = fields[0];
  a.rkey = static_cast<uint32_t>(fields[1]);
  a.bytes = fields[2];
  if (a.bytes != bytes) {
    return malformed(std::to_string(a.bytes) + " bytes where this side's slots take " + std::to_string(bytes) +
                     "; is BRAID_SLOT_BYTES the same on every rank?");
  }
  return a;
}

std::string encodeRecvBlob(const RecvBlob& b) {
  Writer w;
  w.put(kBlobMagic);
  w.put(kWireVersion);
  w.put(b.nonce);
  w.put(b.rank);
  w.put(b.channel);
  w.put(b.nslots);
  w.put(b.slotBytes);
  w.put(b.slabAddr);
  w.put(b.slabRkey);
  w.put(b.data);
  w.put(b.hello);
  w.put(b.helloQkey);
  w.put(b.challenge);
  return w.take();
}

StatusOr<RecvBlob> decodeRecvBlob(const std::string& blob, int peer, int channel, uint64_t nonce, int nslots,
                                  size_t slotBytes) {
  auto malformed = [&](const std::string& why) {
    return invalidArgument("ibverbs: malformed address from " + rankName(peer) + " for channel " +
                           std::to_string(channel) + ": " + why);
  };
  if (blob.size() != recvBlobBytes()) {
    return malformed(std::to_string(blob.size()) + " bytes, expected " + std::to_string(recvBlobBytes()) +
                     (blob.size() < recvBlobBytes() ? " (truncated)" : ""));
  }
  Reader r(blob.data(), blob.size());
  uint32_t magic = 0, version = 0;
  RecvBlob b;
  r.get(&magic);
  r.get(&version);
  r.get(&b.nonce);
  r.get(&b.rank);
  r.get(&b.channel);
  r.get(&b.nslots);
  r.get(&b.slotBytes);
  r.get(&b.slabAddr);
  r.get(&b.slabRkey);
  r.get(&b.data);
  r.get(&b.hello);
  r.get(&b.helloQkey);
  r.get(&b.challenge);
  if (!r.ok()) return malformed("truncated");
  if (magic != kBlobMagic) return malformed("not an ibverbs address");
  if (version != kWireVersion) return malformed("wire version " + std::to_string(version) + ", this build speaks " +
                                                std::to_string(kWireVersion));
  if (b.rank != peer || b.channel != channel) {
    return malformed("it is rank " + std::to_string(b.rank) + "'s, channel " + std::to_string(b.channel));
  }
  if (b.nonce != nonce) return invalidArgument("ibverbs: " + rankName(peer) + " belongs to another job (nonce differs)");
  if (b.nslots != static_cast<uint32_t>(nslots) || b.slotBytes != slotBytes) {
    return malformed(std::to_string(b.nslots) + " slots of " + std::to_string(b.slotBytes) + " bytes, this rank uses " +
                     std::to_string(nslots) + " of " + std::to_string(slotBytes) +
                     "; are BRAID_NSLOTS and BRAID_SLOT_BYTES the same on every rank?");
  }
  if (!validMtu(b.data.mtu) || !validMtu(b.hello.mtu)) return malformed("MTU code " + std::to_string(b.data.mtu));
  if (b.data.qpn == 0 || b.data.qpn > 0xFFFFFF || b.hello.qpn == 0 || b.hello.qpn > 0xFFFFFF) {
    return malformed("queue pair number out of range");
  }
  if (b.slabAddr == 0) return malformed("no slot memory");
  return b;
}

namespace {

std::string helloFields(const SenderHello& h) {
  Writer w;
  w.put(kHelloMagic);
  w.put(kWireVersion);
  w.put(h.nonce);
  w.put(h.rank);
  w.put(h.channel);
  w.put(h.recvQpn);
  w.put(h.data);
  w.put(h.creditAddr);
  w.put(h.creditRkey);
  return w.take();
}

}  // namespace

std::string encodeHello(const SenderHello& h) {
  std::string s = helloFields(h);
  s.append(reinterpret_cast<const char*>(h.proof.data()), h.proof.size());
  s.resize(kHelloBytes, '\0');
  return s;
}

Digest helloProof(const AuthKey& key, const SenderHello& h, int receiver, const std::array<uint8_t, 16>& challenge) {
  const int32_t r = receiver;
  return authProof(key, "braid ibverbs hello",
                   {helloFields(h), std::string_view(reinterpret_cast<const char*>(&r), sizeof(r)),
                    std::string_view(reinterpret_cast<const char*>(challenge.data()), challenge.size())});
}

std::string checkHelloProof(const AuthKey& key, const SenderHello& h, int receiver,
                            const std::array<uint8_t, 16>& challenge) {
  if (!key.present) return "";
  const std::string_view proof(reinterpret_cast<const char*>(h.proof.data()), h.proof.size());
  return authRefusal(helloProof(key, h, receiver, challenge), proof, "its hello");
}

StatusOr<SenderHello> decodeHello(const void* data, size_t bytes, uint64_t nonce) {
  if (bytes < kHelloBytes) return invalidArgument("ibverbs: short hello (" + std::to_string(bytes) + " bytes)");
  Reader r(data, bytes);
  uint32_t magic = 0, version = 0;
  SenderHello h;
  r.get(&magic);
  r.get(&version);
  r.get(&h.nonce);
  r.get(&h.rank);
  r.get(&h.channel);
  r.get(&h.recvQpn);
  r.get(&h.data);
  r.get(&h.creditAddr);
  r.get(&h.creditRkey);
  r.get(&h.proof);
  if (!r.ok() || magic != kHelloMagic) return invalidArgument("ibverbs: a datagram that is not a hello");
  if (version != kWireVersion) return invalidArgument("ibverbs: hello of wire version " + std::to_string(version));
  if (h.nonce != nonce) {
    return invalidArgument("ibverbs: hello from rank " + std::to_string(h.rank) + " of another job (nonce differs)");
  }
  if (!validMtu(h.data.mtu) || h.data.qpn == 0 || h.data.qpn > 0xFFFFFF || h.creditAddr == 0) {
    return invalidArgument("ibverbs: malformed hello from rank " + std::to_string(h.rank));
  }
  return h;
}

}  // namespace braid::transport::ibverbs

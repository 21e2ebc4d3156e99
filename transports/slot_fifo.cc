#include "transports/slot_fifo.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <string>

#include "common/copy.h"
#include "common/log.h"

namespace braid::transport {

namespace {
constexpr uint64_t kFifoMagic = 0x4f46494644494152ull;  // "RAIDFIFO"
constexpr size_t kLine = 64;
}  // namespace

// Sender-written and receiver-written words sit on separate cache lines so that neither
// side's polling steals the other's line.
struct SlotFifo::Header {
  uint64_t magic;
  uint64_t nonce;
  uint32_t nslots;
  uint32_t pad0;
  uint64_t slotBytes;
  alignas(kLine) std::atomic<uint32_t> tail;         // slots posted (sender writes)
  alignas(kLine) std::atomic<uint32_t> recvWaiting;  // receiver asleep on `tail`
  alignas(kLine) std::atomic<uint32_t> head;         // slots released (receiver writes)
  alignas(kLine) std::atomic<uint32_t> sendWaiting;  // sender asleep on `head`
  // References (FifoConnection::enableRefs): the sender's offer, then the receiver's answer.
  alignas(kLine) std::atomic<uint32_t> refsOffered;  // sender: 1 once the three below are set
  int32_t refsPid;                                   // the sender's pid, as it sees it
  uint64_t refsWord;                                 // address of a word of its memory
  uint64_t refsValue;                                // what that word holds
  alignas(kLine) std::atomic<uint32_t> refsAnswer;   // receiver: 0 none yet, 1 reads, 2 cannot
};

// One cache line per slot, written only by the sender: the receiver learns that the slot is
// full, its length and tag, and (for a payload of up to kInlineBytes) the payload itself
// from this one line, so a small message costs the receiver one cache miss, not three
// (index, metadata, data).
struct alignas(kLine) SlotFifo::SlotMeta {
  uint64_t bytes;
  uint64_t tag;
  std::atomic<uint32_t> seq;  // index + 1 of the message the slot holds (release-stored last)
  uint32_t flags;             // kInDeviceArea: the payload is in the device area, none inline
  char inl[kLine - 24];
};
static_assert(sizeof(SlotFifo::SlotMeta) == kLine, "a slot's metadata is one cache line");
constexpr size_t kInlineBytes = sizeof(SlotFifo::SlotMeta::inl);
constexpr uint32_t kInDeviceArea = 1;
constexpr uint32_t kInSenderMemory = 2;  // a reference: inl holds the address (u64)

static size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Far above any slot braid uses (BRAID_SLOT_BYTES), far below what could overflow
// nslots x slotBytes.
constexpr uint64_t kMaxSlotBytes = uint64_t{1} << 40;

static size_t dataOffset(int nslots) {
  return alignUp(sizeof(SlotFifo::Header) + nslots * sizeof(SlotFifo::SlotMeta), 4096);
}

size_t SlotFifo::regionBytes(int nslots, size_t slotBytes) {
  return dataOffset(nslots) + static_cast<size_t>(nslots) * alignUp(slotBytes, kLine);
}

void SlotFifo::format(void* region, int nslots, size_t slotBytes, uint64_t nonce) {
  auto* h = new (region) Header();
  h->nonce = nonce;
  h->nslots = static_cast<uint32_t>(nslots);
  h->slotBytes = alignUp(slotBytes, kLine);
  h->tail.store(0);
  h->head.store(0);
  h->recvWaiting.store(0);
  h->sendWaiting.store(0);
  h->refsOffered.store(0);
  h->refsAnswer.store(0);
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kFifoMagic;
}

const char* SlotFifo::check(const void* region, size_t bytes, uint64_t nonce) {
  if (bytes < sizeof(Header)) return "region smaller than a FIFO header";
  const auto* h = static_cast<const Header*>(region);
  if (h->magic != kFifoMagic) return "not a braid FIFO (bad magic)";
  if (h->nonce != nonce) return "FIFO belongs to another job (nonce mismatch)";
  if (h->nslots == 0 || h->nslots > 4096) return "FIFO slot count out of range";
  // Bounded before regionBytes() multiplies it: a huge slot size would wrap the product
  // around to something small that fits.
  if (h->slotBytes == 0 || h->slotBytes > kMaxSlotBytes) return "FIFO slot size out of range";
  if (regionBytes(static_cast<int>(h->nslots), h->slotBytes) > bytes) return "FIFO larger than its region";
  return nullptr;
}

SlotFifo::SlotFifo(void* region)
    : hdr_(static_cast<Header*>(region)),
      meta_(reinterpret_cast<SlotMeta*>(static_cast<char*>(region) + sizeof(Header))),
      data_(static_cast<char*>(region) + dataOffset(static_cast<int>(hdr_->nslots))),
      nslots_(hdr_->nslots),
      slotBytes_(hdr_->slotBytes) {
  sendIdx_ = hdr_->tail.load(std::memory_order_acquire);
  recvIdx_ = hdr_->head.load(std::memory_order_acquire);
  headSeen_ = recvIdx_;
  sendSlot_ = sendIdx_ % nslots_;
  recvSlot_ = recvIdx_ % nslots_;
}

// The slot after `slot`, without the division a modulo of the free-running index costs on
// every message. Both sides start from the same index and step once per message, so they
// agree on every slot (also where the 32-bit index wraps).
static inline uint32_t nextSlot(uint32_t slot, uint32_t nslots) { return slot + 1 == nslots ? 0 : slot + 1; }

Status SlotFifo::reserveSend(Slot* s) {
  // The receiver's `head` line is read only when the last value seen says the FIFO is full:
  // while slots are free, sending touches no line the receiver writes.
  if (sendIdx_ - headSeen_ >= nslots_) {
    headSeen_ = hdr_->head.load(std::memory_order_acquire);
    if (sendIdx_ - headSeen_ >= nslots_) return Status(Code::kWouldBlock);
  }
  s->data = data_ + static_cast<size_t>(sendSlot_) * slotBytes_;
  s->bytes = slotBytes_;
  return Status::ok();
}

Status SlotFifo::postSend(const Slot& s, size_t bytes, bool device) {
  SlotMeta& m = meta_[sendSlot_];
  m.bytes = bytes;
  m.tag = s.tag;
  m.flags = device ? kInDeviceArea : 0;
  if (bytes <= kInlineBytes && !device) std::memcpy(m.inl, s.data, bytes);
  publish(m);
  return Status::ok();
}

// The slot's metadata is written: its sequence number goes last, then the FIFO's tail.
inline void SlotFifo::publish(SlotMeta& m) {
  m.seq.store(sendIdx_ + 1, std::memory_order_release);
  ++sendIdx_;
  sendSlot_ = nextSlot(sendSlot_, nslots_);
  // seq_cst store + load: pairs with armRecv's flag store + index load (Dekker), so a
  // receiver about to sleep either sees the new index or gets woken.
  hdr_->tail.store(sendIdx_, std::memory_order_seq_cst);
  if (hdr_->recvWaiting.load(std::memory_order_seq_cst)) futexWakeAll(&hdr_->tail);
}

WaitHandle SlotFifo::armSend() {
  hdr_->sendWaiting.store(1, std::memory_order_seq_cst);
  WaitHandle w;
  w.futexWord = reinterpret_cast<const uint32_t*>(&hdr_->head);
  w.futexValue = hdr_->head.load(std::memory_order_seq_cst);
  return w;
}

void SlotFifo::disarmSend() { hdr_->sendWaiting.store(0, std::memory_order_relaxed); }

Status SlotFifo::peekRecv(Slot* s) {
  SlotMeta& m = meta_[recvSlot_];
  if (m.seq.load(std::memory_order_acquire) != recvIdx_ + 1) return Status(Code::kWouldBlock);
  s->device = (m.flags & kInDeviceArea) != 0;
  const bool inSlot = s->device || (m.flags & kInSenderMemory) || m.bytes > kInlineBytes;
  s->data = inSlot ? data_ + static_cast<size_t>(recvSlot_) * slotBytes_ : m.inl;
  s->bytes = m.bytes;
  s->tag = m.tag;
  return Status::ok();
}

Status SlotFifo::releaseRecv(const Slot&) {
  ++recvIdx_;
  recvSlot_ = nextSlot(recvSlot_, nslots_);
  hdr_->head.store(recvIdx_, std::memory_order_seq_cst);
  if (hdr_->sendWaiting.load(std::memory_order_seq_cst)) futexWakeAll(&hdr_->head);
  return Status::ok();
}

void SlotFifo::offerRefs(int32_t pid, const uint64_t* word) {
  hdr_->refsPid = pid;
  hdr_->refsWord = reinterpret_cast<uint64_t>(word);
  hdr_->refsValue = *word;
  hdr_->refsOffered.store(1, std::memory_order_release);
}

bool SlotFifo::refsOffered(int32_t* pid, uint64_t* word, uint64_t* value) const {
  if (hdr_->refsOffered.load(std::memory_order_acquire) != 1) return false;
  *pid = hdr_->refsPid;
  *word = hdr_->refsWord;
  *value = hdr_->refsValue;
  return true;
}

void SlotFifo::answerRefs(bool ok) { hdr_->refsAnswer.store(ok ? 1 : 2, std::memory_order_release); }

bool SlotFifo::refsAccepted() const { return hdr_->refsAnswer.load(std::memory_order_acquire) == 1; }

Status SlotFifo::postRef(const Slot& s, const void* src, size_t bytes) {
  SlotMeta& m = meta_[sendSlot_];
  m.bytes = bytes;
  m.tag = s.tag;
  m.flags = kInSenderMemory;
  const uint64_t addr = reinterpret_cast<uint64_t>(src);
  std::memcpy(m.inl, &addr, sizeof(addr));
  publish(m);
  return Status::ok();
}

bool SlotFifo::headIsRef(uint64_t* addr) const {
  const SlotMeta& m = meta_[recvSlot_];
  if (!(m.flags & kInSenderMemory)) return false;
  std::memcpy(addr, m.inl, sizeof(*addr));
  return true;
}

uint32_t SlotFifo::released() const { return hdr_->head.load(std::memory_order_acquire); }

WaitHandle SlotFifo::armRecv() {
  hdr_->recvWaiting.store(1, std::memory_order_seq_cst);
  WaitHandle w;
  w.futexWord = reinterpret_cast<const uint32_t*>(&hdr_->tail);
  w.futexValue = hdr_->tail.load(std::memory_order_seq_cst);
  return w;
}

void SlotFifo::disarmRecv() { hdr_->recvWaiting.store(0, std::memory_order_relaxed); }

void futexWakeAll(const void* word) {
  // Not FUTEX_PRIVATE_FLAG: the word may be shared between processes.
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void futexWait(const void* word, uint32_t value, int64_t timeoutMicros) {
  struct timespec ts;
  ts.tv_sec = timeoutMicros / 1000000;
  ts.tv_nsec = (timeoutMicros % 1000000) * 1000;
  syscall(SYS_futex, word, FUTEX_WAIT, value, &ts, nullptr, 0);
}

FifoConnection::FifoConnection(void* region, int peer, bool sender, void (*release)(void*),
                               void* owner)
    : region_(region), fifo_(region), peer_(peer), sender_(sender), release_(release), owner_(owner) {}

void FifoConnection::enableRefs() {
  refs_ = true;
  if (!sender_) return;
  std::random_device rd;
  cookie_ = (uint64_t{rd()} << 32) | rd();
  fifo_.offerRefs(static_cast<int32_t>(getpid()), &cookie_);
}

Status FifoConnection::postSendFrom(const Slot& s, const void* src, size_t bytes) {
  if (!refs_ || bytes < kRefMinBytes || !fifo_.refsAccepted()) {
    copyBytes(s.data, src, bytes);
    return fifo_.postSend(s, bytes);
  }
  BRAID_RETURN_IF_ERROR(fifo_.postRef(s, src, bytes));
  refsPosted_ = true;
  refsUntil_ = fifo_.posted();
  return Status::ok();
}

bool FifoConnection::flushed() const {
  // The receiver has released the last reference: it read every one.
  return !refsPosted_ || static_cast<int32_t>(fifo_.released() - refsUntil_) >= 0;
}

// One process_vm_readv for the payload and the sender's word together: the word proves
// that the process read is still the sender (a pid is reused after its process ends).
Status FifoConnection::readRef(void* to, uint64_t addr, size_t bytes) {
  uint64_t word = 0;
  struct iovec local[2] = {{to, bytes}, {&word, sizeof(word)}};
  struct iovec remote[2] = {{reinterpret_cast<void*>(addr), bytes},
                            {reinterpret_cast<void*>(refsWord_), sizeof(word)}};
  const ssize_t n = process_vm_readv(refsPid_, local, 2, remote, 2, 0);
  const int err = errno;
  if (n < 0) {
    return Status(Code::kRemoteError,
                  "shm: reading a message of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer_) +
                      "'s memory failed: " + std::strerror(err) + (err == ESRCH ? " (it has ended)" : ""),
                  peer_);
  }
  if (static_cast<size_t>(n) != bytes + sizeof(word) || word != refsValue_) {
    return Status(Code::kRemoteError,
                  "shm: rank " + std::to_string(peer_) + " has ended: its pid now names another process, or " +
                      "the message it sent from its memory is no longer there",
                  peer_);
  }
  return Status::ok();
}

Status FifoConnection::peekRecvInto(Slot* s, void* dst, size_t bytes) {
  if (refs_ && !answered_) {
    // Answer the sender's offer once it is there: can this process read its memory?
    int32_t pid = 0;
    uint64_t word = 0, value = 0;
    if (fifo_.refsOffered(&pid, &word, &value)) {
      uint64_t got = 0;
      struct iovec local = {&got, sizeof(got)};
      struct iovec remote = {reinterpret_cast<void*>(word), sizeof(got)};
      const ssize_t n = pid > 0 ? process_vm_readv(pid, &local, 1, &remote, 1, 0) : -1;
      const int err = n < 0 ? errno : 0;
      const bool ok = n == sizeof(got) && got == value;
      static std::atomic<bool> logged{false};  // once per process: every connection answers alike
      if (!logged.exchange(true)) {
        if (ok) {
          BRAID_INFO("shm: messages of %zu bytes and more from rank %d are read from its memory (process_vm_readv)",
                     kRefMinBytes, peer_);
        } else {
          BRAID_INFO("shm: rank %d's memory cannot be read (%s): messages go through the slots",
                     peer_, err ? std::strerror(err) : "its pid names another process");
        }
      }
      if (ok) {
        refsPid_ = pid;
        refsWord_ = word;
        refsValue_ = value;
      }
      fifo_.answerRefs(ok);
      answered_ = true;
    }
  }
  BRAID_RETURN_IF_ERROR(fifo_.peekRecv(s));
  uint64_t addr = 0;
  if (!fifo_.headIsRef(&addr)) return Status::ok();
  if (landedAt_) {
    s->data = landedAt_;
    return Status::ok();
  }
  if (fetched_) return Status::ok();
  if (!refs_ || refsPid_ == 0 || s->bytes > fifo_.slotBytes()) {
    // A reference this side never agreed to read, or larger than a slot: not this protocol.
    return Status(Code::kRemoteError,
                  "shm: rank " + std::to_string(peer_) + " sent a message from its memory that this side cannot read",
                  peer_);
  }
  if (dst && s->bytes <= bytes) {
    BRAID_RETURN_IF_ERROR(readRef(dst, addr, s->bytes));
    landedAt_ = dst;
    s->data = dst;
    return Status::ok();
  }
  BRAID_RETURN_IF_ERROR(readRef(s->data, addr, s->bytes));
  fetched_ = true;
  return Status::ok();
}

Status FifoConnection::releaseRecv(const Slot& s) {
  fetched_ = false;
  landedAt_ = nullptr;
  return fifo_.releaseRecv(s);
}

FifoConnection::~FifoConnection() {
  if (release_) release_(owner_);
}

}  // namespace braid::transport

#pragma once
// A single-producer single-consumer FIFO of fixed-size slots laid out in one memory region,
// shared by the memory transports: `shm` places the region in a shared segment, `loopback`
// on the heap. The region lives with the receiver, so the sender writes (or reduces)
// straight into the receiver's memory. A slot may instead hold a reference to the sender's
// memory, which the receiver reads itself (FifoConnection::enableRefs).
//
// Indices are free-running 32-bit counters (wrap-around is fine: only differences are
// used) and double as futex words, so a waiter sleeps on exactly the word its peer bumps.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transports/transport.h"

namespace braid::transport {

class SlotFifo {
 public:
  // Bytes a region for `nslots` slots of `slotBytes` needs.
  static size_t regionBytes(int nslots, size_t slotBytes);
  // Formats a zeroed region. Only the receiver calls this, before publishing it.
  static void format(void* region, int nslots, size_t slotBytes, uint64_t nonce);
  // Checks a region another process formatted; empty string when it is valid.
  static const char* check(const void* region, size_t regionBytes, uint64_t nonce);

  explicit SlotFifo(void* region);

  size_t slotBytes() const { return slotBytes_; }
  int nslots() const { return static_cast<int>(nslots_); }
  // The slots' payload area: slot i at dataBase() + i x slotBytes().
  char* dataBase() const { return data_; }

  // Sender side; see Connection for the contracts.
  Status reserveSend(Slot* s);
  // `device`: the payload was written to the device area's slot (none of it inline).
  Status postSend(const Slot& s, size_t bytes, bool device = false);
  WaitHandle armSend();
  void disarmSend();

  // Receiver side.
  Status peekRecv(Slot* s);
  Status releaseRecv(const Slot& s);
  WaitHandle armRecv();
  void disarmRecv();

  // References to the sender's memory (cross-memory attach; FifoConnection). The sender
  // offers them once, naming its pid and a word of its memory holding a random value; the
  // receiver reads that word from that pid and answers whether it could (the value then
  // proves the pid is the sender's, also across pid namespaces). Only then does the sender
  // post references: a slot that names bytes in its memory instead of holding them.
  void offerRefs(int32_t pid, const uint64_t* word);
  // Receiver: the offer, if the sender made one.
  bool refsOffered(int32_t* pid, uint64_t* word, uint64_t* value) const;
  void answerRefs(bool ok);
  // Sender: the receiver answered that it reads references.
  bool refsAccepted() const;
  // Sender: posts a reference to `bytes` at `src` in the reserved slot's place.
  Status postRef(const Slot& s, const void* src, size_t bytes);
  // Receiver: whether the message peekRecv returns is a reference, and where its bytes are.
  bool headIsRef(uint64_t* addr) const;
  // The count of messages posted (sender) and released (the receiver's `head`), as
  // free-running indices.
  uint32_t posted() const { return sendIdx_; }
  uint32_t released() const;

 public:
  struct Header;    // layout private to slot_fifo.cc
  struct SlotMeta;

 private:
  void publish(SlotMeta& m);

  Header* hdr_;
  SlotMeta* meta_;
  char* data_;
  uint32_t nslots_;
  size_t slotBytes_;
  // Local copies of our own index; the shared copy is written only to publish.
  uint32_t sendIdx_ = 0;
  uint32_t recvIdx_ = 0;
  uint32_t headSeen_ = 0;  // sender: the receiver's `head` when last read
  uint32_t sendSlot_ = 0;  // sendIdx_ % nslots_, kept in step
  uint32_t recvSlot_ = 0;  // recvIdx_ % nslots_, kept in step
};

// Wakes every process sleeping on `word` (shared-memory futex).
void futexWakeAll(const void* word);
// Sleeps while *word == value, at most `timeoutMicros`; returns early on a wake or signal.
void futexWait(const void* word, uint32_t value, int64_t timeoutMicros);

// A Connection over a SlotFifo; `owner` keeps the region alive as long as needed.
class FifoConnection : public Connection {
 public:
  FifoConnection(void* region, int peer, bool sender, void (*release)(void*), void* owner);
  ~FifoConnection() override;

  size_t slotBytes() const override { return fifo_.slotBytes(); }
  Status reserveSend(Slot* s) override { return fifo_.reserveSend(s); }
  Status postSend(const Slot& s, size_t bytes) override { return fifo_.postSend(s, bytes); }
  Status peekRecv(Slot* s) override { return peekRecvInto(s, nullptr, 0); }
  Status releaseRecv(const Slot& s) override;
  Status progress() override { return Status::ok(); }
  // Between processes (enableRefs), sends of kRefMinBytes and more go as references to the
  // caller's memory, which the receiver copies with one process_vm_readv, into the step's
  // destination where it asks for that (peekRecvInto) or into the slot: one copy instead of
  // two (into the slot, out of it). The sender is flushed once the receiver has released
  // every reference.
  static constexpr size_t kRefMinBytes = 64 * 1024;
  void enableRefs();
  bool sendsFromUser() const override { return refs_; }
  bool inReceiverMemory() const override { return true; }
  Status postSendFrom(const Slot& s, const void* src, size_t bytes) override;
  Status peekRecvInto(Slot* s, void* dst, size_t bytes) override;
  bool flushed() const override;
  WaitHandle waitHandle(bool forSend) override { return forSend ? fifo_.armSend() : fifo_.armRecv(); }
  void disarm(bool forSend) override { forSend ? fifo_.disarmSend() : fifo_.disarmRecv(); }
  int peer() const override { return peer_; }
  MemoryRange slotMemory() const override {
    return {region_, SlotFifo::regionBytes(fifo_.nslots(), fifo_.slotBytes())};
  }
  size_t deviceAreaBytes() const override { return static_cast<size_t>(fifo_.nslots()) * fifo_.slotBytes(); }
  void setDeviceArea(void* base) override { deviceArea_ = static_cast<char*>(base); }
  void* deviceData(const Slot& s) const override {
    const char* p = static_cast<const char*>(s.data);
    const char* lo = fifo_.dataBase();
    if (!deviceArea_ || p < lo || p >= lo + deviceAreaBytes()) return nullptr;
    return deviceArea_ + (p - lo);
  }
  Status postSendDevice(const Slot& s, size_t bytes) override {
    if (!deviceArea_) return Status(Code::kInternal, "no device slots on this connection");
    return fifo_.postSend(s, bytes, /*device=*/true);
  }

 private:
  Status readRef(void* to, uint64_t addr, size_t bytes);

  char* deviceArea_ = nullptr;
  void* region_;
  SlotFifo fifo_;
  int peer_;
  bool sender_;
  bool refs_ = false;
  // Sender: the word the receiver reads back, and the index after the last reference posted.
  uint64_t cookie_ = 0;
  bool refsPosted_ = false;
  uint32_t refsUntil_ = 0;
  // Receiver: the offer as accepted (refsPid_ 0: not, or not yet), and the head message's
  // bytes once copied: into its slot (fetched_) or to landedAt_.
  int32_t refsPid_ = 0;
  uint64_t refsWord_ = 0;
  uint64_t refsValue_ = 0;
  bool answered_ = false;
  bool fetched_ = false;
  void* landedAt_ = nullptr;
  void (*release_)(void*);
  void* owner_;
};

}  // namespace braid::transport

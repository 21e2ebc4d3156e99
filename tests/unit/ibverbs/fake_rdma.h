#pragma once
// An in-memory stand-in for a pair of connected RC queue pairs, with the semantics the
// verbs transport's protocol relies on: a write lands in the peer's memory before its
// arrival is reported; arrivals come in the order they were posted (RC never reorders);
// every posted write produces exactly one local completion; a failed operation puts the
// queue pair in error, so everything posted after it is flushed. Tests can make local
// completions lag (a NIC slow to get acks back), fail the next operation with a given
// status, raise an async event, and forge traffic as a broken or foreign peer would.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "transports/ibverbs/rdma_protocol.h"

namespace braid::transport::ibverbs::test {

class FakeQueue final : public RdmaQueue {
 public:
  explicit FakeQueue(size_t slabBytes) : slab_(slabBytes, 0) {}

  // Connects two queues back to back.
  static void pair(FakeQueue& a, FakeQueue& b) {
    a.peer_ = &b;
    b.peer_ = &a;
  }

  Status postWrite(size_t offset, size_t bytes, uint32_t imm) override;
  Status postWriteFrom(size_t offset, size_t headerBytes, const void* user, size_t bytes, uint32_t lkey,
                       uint32_t imm) override;
  Status postAreaWrite(size_t offset, size_t bytes) override;
  Status postCredit(uint64_t released, uint32_t imm) override;
  StatusOr<int> poll(Completion* out, int max) override;
  uint64_t creditWord() const override { return creditWord_; }
  uint8_t* slab() override { return slab_.data(); }
  const char* asyncFailure() override { return async_.empty() ? nullptr : async_.c_str(); }

  // A device area of `bytes` (GPUDirect RDMA's GPU memory, here host memory) at this end.
  void makeArea(size_t bytes) { area_.assign(bytes, 0); }
  uint8_t* area() { return area_.data(); }
  uint64_t areaWritesPosted() const { return areaWrites_; }

  // ---- fault injection and inspection ----
  // The next operation posted here completes with `status` / `text`; nothing lands.
  void failNextPost(int status, const char* text) {
    failStatus_ = status;
    failText_ = text;
  }
  // As if the device reported a fatal async event for this queue pair.
  void raiseAsync(const std::string& what) { async_ = what; }
  // While held, local completions (kWrite, kCredit) wait; arrivals at the peer do not.
  void holdLocalCompletions(bool hold);
  // As if the peer wrote `data` at `offset` of this queue's slab with immediate `imm`
  // (and `byteLen` bytes on the wire; by default data.size()).
  void forgeArrival(size_t offset, const std::vector<uint8_t>& data, uint32_t imm, int64_t byteLen = -1);
  // As if the peer wrote `value` into this queue's credit word with immediate `imm`.
  void forgeCredit(uint64_t value, uint32_t imm);

  uint64_t writesPosted() const { return writes_; }
  uint64_t writesFromUser() const { return userWrites_; }
  uint32_t lastUserKey() const { return lastUserKey_; }
  uint64_t creditsPosted() const { return credits_; }
  uint64_t lastCreditPosted() const { return lastCredit_; }
  size_t pendingCompletions() const { return cq_.size(); }

 private:
  void complete(Completion c);  // a local completion (held or queued)
  bool faulted(Completion::Op op);
  void failRemoteAccess();

  std::vector<uint8_t> slab_;
  std::vector<uint8_t> area_;
  uint64_t areaWrites_ = 0;
  uint64_t creditWord_ = 0;
  FakeQueue* peer_ = nullptr;
  std::deque<Completion> cq_;
  std::deque<Completion> held_;
  bool hold_ = false;
  bool inError_ = false;
  int failStatus_ = 0;
  const char* failText_ = nullptr;
  std::string async_;
  uint64_t writes_ = 0;
  uint64_t userWrites_ = 0;
  uint32_t lastUserKey_ = 0;
  uint64_t credits_ = 0;
  uint64_t lastCredit_ = 0;
};

}  // namespace braid::transport::ibverbs::test

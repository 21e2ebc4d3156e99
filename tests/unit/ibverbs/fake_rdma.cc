#include "unit/ibverbs/fake_rdma.h"

#include <algorithm>
#include <cstring>

namespace braid::transport::ibverbs::test {
namespace {

// The status codes and texts libibverbs uses for the two failures the fake produces itself.
constexpr int kRemoteAccessError = 10;
constexpr int kFlushError = 5;

}  // namespace

void FakeQueue::complete(Completion c) {
  if (hold_) {
    held_.push_back(c);
  } else {
    cq_.push_back(c);
  }
}

void FakeQueue::holdLocalCompletions(bool hold) {
  hold_ = hold;
  if (!hold) {
    cq_.insert(cq_.end(), held_.begin(), held_.end());
    held_.clear();
  }
}

// Common to both kinds of post: an injected failure, or the error state a failure leaves
// the queue pair in. True when the operation ends there (with an error completion).
bool FakeQueue::faulted(Completion::Op op) {
  Completion c;
  c.op = op;
  if (inError_) {
    c.ok = false;
    c.status = kFlushError;
    c.error = "Work Request Flushed Error";
    complete(c);
    return true;
  }
  if (failText_) {
    c.ok = false;
    c.status = failStatus_;
    c.error = failText_;
    failText_ = nullptr;
    inError_ = true;
    complete(c);
    return true;
  }
  return false;
}

// Like the NIC: a write outside the peer's region fails at the peer, the requester sees a
// remote access error, and the queue pair is in error from then on.
void FakeQueue::failRemoteAccess() {
  Completion local;
  local.op = Completion::Op::kWrite;
  local.ok = false;
  local.status = kRemoteAccessError;
  local.error = "remote access error";
  inError_ = true;
  complete(local);
}

Status FakeQueue::postWrite(size_t offset, size_t bytes, uint32_t imm) {
  ++writes_;
  if (faulted(Completion::Op::kWrite)) return Status::ok();
  if (!peer_ || offset + bytes > peer_->slab_.size() || offset + bytes > slab_.size()) {
    failRemoteAccess();
    return Status::ok();
  }
  Completion local;
  local.op = Completion::Op::kWrite;
  std::memcpy(peer_->slab_.data() + offset, slab_.data() + offset, bytes);
  Completion arrival;
  arrival.op = Completion::Op::kArrival;
  arrival.imm = imm;
  arrival.byteLen = static_cast<uint32_t>(bytes);
  peer_->cq_.push_back(arrival);
  complete(local);
  return Status::ok();
}

// As the NIC gathers the two pieces: the header from the slab, the payload from `user`,
// landing side by side at `offset` of the peer's slab. The payload is read at once here,
// while the NIC reads it until the completion; a completion held back stands for that.
Status FakeQueue::postWriteFrom(size_t offset, size_t headerBytes, const void* user, size_t bytes, uint32_t lkey,
                                uint32_t imm) {
  ++writes_;
  ++userWrites_;
  lastUserKey_ = lkey;
  if (faulted(Completion::Op::kWrite)) return Status::ok();
  const size_t total = headerBytes + bytes;
  if (!peer_ || offset + total > peer_->slab_.size() || offset + headerBytes > slab_.size()) {
    failRemoteAccess();
    return Status::ok();
  }
  std::memcpy(peer_->slab_.data() + offset, slab_.data() + offset, headerBytes);
  if (bytes) std::memcpy(peer_->slab_.data() + offset + headerBytes, user, bytes);
  Completion arrival;
  arrival.op = Completion::Op::kArrival;
  arrival.imm = imm;
  arrival.byteLen = static_cast<uint32_t>(total);
  peer_->cq_.push_back(arrival);
  Completion local;
  local.op = Completion::Op::kWrite;
  complete(local);
  return Status::ok();
}

// Unsignaled: nothing completes on success. A failure (an injected one, an area missing at
// either end or too small) puts the queue pair in error with an error completion, as the
// NIC reports an unsignaled request that failed, and flushes what follows.
Status FakeQueue::postAreaWrite(size_t offset, size_t bytes) {
  ++areaWrites_;
  if (faulted(Completion::Op::kWrite)) return Status::ok();
  if (!peer_ || offset + bytes > peer_->area_.size() || offset + bytes > area_.size()) {
    failRemoteAccess();
    return Status::ok();
  }
  std::memcpy(peer_->area_.data() + offset, area_.data() + offset, bytes);
  return Status::ok();
}

Status FakeQueue::postCredit(uint64_t released, uint32_t imm) {
  ++credits_;
  lastCredit_ = released;
  if (faulted(Completion::Op::kCredit)) return Status::ok();
  peer_->creditWord_ = released;
  Completion arrival;
  arrival.op = Completion::Op::kArrival;
  arrival.imm = imm;
  arrival.byteLen = sizeof(uint64_t);
  peer_->cq_.push_back(arrival);
  Completion local;
  local.op = Completion::Op::kCredit;
  complete(local);
  return Status::ok();
}

StatusOr<int> FakeQueue::poll(Completion* out, int max) {
  int n = 0;
  while (n < max && !cq_.empty()) {
    out[n++] = cq_.front();
    cq_.pop_front();
  }
  return n;
}

void FakeQueue::forgeArrival(size_t offset, const std::vector<uint8_t>& data, uint32_t imm, int64_t byteLen) {
  std::memcpy(slab_.data() + offset, data.data(), std::min(data.size(), slab_.size() - offset));
  Completion c;
  c.op = Completion::Op::kArrival;
  c.imm = imm;
  c.byteLen = static_cast<uint32_t>(byteLen >= 0 ? static_cast<size_t>(byteLen) : data.size());
  cq_.push_back(c);
}

void FakeQueue::forgeCredit(uint64_t value, uint32_t imm) {
  creditWord_ = value;
  Completion c;
  c.op = Completion::Op::kArrival;
  c.imm = imm;
  c.byteLen = sizeof(uint64_t);
  cq_.push_back(c);
}

}  // namespace braid::transport::ibverbs::test

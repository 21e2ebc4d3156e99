#include "transports/ucx/ucx_connection.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "common/clock.h"
#include "common/log.h"
#include "common/process_state.h"

namespace braid::transport::ucx {
namespace {

// Receive buffer for a hello: a UCP worker address (a few hundred bytes for tcp and shared
// memory, a few KiB with many devices) behind a small header.
constexpr size_t kHelloBytes = 64 * 1024;

// Slot memory: one block, each slot a 64-byte-aligned stretch.
size_t stride(size_t slotBytes) { return (slotBytes + 63) / 64 * 64; }

// Allocates the memory of `slots`, `slotBytes` each, into `memory` and points each slot's
// buf at its own.
// The block is zeroed here, which maps its pages now: left to the first calls that reach
// them, a 2-rank 1 MiB allreduce over UCX's shared memory took about 680 page faults more
// over its first few calls, each pass through the 16 slots reaching fresh ones.
template <typename SlotT>
void allocateSlots(std::vector<SlotT>& slots, size_t slotBytes, std::unique_ptr<uint8_t[]>& memory) {
  const size_t step = stride(slotBytes);
  memory.reset(new uint8_t[step * slots.size() + 64]());
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(memory.get()) + 63) & ~uintptr_t{63});
  for (size_t i = 0; i < slots.size(); ++i) slots[i].buf = base + i * step;
}

// Receives go on demand (zero copy) for slots of this size and up, unless BRAID_UCX_ZCOPY=0.
// Small slots (the latency set) keep their receives posted ahead: a small message then
// lands in a posted receive instead of UCX's unexpected queue.
constexpr size_t kOnDemandMinSlot = 64 * 1024;

bool zeroCopyOff() {
  const char* v = std::getenv("BRAID_UCX_ZCOPY");
  return v && std::strcmp(v, "0") == 0;
}

bool onDemandFor(size_t slotBytes) { return !zeroCopyOff() && slotBytes >= kOnDemandMinSlot; }

WaitHandle armedHandle(Worker* w) {
  WaitHandle h;
  if (w->efd < 0) return h;
  h.fdEvents = POLLIN;
  // UCS_ERR_BUSY: events are pending right now; the caller must not sleep.
  h.fd = ucp_worker_arm(w->worker) == UCS_OK ? w->efd : w->ready;
  return h;
}

// A connection's requests still with UCX at its teardown, and the memory their callbacks
// point into, handed to its worker (Leftover).
template <typename Kept>
struct KeptLeftover final : Leftover {
  explicit KeptLeftover(Kept k) : kept(std::move(k)) {}
  bool pending() const override { return kept.pending(); }
  bool waitsForPeer() const override { return kept.waitsForPeer(); }
  void cancel(ucp_worker_h worker) override { kept.cancel(worker); }
  Kept kept;
};

template <typename Kept>
void handOver(Worker* w, int peer, Endpoint* ep, Kept k) {
  auto left = std::make_unique<KeptLeftover<Kept>>(std::move(k));
  left->peer = peer;
  left->ep = ep;
  w->leftovers.push_back(std::move(left));
}

}  // namespace

bool receivesOnDemand(size_t slotBytes) { return onDemandFor(slotBytes); }

namespace {
// Peer processes ("host/pid") on this host found stopped or gone at a teardown. Never
// destroyed: the teardown threads read them, and the process waits for those threads at its
// exit (ucx_transport.cc, Teardowns) after a static made later than the waiter is gone.
std::mutex& stalledMu() {
  static auto* m = new std::mutex;
  return *m;
}
std::set<std::string>& stalledProcesses() {
  static auto* s = new std::set<std::string>;
  return *s;
}
std::string processKey(const std::pair<std::string, int64_t>& id) { return id.first + "/" + std::to_string(id.second); }

// True when process `pid` of this host is stopped, a zombie, or gone.
bool stoppedOrGone(int64_t pid) {
  const char state = processState(pid);
  return stateStopped(state) || stateGone(state);
}
}  // namespace

bool PeerBook::isStalled(int peer) const {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stalled.count(peer)) return true;
  }
  auto it = ids.find(peer);
  if (it == ids.end()) return false;
  std::lock_guard<std::mutex> lock(stalledMu());
  return stalledProcesses().count(processKey(it->second)) > 0;
}

void PeerBook::markStalled(int peer) {
  {
    std::lock_guard<std::mutex> lock(mu);
    stalled.insert(peer);
  }
  auto it = ids.find(peer);
  // Pid 0: a peer of another pid namespace, which this process cannot look at.
  if (it == ids.end() || it->second.first != localHost || it->second.second <= 0 || !stoppedOrGone(it->second.second))
    return;
  std::lock_guard<std::mutex> lock(stalledMu());
  stalledProcesses().insert(processKey(it->second));
}

size_t eagerMaxUnder(const char* rndvThresh, size_t unknown) {
  if (!rndvThresh || !*rndvThresh) return unknown;
  const std::string v = rndvThresh;
  if (v == "inf") return SIZE_MAX;
  if (v[0] < '0' || v[0] > '9') return unknown;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  const bool huge = errno == ERANGE;
  unsigned long long unit = 1;
  switch (*end) {
    case 'k': case 'K': unit = 1ull << 10; ++end; break;
    case 'm': case 'M': unit = 1ull << 20; ++end; break;
    case 'g': case 'G': unit = 1ull << 30; ++end; break;
    default: break;
  }
  if (*end == 'b' || *end == 'B') ++end;
  if (*end != '\0' || n == 0) return unknown;
  if (huge || n > SIZE_MAX / unit) return SIZE_MAX;
  return static_cast<size_t>(n * unit - 1);
}

Status peerFailure(int peer, const char* what, ucs_status_t st) {
  return Status(Code::kRemoteError,
                std::string("ucx: ") + what + " rank " + std::to_string(peer) + " failed: " + ucs_status_string(st),
                peer);
}

// ---------------------------------------------------------------------------------------
// Sender

UcxSendConnection::UcxSendConnection(const TransportConfig& cfg, int peer, Worker* worker, Endpoint* ep)
    : peer_(peer),
      rank_(cfg.rank),
      job_(jobBits(cfg.nonce)),
      fromUser_(!zeroCopyOff()),
      slotBytes_(cfg.slotBytes),
      // The receiver's side of the same rule (UcxRecvConnection::maxMessageBytes).
      maxMessage_(onDemandFor(cfg.slotBytes) ? kMaxMessageBytes : cfg.slotBytes),
      worker_(worker),
      ep_(ep),
      slots_(static_cast<size_t>(cfg.nslots)),
      nonce_(cfg.nonce),
      key_(cfg.authKey) {
  allocateSlots(slots_, slotBytes_, memory_);
}

Connection::MemoryRange UcxSendConnection::slotMemory() const {
  if (slots_.empty() || !memory_) return {};
  return {slots_[0].buf, stride(slotBytes_) * slots_.size()};
}

UcxSendConnection::~UcxSendConnection() {
  DrivingWorker driving;  // its teardown drives the worker
  struct Kept {
    std::vector<Staging> slots;
    std::unique_ptr<uint8_t[]> memory;
    std::unique_ptr<Staging> hello;
    std::unique_ptr<CreditLanding> credit;
    std::vector<uint8_t> helloBuf;
    bool waitsForPeer() const {
      if (hello->request) return true;
      for (const Staging& s : slots)
        if (s.request) return true;
      return false;
    }
    bool pending() const { return waitsForPeer() || credit->request; }
    void cancel(ucp_worker_h w) {
      for (Staging& s : slots)
        if (s.request) ucp_request_cancel(w, s.request);
      if (hello->request) ucp_request_cancel(w, hello->request);
      if (credit->request) ucp_request_cancel(w, credit->request);
    }
  };
  // No credit this side waits for matters any more.
  if (credit_->request) ucp_request_cancel(worker_->worker, credit_->request);
  worker_->progress();
  // Moving a vector or a unique_ptr leaves what the callbacks point at where it is.
  Kept k{std::move(slots_), std::move(memory_), std::move(hello_), std::move(credit_), std::move(helloBuf_)};
  if (!k.pending()) return;
  handOver(worker_, peer_, ep_, std::move(k));
}

void UcxSendConnection::sendDone(void* request, ucs_status_t status, void* user) {
  auto* st = static_cast<Staging*>(user);
  st->status = status;
  st->request = nullptr;
  ucp_request_free(request);
}

void UcxSendConnection::creditDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user) {
  auto* c = static_cast<CreditLanding*>(user);
  c->status = status;
  c->done = true;
  c->request = nullptr;
  ucp_request_free(request);
}

Status UcxSendConnection::postCreditRecv() {
  ucp_request_param_t param;
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &UcxSendConnection::creditDone;
  param.user_data = credit_.get();
  credit_->done = false;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_->worker, &credit_->count, sizeof(credit_->count),
                                       ucxTag(kKindCredit, peer_, job_), ~uint64_t{0}, &param);
  if (UCS_PTR_IS_ERR(r)) return peerFailure(peer_, "receiving credits from", UCS_PTR_STATUS(r));
  // See post(): a credit already waiting completes inside the call.
  if (!credit_->done) credit_->request = r;
  return Status::ok();
}

// Takes every credit message that has arrived; counts are cumulative, so only the newest
// matters.
Status UcxSendConnection::takeCredits() {
  while (credit_->done) {
    if (credit_->status != UCS_OK) return peerFailure(peer_, "receiving credits from", credit_->status);
    if (credit_->count > postSeq_) {
      return Status(Code::kRemoteError,
                    "ucx: rank " + std::to_string(peer_) + " released more slots than were sent to it", peer_);
    }
    released_ = std::max(released_, credit_->count);
    BRAID_RETURN_IF_ERROR(postCreditRecv());
  }
  return Status::ok();
}

Status UcxSendConnection::failed() const {
  if (ep_->failure != UCS_OK) return peerFailure(peer_, "sending to", ep_->failure);
  return Status::ok();
}

// A slot whose message completed: free again, or the failure it ended with.
Status UcxSendConnection::checkSlot(Staging& st) {
  if (!st.busy || st.request) return Status::ok();
  st.busy = false;
  --inFlight_;
  if (st.status != UCS_OK) return peerFailure(peer_, "sending to", st.status);
  return Status::ok();
}

Status UcxSendConnection::reserveSend(Slot* s) {
  Staging& st = slots_[postSeq_ % slots_.size()];
  // A slot to stage in, and room in the receiver's FIFO: at most nslots messages it has
  // not released yet, so every message lands in a posted receive, never in UCX's
  // unexpected queue.
  if (st.busy || postSeq_ - released_ >= slots_.size()) {
    BRAID_RETURN_IF_ERROR(progress());
    if (st.busy || postSeq_ - released_ >= slots_.size()) {
      BRAID_RETURN_IF_ERROR(failed());
      return Status(Code::kWouldBlock, "");
    }
  }
  s->data = st.buf;
  return Status::ok();
}

Status UcxSendConnection::postSend(const Slot& s, size_t bytes) {
  return send(slots_[postSeq_ % slots_.size()].buf, bytes, s.tag);
}

// The reserved slot then only tracks the message: UCX reads the caller's memory, straight
// into the receiver's buffer when the receiver posted it there (rendezvous).
Status UcxSendConnection::postSendFrom(const Slot& s, const void* src, size_t bytes) {
  return send(src, bytes, s.tag);
}

Status UcxSendConnection::send(const void* buf, size_t bytes, uint64_t execTag) {
  BRAID_RETURN_IF_ERROR(failed());
  Staging& st = slots_[postSeq_ % slots_.size()];
  ucp_request_param_t param;
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxSendConnection::sendDone;
  param.user_data = &st;
  st.status = UCS_OK;
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep_->ep, buf, bytes, ucxTag(kKindData, rank_, execTag & kExecTagMask), &param);
  if (UCS_PTR_IS_ERR(r)) return peerFailure(peer_, "sending to", UCS_PTR_STATUS(r));
  ++postSeq_;
  if (r != nullptr) {
    st.request = r;
    st.busy = true;
    ++inFlight_;
  }
  return Status::ok();
}

Status UcxSendConnection::peekRecv(Slot*) { return internalError("ucx: peekRecv on a send connection"); }
Status UcxSendConnection::releaseRecv(const Slot&) { return internalError("ucx: releaseRecv on a send connection"); }

Status UcxSendConnection::progress() {
  worker_->progress();
  if (inFlight_ > 0) {
    for (Staging& st : slots_) BRAID_RETURN_IF_ERROR(checkSlot(st));
  }
  BRAID_RETURN_IF_ERROR(takeCredits());
  // A failed endpoint matters only while something is in flight (or, in reserveSend, while
  // this side waits for credits): a connection to a peer that has finished and left, with
  // nothing of ours still on the way, is not an error.
  if (inFlight_ > 0) BRAID_RETURN_IF_ERROR(failed());
  return Status::ok();
}

WaitHandle UcxSendConnection::waitHandle(bool) { return armedHandle(worker_); }

Status UcxSendConnection::sendHello(int channel, const std::string& challenge) {
  BRAID_RETURN_IF_ERROR(postCreditRecv());
  // The receiver opens an endpoint back to this worker with the address.
  const std::string& addr = worker_->address;
  helloBuf_.assign(kHelloHeaderBytes + addr.size(), 0);
  const uint64_t nonceWord = job_;
  const uint64_t rank = static_cast<uint64_t>(rank_);
  std::memcpy(helloBuf_.data(), &nonceWord, 8);
  std::memcpy(helloBuf_.data() + 8, &rank, 8);
  if (key_.present) {
    const Digest proof = helloProof(key_, nonce_, rank_, peer_, channel, challenge, addr);
    std::memcpy(helloBuf_.data() + 16, proof.data(), proof.size());
  }
  std::memcpy(helloBuf_.data() + kHelloHeaderBytes, addr.data(), addr.size());
  ucp_request_param_t param;
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxSendConnection::sendDone;
  param.user_data = hello_.get();
  const uint64_t helloTag = ucxTag(kKindHello, rank_, job_);
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep_->ep, helloBuf_.data(), helloBuf_.size(), helloTag, &param);
  if (UCS_PTR_IS_ERR(r)) return peerFailure(peer_, "greeting", UCS_PTR_STATUS(r));
  hello_->request = r;
  return Status::ok();
}

StatusOr<bool> UcxSendConnection::helloSent() {
  worker_->progress();
  if (hello_->request) {
    if (ep_->failure != UCS_OK) return peerFailure(peer_, "greeting", ep_->failure);
    return false;
  }
  if (hello_->status != UCS_OK) return peerFailure(peer_, "greeting", hello_->status);
  return true;
}

// ---------------------------------------------------------------------------------------
// Reduction on arrival

void ArrivalLanding::addSplit(size_t at, const unsigned char* src, size_t n) {
  const size_t e = r.elemBytes;
  const size_t elem = at / e;
  Split* sp = nullptr;
  for (Split& s : splits)
    if (s.elem == elem) sp = &s;
  if (!sp) {
    splits.emplace_back();
    sp = &splits.back();
    sp->elem = elem;
  }
  std::memcpy(sp->b + at % e, src, n);
  sp->have += n;
  if (sp->have < e) return;
  const size_t o = elem * e;
  r.fn(r.ctx, dst + o, sp->b, static_cast<const char*>(r.local) + o, e);
  *sp = splits.back();
  splits.pop_back();
}

bool ArrivalLanding::unpack(size_t offset, const void* src, size_t length) {
  if (offset > bytes || length > bytes - offset) return false;
  if (!r.fn || length == 0) return true;
  const size_t e = r.elemBytes;
  const auto* p = static_cast<const unsigned char*>(src);
  const size_t end = offset + length;
  const size_t firstWhole = (offset + e - 1) / e * e;  // the first element that starts here
  const size_t lastWhole = end / e * e;                // the end of the last one that ends here
  if (firstWhole > offset) addSplit(offset, p, std::min(firstWhole, end) - offset);
  if (lastWhole > firstWhole) {
    r.fn(r.ctx, dst + firstWhole, p + (firstWhole - offset), static_cast<const char*>(r.local) + firstWhole,
         lastWhole - firstWhole);
  }
  const size_t tail = std::max(lastWhole, firstWhole);
  if (tail < end) addSplit(tail, p + (tail - offset), end - tail);
  return true;
}

namespace {

void* arrivalStart(void*, void* buffer, size_t) {
  auto* a = static_cast<ArrivalLanding*>(buffer);
  a->splits.clear();
  return a;
}
size_t arrivalSize(void* state) { return static_cast<ArrivalLanding*>(state)->bytes; }
size_t arrivalPack(void*, size_t, void*, size_t) { return 0; }  // never sent from
ucs_status_t arrivalUnpack(void* state, size_t offset, const void* src, size_t length) {
  return static_cast<ArrivalLanding*>(state)->unpack(offset, src, length) ? UCS_OK : UCS_ERR_MESSAGE_TRUNCATED;
}
void arrivalFinish(void*) {}

}  // namespace

ucp_datatype_t arrivalDatatype() {
  static const ucp_datatype_t dt = [] {
    ucp_generic_dt_ops_t ops{};
    ops.start_pack = [](void*, const void* buffer, size_t) -> void* { return const_cast<void*>(buffer); };
    ops.start_unpack = &arrivalStart;
    ops.packed_size = &arrivalSize;
    ops.pack = &arrivalPack;
    ops.unpack = &arrivalUnpack;
    ops.finish = &arrivalFinish;
    ucp_datatype_t d = 0;
    // Fails only without memory; a receive posted with datatype 0 would then fail, so the
    // connections are told (arrivalFits).
    if (ucp_dt_create_generic(&ops, nullptr, &d) != UCS_OK) return ucp_datatype_t{0};
    return d;
  }();
  return dt;
}

// ---------------------------------------------------------------------------------------
// Receiver

UcxRecvConnection::UcxRecvConnection(const TransportConfig& cfg, int peer, Worker* worker)
    : peer_(peer),
      tag_(ucxTag(kKindData, peer, 0)),
      helloTag_(ucxTag(kKindHello, peer, jobBits(cfg.nonce))),
      slotBytes_(cfg.slotBytes),
      onDemand_(onDemandFor(cfg.slotBytes)),
      worker_(worker),
      slots_(static_cast<size_t>(cfg.nslots)),
      creditTag_(ucxTag(kKindCredit, cfg.rank, jobBits(cfg.nonce))),
      creditBatch_(std::max<uint64_t>(1, static_cast<uint64_t>(cfg.nslots) / 4)),
      rank_(cfg.rank),
      nonce_(cfg.nonce),
      key_(cfg.authKey) {
  allocateSlots(slots_, slotBytes_, memory_);
  helloMemory_.reset(new uint8_t[kHelloBytes]);
  hello_->buf = helloMemory_.get();
  worker_->recvs.push_back(this);
}

bool UcxRecvConnection::dropCallerLandings() {
  bool dropped = true;
  for (Landing& l : slots_) {
    if (!l.request || !l.into || l.into == l.buf) continue;
    l.red.r.fn = nullptr;  // a payload still landing is dropped, not reduced
    ucp_request_cancel(worker_->worker, l.request);  // completes it (recvDone) unless matched
    dropped &= l.request == nullptr;
  }
  return dropped;
}

Connection::MemoryRange UcxRecvConnection::slotMemory() const {
  if (slots_.empty() || !memory_) return {};
  return {slots_[0].buf, stride(slotBytes_) * slots_.size()};
}

UcxRecvConnection::~UcxRecvConnection() {
  DrivingWorker driving;  // its teardown drives the worker
  auto& recvs = worker_->recvs;
  recvs.erase(std::remove(recvs.begin(), recvs.end(), this), recvs.end());
  struct Kept {
    std::vector<Landing> slots;
    std::unique_ptr<uint8_t[]> memory;
    std::unique_ptr<Landing> hello;
    std::unique_ptr<uint8_t[]> helloMemory;
    std::unique_ptr<CreditOut> creditOut;
    bool waitsForPeer() const { return creditOut->request != nullptr; }
    // A receive UCX is still landing in the caller's memory (a rendezvous under way).
    bool intoCaller() const {
      for (const Landing& l : slots)
        if (l.request && l.into && l.into != l.buf) return true;
      return false;
    }
    bool pending() const {
      if (hello->request || creditOut->request) return true;
      for (const Landing& l : slots)
        if (l.request) return true;
      return false;
    }
    void cancel(ucp_worker_h w) {
      for (Landing& l : slots)
        if (l.request) ucp_request_cancel(w, l.request);
      if (hello->request) ucp_request_cancel(w, hello->request);
      if (creditOut->request) ucp_request_cancel(w, creditOut->request);
    }
  };
  // Posted receives stay with UCX until cancelled; their callbacks point into this object.
  // One that reduces on arrival reduces no more: its operation is over.
  for (Landing& l : slots_) {
    l.red.r.fn = nullptr;
    if (l.request) ucp_request_cancel(worker_->worker, l.request);
  }
  if (hello_->request) ucp_request_cancel(worker_->worker, hello_->request);
  worker_->progress();
  Kept k{std::move(slots_), std::move(memory_), std::move(hello_), std::move(helloMemory_), std::move(creditOut_)};
  if (!k.pending()) return;
  // A receive UCX could not cancel is one it is landing: when that is in the caller's
  // memory, which the caller may free once its communicator is gone, it is waited for
  // here (bounded), not on the teardown's thread. Only the rest is handed over.
  if (k.intoCaller()) {
    Deadline d = Deadline::after(worker_->peers->isStalled(peer_) ? 0.2 : 2.0);
    while (k.intoCaller() && !d.expired()) worker_->progress();
    if (k.intoCaller())
      BRAID_WARN("ucx: a receive from rank %d into the caller's memory did not finish at teardown", peer_);
    if (!k.pending()) return;
  }
  handOver(worker_, peer_, ep_, std::move(k));
}

void UcxRecvConnection::recvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* l = static_cast<Landing*>(user);
  l->status = status;
  l->length = status == UCS_OK && info ? info->length : 0;
  l->senderTag = info ? info->sender_tag : 0;
  l->done = true;
  l->request = nullptr;
  ucp_request_free(request);
}

Status UcxRecvConnection::post(Landing& l, uint64_t tag, void* into, size_t capacity, const ArrivalReduce* red) {
  ucp_request_param_t param;
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &UcxRecvConnection::recvDone;
  param.user_data = &l;
  l.done = false;
  l.status = UCS_OK;
  l.length = 0;
  l.into = into;
  l.capacity = capacity;
  l.reducing = red != nullptr;
  void* buffer = into;
  if (red) {
    // UCX unpacks into the landing's ArrivalLanding (the datatype's state), which reduces
    // into `into`.
    l.red.r = *red;
    l.red.dst = static_cast<char*>(into);
    l.red.bytes = capacity;
    l.red.splits.clear();
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = arrivalDatatype();
    buffer = &l.red;
  }
  // Data matches on kind and sender only; the low bits carry the executor's tag.
  const uint64_t mask = tag == tag_ ? kMatchMask : ~uint64_t{0};
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_->worker, buffer, capacity, tag, mask, &param);
  if (UCS_PTR_IS_ERR(r)) return peerFailure(peer_, "receiving from", UCS_PTR_STATUS(r));
  // With UCP_OP_ATTR_FLAG_NO_IMM_CMPL, a message already waiting in UCX's unexpected queue
  // completes inside ucp_tag_recv_nbx: the callback runs (and frees the request) before the
  // call returns the request's address. Keeping that address would make the destructor
  // cancel a freed, possibly reused request, and wait for a completion that never comes.
  if (!l.done) l.request = r;
  l.posted = true;
  return Status::ok();
}

Status UcxRecvConnection::start(int channel, std::string challenge) {
  channel_ = channel;
  challenge_ = std::move(challenge);
  BRAID_RETURN_IF_ERROR(post(*hello_, helloTag_, hello_->buf, kHelloBytes));
  if (onDemand_) return Status::ok();
  for (Landing& l : slots_) BRAID_RETURN_IF_ERROR(post(l, tag_, l.buf, slotBytes_));
  return Status::ok();
}

StatusOr<std::string> UcxRecvConnection::hello() {
  const Landing& h = *hello_;
  if (!h.done) {
    worker_->progress();
    if (!h.done) return std::string();
  }
  if (h.status != UCS_OK) return peerFailure(peer_, "the hello of", h.status);
  uint64_t nonceWord = 0, rank = 0;
  if (h.length > kHelloHeaderBytes) {
    std::memcpy(&nonceWord, h.buf, 8);
    std::memcpy(&rank, h.buf + 8, 8);
  }
  // Anyone who can reach this worker and knows the nonce can send a hello with the right
  // tag: one that is malformed or does not prove the key is refused, and the receive posted
  // again for the real sender's.
  if (h.length <= kHelloHeaderBytes || nonceWord != (helloTag_ & kLowMask) || rank != static_cast<uint64_t>(peer_)) {
    return refuseHello("malformed (" + std::to_string(h.length) + " bytes)");
  }
  std::string address(reinterpret_cast<const char*>(h.buf) + kHelloHeaderBytes, h.length - kHelloHeaderBytes);
  if (key_.present) {
    const std::string_view proof(reinterpret_cast<const char*>(h.buf) + 16, 32);
    const std::string why =
        authRefusal(helloProof(key_, nonce_, peer_, rank_, channel_, challenge_, address), proof, "its hello");
    if (!why.empty()) return refuseHello(why);
  }
  return address;
}

StatusOr<std::string> UcxRecvConnection::refuseHello(const std::string& why) {
  refusal_ = why;
  if (key_.present) {
    BRAID_SECURITY("ucx: refused a hello claiming to be rank %d on channel %d: %s", peer_, channel_, why.c_str());
  } else {
    BRAID_WARN("ucx: refused a hello claiming to be rank %d on channel %d: %s", peer_, channel_, why.c_str());
  }
  BRAID_RETURN_IF_ERROR(post(*hello_, helloTag_, hello_->buf, kHelloBytes));
  return std::string();
}

Digest helloProof(const AuthKey& key, uint64_t nonce, int sender, int receiver, int channel,
                  std::string_view challenge, std::string_view address) {
  char ids[20];
  const int32_t s = sender, r = receiver, c = channel;
  std::memcpy(ids, &nonce, 8);
  std::memcpy(ids + 8, &s, 4);
  std::memcpy(ids + 12, &r, 4);
  std::memcpy(ids + 16, &c, 4);
  return authProof(key, "braid ucx hello", {std::string_view(ids, sizeof(ids)), challenge, address});
}

Status UcxRecvConnection::failed() const {
  if (ep_ && ep_->failure != UCS_OK) return peerFailure(peer_, "receiving from", ep_->failure);
  if (creditOut_->status != UCS_OK) return peerFailure(peer_, "returning credits to", creditOut_->status);
  return Status::ok();
}

Status UcxRecvConnection::reserveSend(Slot*) { return internalError("ucx: reserveSend on a receive connection"); }
Status UcxRecvConnection::postSend(const Slot&, size_t) {
  return internalError("ucx: postSend on a receive connection");
}

Status UcxRecvConnection::peekRecv(Slot* s) { return peek(s, nullptr, 0); }

Status UcxRecvConnection::peekRecvInto(Slot* s, void* dst, size_t bytes) { return peek(s, dst, bytes); }

Status UcxRecvConnection::peekTag(uint64_t* tag) {
  const Landing& l = slots_[peekSeq_ % slots_.size()];
  if (l.posted) {
    Slot s;
    BRAID_RETURN_IF_ERROR(peek(&s, nullptr, 0));
    *tag = s.tag;
    return Status::ok();
  }
  // Not posted (on demand): one sender's messages match in the order sent, so the oldest of
  // this peer's data messages waiting unexpected is the next one.
  worker_->progress();
  ucp_tag_recv_info_t info;
  if (!ucp_tag_probe_nb(worker_->worker, tag_, kMatchMask, /*remove=*/0, &info)) {
    BRAID_RETURN_IF_ERROR(failed());
    return Status(Code::kWouldBlock, "");
  }
  *tag = info.sender_tag & kExecTagMask;
  return Status::ok();
}

// On demand: a message's receive goes up when it is announced or peeked, in message order,
// into the caller's buffer when one is given (UCX matches one sender's messages in the order
// sent), whatever its size: a message larger than a slot can only land there.
Status UcxRecvConnection::postFor(Landing& l, void* dst, size_t bytes) {
  if (dst && bytes <= kMaxMessageBytes) return post(l, tag_, dst, bytes);
  return post(l, tag_, l.buf, slotBytes_);
}

// A receive posted ahead pays for an eager message: one that arrives before its receive
// waits in UCX's unexpected queue, copied there from the socket's segment and copied again
// into place. A rendezvous message waits as a request only and moves once its receive is
// up; posting that ahead only starts a second transfer beside the current one, which
// measured slower where ranks share cores (docs/performance.md, "Receives announced ahead").
Status UcxRecvConnection::expectRecv(size_t ahead, void* dst, size_t bytes) {
  // Posted ahead, every slot already waits for its message; and a landing must be free.
  if (!onDemand_ || ahead >= slots_.size()) return Status::ok();
  // A rendezvous message waits as a request, not as data: posted before its peek it only
  // starts a transfer beside whatever this rank still sends (a 2-rank allreduce of 1 MiB
  // over tcp, its first receive posted at the start of the call: 0.84-0.93 of the busbw).
  // The peek posts it.
  if (bytes > worker_->eagerMaxBytes) return Status::ok();
  // Receives go up in message order: this one only after those before it.
  for (size_t k = 0; k < ahead; ++k)
    if (!slots_[(peekSeq_ + k) % slots_.size()].posted) return Status::ok();
  Landing& l = slots_[(peekSeq_ + ahead) % slots_.size()];
  if (l.posted) return Status::ok();
  return postFor(l, dst, bytes);
}

bool UcxRecvConnection::arrivalFits(size_t bytes, const ArrivalReduce& r) const {
  if (arrival_ == Arrival::kEagerOnly && bytes > worker_->eagerMaxBytes) return false;
  return reducesOnArrival() && r.fn && r.elemBytes > 0 && r.elemBytes <= kMaxArrivalElemBytes &&
         bytes % r.elemBytes == 0 && bytes > 0 && bytes <= kMaxMessageBytes && arrivalDatatype() != 0;
}

Status UcxRecvConnection::peekRecvReduce(Slot* s, void* dst, size_t bytes, const ArrivalReduce& r) {
  Landing& l = slots_[peekSeq_ % slots_.size()];
  if (!l.posted) {
    if (arrivalFits(bytes, r)) BRAID_RETURN_IF_ERROR(post(l, tag_, dst, bytes, &r));
    else BRAID_RETURN_IF_ERROR(postFor(l, nullptr, bytes));
  } else if (l.into != l.buf && (!l.reducing || l.into != dst)) {
    return internalError("ucx: a message from rank " + std::to_string(peer_) +
                         " to be reduced was announced with another destination");
  }
  BRAID_RETURN_IF_ERROR(peek(s, nullptr, 0));
  // A payload of the length asked for, a whole number of elements, ends whole unless UCX
  // handed over pieces that overlap or miss; one of another length is the executor's to
  // report (a collective mismatch).
  if (l.reducing && s->data == dst && s->bytes == bytes && !l.red.whole()) {
    return Status(Code::kRemoteError,
                  "ucx: the payload from rank " + std::to_string(peer_) + " arrived with elements missing", peer_);
  }
  return Status::ok();
}

// As expectRecv: an eager message only, posted in message order.
Status UcxRecvConnection::expectReduce(size_t ahead, void* dst, size_t bytes, const ArrivalReduce& r) {
  if (!arrivalFits(bytes, r)) return expectRecv(ahead, nullptr, bytes);
  if (ahead >= slots_.size() || bytes > worker_->eagerMaxBytes) return Status::ok();
  for (size_t k = 0; k < ahead; ++k)
    if (!slots_[(peekSeq_ + k) % slots_.size()].posted) return Status::ok();
  Landing& l = slots_[(peekSeq_ + ahead) % slots_.size()];
  if (l.posted) return Status::ok();
  return post(l, tag_, dst, bytes, &r);
}

Status UcxRecvConnection::peek(Slot* s, void* dst, size_t bytes) {
  Landing& l = slots_[peekSeq_ % slots_.size()];
  if (!l.posted) BRAID_RETURN_IF_ERROR(postFor(l, dst, bytes));
  if (!l.done) {
    worker_->progress();
    if (!l.done) {
      // Data that arrived before a failure is still delivered; only then report it.
      BRAID_RETURN_IF_ERROR(failed());
      // Every credit owed leaves before this side waits: the sender may be waiting for it.
      BRAID_RETURN_IF_ERROR(maybeSendCredit(/*all=*/true));
      return Status(Code::kWouldBlock, "");
    }
  }
  if (l.status == UCS_ERR_MESSAGE_TRUNCATED) {
    if (l.into != l.buf) {
      return Status(Code::kInvalidArgument,
                    "collective mismatch: rank " + std::to_string(peer_) + " sent more than the " +
                        std::to_string(l.capacity) + " bytes expected (different counts?)",
                    peer_);
    }
    return Status(Code::kRemoteError,
                  "ucx: rank " + std::to_string(peer_) + " sent more than a slot holds (" +
                      std::to_string(slotBytes_) + " bytes); is BRAID_SLOT_BYTES the same on every rank?",
                  peer_);
  }
  if (l.status != UCS_OK) return peerFailure(peer_, "receiving from", l.status);
  s->tag = l.senderTag & kExecTagMask;
  s->data = l.into;
  s->bytes = l.length;
  return Status::ok();
}

Status UcxRecvConnection::releaseRecv(const Slot&) {
  Landing& l = slots_[peekSeq_ % slots_.size()];
  ++peekSeq_;
  l.posted = false;
  if (!onDemand_) BRAID_RETURN_IF_ERROR(post(l, tag_, l.buf, slotBytes_));
  return maybeSendCredit();
}

void UcxRecvConnection::creditSent(void* request, ucs_status_t status, void* user) {
  auto* c = static_cast<CreditOut*>(user);
  c->status = status;
  c->request = nullptr;
  ucp_request_free(request);
}

// A credit that cannot be sent is not this call's failure: what was received is still
// good, and the sender's death shows through failed() once this side waits for more.
Status UcxRecvConnection::maybeSendCredit(bool all) {
  if (!ep_ || peekSeq_ == creditedSeq_ || (!all && peekSeq_ - creditedSeq_ < creditBatch_)) return Status::ok();
  CreditOut& c = *creditOut_;
  if (c.request || c.status != UCS_OK) return Status::ok();
  c.count = peekSeq_;
  ucp_request_param_t param;
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxRecvConnection::creditSent;
  param.user_data = &c;
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep_->ep, &c.count, sizeof(c.count), creditTag_, &param);
  if (UCS_PTR_IS_ERR(r)) {
    c.status = UCS_PTR_STATUS(r);
    return Status::ok();
  }
  if (r != nullptr) c.request = r;
  creditedSeq_ = peekSeq_;
  return Status::ok();
}

// The executor drives every connection while it waits for one (and the communicator
// when a call ends). When this side has released nothing since the last time (its
// executor has been waiting a while), what it owes leaves whole: a sender that waits for
// credits while its receiver waits to send elsewhere (a ring whose next round's send runs
// ahead of the last receive, exec::stepsAhead) would otherwise wait for releases held
// back to fill a batch. A wait that ends at once keeps the batches.
Status UcxRecvConnection::progress() {
  worker_->progress();
  const bool idle = progressSeq_ == peekSeq_;
  progressSeq_ = peekSeq_;
  return maybeSendCredit(idle);
}

WaitHandle UcxRecvConnection::waitHandle(bool) { return armedHandle(worker_); }

}  // namespace braid::transport::ucx

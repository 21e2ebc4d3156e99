#include "device/device_queue.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>

#include "common/clock.h"

namespace braid::device {
namespace {

constexpr size_t kAlign = 64;
// CUDA's cudaStreamPerThread handle (driver_types.h: ((cudaStream_t)0x2)), which names a
// different stream on each thread that uses it: its calls never share a block.
const Stream kPerThreadStream = reinterpret_cast<Stream>(uintptr_t{2});
constexpr size_t kRoundUp = 64 * 1024;  // staging blocks come in these steps, for reuse
// How long the proxy polls a stream marker, yielding, before it sleeps between polls: a
// 50 us sleep took 106 us on the H200 host measured, so sleeping after a few misses (as
// before) added that to calls whose staging copy was still running. Staging copies of up
// to tens of MiB finish within this window.
constexpr int64_t kSpinNanos = 5'000'000;

size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Host blocks that queued copies may still write into, kept reachable for the life of the
// process (a failure between staging and the flag wait; rare, and bounded by such failures).
void parkForever(void* p) {
  static std::mutex mu;
  static auto* parked = new std::vector<void*>();
  std::lock_guard<std::mutex> lock(mu);
  parked->push_back(p);
}

}  // namespace

DeviceQueue::DeviceQueue(Runtime& rt, double timeoutSec) : rt_(rt), timeoutSec_(timeoutSec) {
  auto f = rt_.allocFlag();
  if (f.isOk()) {
    flag_ = f.value();
    proxy_ = std::thread([this] { proxyLoop(); });
  } else {
    flagStatus_ = f.status();
  }
}

// A call that failed is reported at once: its stream is released, but what it copies back
// is whatever the failed call left.
bool DeviceDone::test(Status* result) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool over = done_ || (ran_ && !result_.isOk());
  if (over && result) *result = result_;
  return over;
}

Status DeviceDone::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (done_ || (ran_ && !result_.isOk())) return result_;
    if (ran_ && nowNanos() - ranAt_ > static_cast<int64_t>(timeoutSec_ * 1e9))
      return Status(Code::kTimeout, "the collective ran, but its stream did not copy the results back within " +
                                        std::to_string(timeoutSec_) + " s");
    cv_.wait_for(lock, std::chrono::milliseconds(ran_ ? 1 : 10));
  }
}

void DeviceDone::ran(const Status& result) {
  std::lock_guard<std::mutex> lock(mu_);
  ran_ = true;
  ranAt_ = nowNanos();
  result_ = result;
}

void DeviceDone::finish(const Status& late) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_.isOk()) result_ = late;
    done_ = true;
  }
  cv_.notify_all();
}

DeviceQueue::~DeviceQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (proxy_.joinable()) proxy_.join();
  retire(/*all=*/true);
  rt_.freeDeferred();
  for (const Block& b : pool_) rt_.freeHost(b.ptr);
  // A stream's block that a job still uses is one the stream may still read: kept.
  for (const auto& [stream, b] : streamBlock_)
    if (users_[b.ptr] == 0) rt_.freeHost(b.ptr);
  if (flag_.host) rt_.freeFlag(flag_);
}

// Calls on one stream share a block. Every use of it is ordered by that stream: a job's
// copies into the block follow, on the stream, the previous job's flag wait, which the
// proxy releases only after it has finished with the block, and the copies back out of it;
// the proxy touches a job's part of the block only after the stream has reached the job's
// staged marker. So one pinned block serves a whole loop of calls on a stream, however many
// are in flight (it grows when a larger call comes), where a block per call pinned new
// memory for each call in flight: measured on an H200, 20 out-of-place 128 MiB allreduces
// issued back to back took 144 ms each against 21 ms when each waited for the last.
StatusOr<DeviceQueue::Block> DeviceQueue::take(size_t bytes, Stream s) {
  const bool shared = s != kPerThreadStream;
  Block b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shared) {
      auto it = streamBlock_.find(s);
      if (it != streamBlock_.end() && it->second.bytes >= bytes) {
        ++users_[it->second.ptr];
        return it->second;
      }
    }
    b = takePooled(bytes);
  }
  if (!b.ptr) {
    // Pinned outside mu_, which the proxy takes between jobs.
    b.bytes = alignUp(std::max<size_t>(bytes, 1), kRoundUp);
    BRAID_ASSIGN_OR_RETURN(b.ptr, rt_.allocHost(b.bytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  users_[b.ptr] = 1;
  if (shared) {
    auto it = streamBlock_.find(s);
    if (it != streamBlock_.end()) {
      // Too small: the stream's jobs move on to the new block; the old one goes back to
      // the pool once its last job is done.
      Block old = it->second;
      it->second = b;
      if (users_[old.ptr] == 0) {
        users_.erase(old.ptr);
        pool_.push_back(old);
      }
    } else {
      streamBlock_.emplace(s, b);
    }
  }
  return b;
}

void DeviceQueue::release(const Block& b, bool park) {
  auto u = users_.find(b.ptr);
  if (u != users_.end() && --u->second > 0) return;
  for (const auto& [stream, current] : streamBlock_)
    if (current.ptr == b.ptr) return;  // stays the stream's block
  if (u != users_.end()) users_.erase(u);
  if (park) parkForever(b.ptr);
  else pool_.push_back(b);
}

DeviceQueue::Block DeviceQueue::takePooled(size_t bytes) {
  // The smallest pooled block that fits.
  size_t best = pool_.size();
  for (size_t i = 0; i < pool_.size(); ++i)
    if (pool_[i].bytes >= bytes && (best == pool_.size() || pool_[i].bytes < pool_[best].bytes)) best = i;
  if (best == pool_.size()) return Block{};
  Block b = pool_[best];
  pool_.erase(pool_.begin() + static_cast<ptrdiff_t>(best));
  return b;
}

void DeviceQueue::push(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
}

Status DeviceQueue::enqueue(const DeviceCall& call, HostRun run, PieceRun pieceRun, std::shared_ptr<DeviceDone> done) {
  BRAID_RETURN_IF_ERROR(flagStatus_);
  // Jobs the stream has finished with release their markers and blocks now rather than at
  // the proxy's next wake-up: a block not tied to a stream (cudaStreamPerThread) is then in
  // the pool for this call instead of a newly pinned one (cudaHostAlloc of large blocks
  // takes milliseconds).
  retire(/*all=*/false);
  rt_.freeDeferred();
  // The stream's work is queued under issueMu_, never mu_: a CUDA call that queues work may
  // block until the stream drains (a stream holds a bounded amount of queued work), and
  // the stream drains only as the proxy, which takes mu_ between jobs, stores the flag
  // values it waits for. On an H200 a loop of 128 MiB calls (32 pieces each) hung so.
  std::lock_guard<std::mutex> issuing(issueMu_);
  BRAID_RETURN_IF_ERROR(asyncError());
  if (call.direct) return enqueueDirect(call, std::move(run), std::move(pieceRun), std::move(done));
  Stream s = call.stream;

  const bool hasIn = call.inputBytes > 0, hasOut = call.outputBytes > 0;
  const HostLayout layout = hostLayout(call);
  const size_t inAt = layout.inAt, outAt = layout.outAt;
  const std::vector<size_t>& extraAt = layout.extraAt;
  BRAID_ASSIGN_OR_RETURN(Block block, take(layout.bytes, s));
  // Until the flag wait is on the stream, a failure leaves nothing waiting, but copies into
  // the block may already be queued on the stream. A stream's shared block stays its block
  // (its later uses are ordered after those copies); any other is parked (never reused or
  // freed) rather than pooled.
  struct Park {
    DeviceQueue* q;
    Block* block;
    ~Park() {
      if (!block) return;
      std::lock_guard<std::mutex> lock(q->mu_);
      q->release(*block, /*park=*/true);
    }
  } park{this, &block};
  char* base = static_cast<char*>(block.ptr);
  Job job;
  job.done = std::move(done);
  job.block = block;
  job.hostInput = hasIn ? base + inAt : nullptr;
  job.hostOutput = hasOut ? base + outAt : nullptr;
  job.run = std::move(run);
  for (size_t i = 0; i < call.extra.size(); ++i) job.hostExtra.push_back(base + extraAt[i]);

  if (pieceRun && call.pairwise) {
    job.pieceRun = std::move(pieceRun);
    job.agree = call.agreePieces;
    job.ownPieces = ownPairPieces(call);
    job.elementBytes = call.elementBytes;
    if (job.ownPieces > 1) return enqueuePairPieces(call, std::move(job), &park.block);
    // Every block of this rank's in one piece: staged whole, below; the proxy runs the pieces.
  } else if (pieceRun && cutsIntoPieces(call)) {
    job.pieceRun = std::move(pieceRun);
    job.elementBytes = call.elementBytes;
    return enqueuePieces(call, std::move(job), &park.block);
  }

  BRAID_RETURN_IF_ERROR(stageIn(rt_, call, job.hostInput, job.hostOutput, job.hostExtra));
  BRAID_RETURN_IF_ERROR(markThenWait(job, s));
  // From here the stream waits for this seq: the job goes to the proxy now, before the
  // copies back are queued behind the wait (their number is the caller's: a group's
  // buffers), so a stream whose queue fills with them still drains.
  park.block = nullptr;
  void* const hostOutput = job.hostOutput;
  const std::vector<void*> hostExtra = job.hostExtra;
  std::shared_ptr<Issue> issue = pushIssuing(std::move(job));
  return finishIssue(*issue, s, stageOut(rt_, call, hostOutput, hostExtra));
}

std::shared_ptr<DeviceQueue::Issue> DeviceQueue::pushIssuing(Job&& job) {
  auto issue = std::make_shared<Issue>();
  job.issue = issue;
  push(std::move(job));
  return issue;
}

// Marks the end of a pushed job's copies back (when `st` says they were all queued) and
// tells retire() its part of the block may be returned once the stream is past that mark.
// A failure here is the runtime's (the collective itself runs on the proxy as on the peers):
// the call and every later one fail with it.
Status DeviceQueue::finishIssue(Issue& issue, Stream s, Status st) {
  void* copiedBack = nullptr;
  if (st.isOk()) {
    auto b = rt_.mark(s);
    if (b.isOk()) copiedBack = b.value();
    else st = b.status();
  }
  {
    std::lock_guard<std::mutex> lock(issue.mu);
    issue.copiedBack = copiedBack;
    issue.done = true;
  }
  if (!st.isOk()) fail(st);
  return st;
}

// A whole call's copies to the host, on its stream: the output first where the collective
// may leave bytes of it untouched, then the input and the extra buffers it reads.
Status DeviceQueue::stageIn(Runtime& rt, const DeviceCall& call, const void* hostInput, void* hostOutput,
                            const std::vector<void*>& hostExtra) {
  const Stream s = call.stream;
  if (call.outputBytes > 0 && !call.writesWholeOutput)
    BRAID_RETURN_IF_ERROR(rt.copyAsync(hostOutput, call.output, call.outputBytes, s));
  if (call.inputBytes > 0)
    BRAID_RETURN_IF_ERROR(rt.copyAsync(const_cast<void*>(hostInput), call.input, call.inputBytes, s));
  for (size_t i = 0; i < call.extra.size(); ++i)
    if (call.extra[i].read) BRAID_RETURN_IF_ERROR(rt.copyAsync(hostExtra[i], call.extra[i].buf, call.extra[i].bytes, s));
  return Status::ok();
}

// And back: the output and the extra buffers the collective writes.
Status DeviceQueue::stageOut(Runtime& rt, const DeviceCall& call, const void* hostOutput,
                             const std::vector<void*>& hostExtra) {
  const Stream s = call.stream;
  if (call.outputBytes > 0) BRAID_RETURN_IF_ERROR(rt.copyAsync(call.output, hostOutput, call.outputBytes, s));
  for (size_t i = 0; i < call.extra.size(); ++i)
    if (!call.extra[i].read) BRAID_RETURN_IF_ERROR(rt.copyAsync(call.extra[i].buf, hostExtra[i], call.extra[i].bytes, s));
  return Status::ok();
}

DeviceQueue::HostLayout DeviceQueue::hostLayout(const DeviceCall& call) {
  HostLayout l;
  const auto in = reinterpret_cast<uintptr_t>(call.input);
  const auto out = reinterpret_cast<uintptr_t>(call.output);
  const bool hasIn = call.inputBytes > 0, hasOut = call.outputBytes > 0;
  const bool overlap = hasIn && hasOut && in < out + call.outputBytes && out < in + call.inputBytes;
  if (overlap) {
    const uintptr_t lo = std::min(in, out);
    l.bytes = std::max(in + call.inputBytes, out + call.outputBytes) - lo;
    l.inAt = in - lo;
    l.outAt = out - lo;
  } else {
    l.outAt = hasIn ? alignUp(call.inputBytes, kAlign) : 0;
    l.bytes = l.outAt + call.outputBytes;
  }
  for (const DeviceExtra& e : call.extra) {
    l.bytes = alignUp(l.bytes, kAlign);
    l.extraAt.push_back(l.bytes);
    l.bytes += e.bytes;
  }
  return l;
}

namespace {

// One captured call, owned by its graph: what each replay's host node runs.
struct CapturedCall {
  Runtime* rt;
  std::shared_ptr<CaptureGuard> guard;
  DeviceQueue::HostRun run;
  DeviceQueue::PieceRun pieceRun;                   // set where the call runs in pieces
  std::vector<std::pair<size_t, size_t>> pieces;  // (first, elements) of each
  // A pairwise call: the number of pieces is agreed at each replay, from this rank's own.
  std::function<StatusOr<size_t>(size_t)> agree;
  size_t ownPieces = 0;
  void* block = nullptr;
  const void* hostInput = nullptr;
  void* hostOutput = nullptr;
  std::vector<void*> hostExtra;
};

// A replay's host node, on CUDA's callback thread.
void runCaptured(void* p) {
  auto* c = static_cast<CapturedCall*>(p);
  std::lock_guard<std::mutex> lock(c->guard->runMu);
  if (!c->guard->alive) return;  // the communicator is gone: the output is left as it was
  Status st;
  if (c->agree) {
    auto all = c->agree(c->ownPieces);
    if (!all.isOk()) st = all.status();
    else if (all.value() == 1) st = c->run(c->hostInput, c->hostOutput, c->hostExtra);
    for (size_t k = 0; st.isOk() && all.value() > 1 && k < all.value(); ++k)
      st = c->pieceRun(c->hostInput, c->hostOutput, k, all.value());
  } else if (c->pieceRun) {
    for (size_t i = 0; i < c->pieces.size() && st.isOk(); ++i)
      st = c->pieceRun(c->hostInput, c->hostOutput, c->pieces[i].first, c->pieces[i].second);
  } else {
    st = c->run(c->hostInput, c->hostOutput, c->hostExtra);
  }
  if (st.isOk()) return;
  std::lock_guard<std::mutex> errorLock(c->guard->errorMu);
  if (c->guard->error.isOk()) c->guard->error = st;
}

// The graph is gone (on a thread that may not call CUDA): the block is freed later.
void dropCaptured(void* p) {
  auto* c = static_cast<CapturedCall*>(p);
  if (c->block) c->rt->deferFree(c->block);
  delete c;
}

}  // namespace

Status DeviceQueue::enqueueCaptured(Runtime& rt, const DeviceCall& call, HostRun run, PieceRun pieceRun,
                                    std::shared_ptr<CaptureGuard> guard) {
  if (call.direct) return invalidArgument("a direct call cannot be captured");
  const Stream s = call.stream;
  const HostLayout layout = hostLayout(call);
  // A block of its own, for the graph's lifetime: replays may come at any time.
  BRAID_ASSIGN_OR_RETURN(void* block, rt.allocHost(layout.bytes));
  auto* c = new CapturedCall{&rt, std::move(guard), std::move(run), nullptr, {}, nullptr, 0, block, nullptr, nullptr, {}};
  if (pieceRun && call.pairwise) {
    c->pieceRun = std::move(pieceRun);
    c->agree = call.agreePieces;
    c->ownPieces = ownPairPieces(call);
  } else if (pieceRun && cutsIntoPieces(call)) {
    c->pieceRun = std::move(pieceRun);
    for (const Piece& p : cutPieces(call))
      c->pieces.emplace_back(p.offset / call.elementBytes, p.bytes / call.elementBytes);
  }
  char* base = static_cast<char*>(block);
  const bool hasIn = call.inputBytes > 0, hasOut = call.outputBytes > 0;
  c->hostInput = hasIn ? base + layout.inAt : nullptr;
  c->hostOutput = hasOut ? base + layout.outAt : nullptr;
  for (size_t at : layout.extraAt) c->hostExtra.push_back(base + at);
  // The graph owns the call from here, whatever follows (a failure frees it too).
  BRAID_RETURN_IF_ERROR(rt.keepWithCapture(s, c, &dropCaptured));
  BRAID_RETURN_IF_ERROR(stageIn(rt, call, c->hostInput, c->hostOutput, c->hostExtra));
  BRAID_RETURN_IF_ERROR(rt.launchHostFunc(s, &runCaptured, c));
  return stageOut(rt, call, c->hostOutput, c->hostExtra);
}

// Puts marker A and the wait for the job's new seq on the stream; on failure, neither.
Status DeviceQueue::markThenWait(Job& job, Stream s) {
  BRAID_ASSIGN_OR_RETURN(job.staged, rt_.mark(s));
  job.seq = ++nextSeq_;
  Status st = rt_.waitFlag(s, flag_, job.seq);
  if (!st.isOk()) {
    rt_.releaseMarker(job.staged);
    job.staged = nullptr;
    --nextSeq_;
  }
  return st;
}

// Whether an elementwise or blockwise call is cut into pieces: large (in two pieces or more),
// in place or disjoint, writing its whole output. Every rank decides alike (the same count
// and kind of call).
bool DeviceQueue::cutsIntoPieces(const DeviceCall& call) {
  if (call.elementBytes == 0 || !call.extra.empty() || call.pairwise) return false;
  if (!call.blockRanges.empty()) return cutsUnequalBlocks(call);
  if (!call.writesWholeOutput) return false;
  const auto in = reinterpret_cast<uintptr_t>(call.input);
  const auto out = reinterpret_cast<uintptr_t>(call.output);
  if (call.blocks <= 1) {
    if (call.inputBytes < kPieceMin || (call.outputBytes != call.inputBytes && call.outputBytes != 0)) return false;
    const bool overlap = call.outputBytes > 0 && in < out + call.outputBytes && out < in + call.inputBytes;
    return !overlap || in == out;
  }
  // Blockwise: a one-block side fits the other's blocks exactly, and in place it is one of
  // those blocks (or, both sides in blocks, the same buffer).
  const size_t block = blockBytes(call);
  const size_t whole = std::max(call.inputBytes, call.outputBytes);
  if (block == 0 || whole / call.blocks != block || whole % call.blocks != 0 || whole < kPieceMin) return false;
  if (std::min(call.inputBytes, call.outputBytes) != (call.inputBytes == call.outputBytes ? whole : block)) return false;
  if (cutPieces(call).size() < 2) return false;
  const bool gathers = call.outputBytes > call.inputBytes;
  const uintptr_t one = gathers ? in : out, all = gathers ? out : in;
  const size_t oneBytes = std::min(call.inputBytes, call.outputBytes);
  const bool overlap = one < all + whole && all < one + oneBytes;
  return !overlap || (one >= all && (one - all) % block == 0 && one - all + oneBytes <= whole);
}

// Unequal blocks (DeviceCall::blockRanges): cut when large (two pieces or more), each block
// inside its side and a whole number of elements, and the one-block side as large as this
// rank's block and in place at it or apart from the blocks. Gaps between the blocks are
// never staged, so the output need not be written whole.
bool DeviceQueue::cutsUnequalBlocks(const DeviceCall& call) {
  const auto& ranges = call.blockRanges;
  if (ranges.size() < 2 || call.ownBlock >= ranges.size()) return false;
  const size_t manyBytes = call.blocksOnOutput ? call.outputBytes : call.inputBytes;
  const size_t oneBytes = call.blocksOnOutput ? call.inputBytes : call.outputBytes;
  // A gather's or scatter's rank other than the root holds its own block alone.
  const bool holdsBlocks = manyBytes > 0;
  size_t total = 0;
  for (const auto& [at, bytes] : ranges) {
    if (at % call.elementBytes != 0 || bytes % call.elementBytes != 0) return false;
    if (holdsBlocks && (at > manyBytes || bytes > manyBytes - at)) return false;
    total += bytes;
  }
  if (total < kPieceMin || oneBytes != ranges[call.ownBlock].second || cutPieces(call).size() < 2) return false;
  if (!holdsBlocks) return true;
  const auto many = reinterpret_cast<uintptr_t>(call.blocksOnOutput ? call.output : call.input);
  const auto one = reinterpret_cast<uintptr_t>(call.blocksOnOutput ? call.input : call.output);
  const bool apart = oneBytes == 0 || one + oneBytes <= many || many + manyBytes <= one;
  return apart || one == many + ranges[call.ownBlock].first;
}

// A blockwise call's block: its one-block side, or, with both sides in blocks (alltoall),
// a share of either.
size_t DeviceQueue::blockBytes(const DeviceCall& call) {
  if (call.inputBytes == call.outputBytes) return call.blocks ? call.inputBytes / call.blocks : 0;
  return std::min(call.inputBytes, call.outputBytes);
}

size_t DeviceQueue::pieceBytes(size_t total) {
  return std::max(kPieceBytes, alignUp((total + kMaxPieces - 1) / kMaxPieces, size_t{4096}));
}

// The pieces of a call: ranges of its buffers, or, blockwise, of every block, such that
// a piece moves kPieceBytes over all its blocks (more for very large calls).
std::vector<DeviceQueue::Piece> DeviceQueue::cutPieces(const DeviceCall& call) {
  size_t span = call.inputBytes, piece = 0;
  if (!call.blockRanges.empty()) {
    // Unequal blocks: the ranges of the largest block, at most kMaxPieces of them, each
    // block's share of a piece as with equal blocks. All of it from the counts, which every
    // rank knows alike (a block's place in its buffer is the rank's own).
    size_t total = 0;
    span = 0;
    for (const auto& r : call.blockRanges) {
      total += r.second;
      span = std::max(span, r.second);
    }
    piece = alignUp(std::max(pieceBytes(total) / call.blockRanges.size(), (span + kMaxPieces - 1) / kMaxPieces),
                    size_t{4096});
  } else if (call.blocks > 1) {
    span = blockBytes(call);
    piece = alignUp(pieceBytes(span * call.blocks) / call.blocks, size_t{4096});
  } else {
    piece = pieceBytes(span);
  }
  std::vector<Piece> pieces;
  for (size_t off = 0; off < span; off += piece) pieces.push_back(Piece{off, std::min(piece, span - off)});
  return pieces;
}

// A direct call (called with mu_ held): the stream reaches the call, then waits for the
// proxy, which runs it on the device buffers; the pieces are only run one after another.
Status DeviceQueue::enqueueDirect(const DeviceCall& call, HostRun run, PieceRun pieceRun,
                                  std::shared_ptr<DeviceDone> done) {
  const Stream s = call.stream;
  Job job;
  job.done = std::move(done);
  job.direct = true;
  job.hostInput = call.input;
  job.hostOutput = call.output;
  for (const DeviceExtra& e : call.extra) job.hostExtra.push_back(e.buf);
  job.run = std::move(run);
  if (pieceRun && call.pairwise) {
    job.pieceRun = std::move(pieceRun);
    job.agree = call.agreePieces;
    job.ownPieces = ownPairPieces(call);
    job.elementBytes = call.elementBytes;
  } else if (pieceRun && cutsIntoPieces(call)) {
    job.pieceRun = std::move(pieceRun);
    job.elementBytes = call.elementBytes;
    job.pieces = cutPieces(call);
  }
  BRAID_RETURN_IF_ERROR(markThenWait(job, s));
  push(std::move(job));
  return Status::ok();
}

// The stream side of a call staged in pieces (the header shows the order); called with
// issueMu_ held, `job` laid out by enqueue(). Clears *park once a wait is on the stream.
Status DeviceQueue::enqueuePieces(const DeviceCall& call, Job job, Block** park) {
  const Stream s = call.stream;
  job.pieces = cutPieces(call);
  const auto* devIn = static_cast<const char*>(call.input);
  auto* devOut = static_cast<char*>(call.output);
  auto* hostIn = static_cast<char*>(const_cast<void*>(job.hostInput));  // inside our own block
  auto* hostOut = static_cast<char*>(job.hostOutput);
  // A piece's range of one buffer, or, on a blockwise call's side of many blocks, of each.
  const bool blockwise = call.blocks > 1;
  const bool unequal = !call.blockRanges.empty();
  const size_t block = blockwise && !unequal ? blockBytes(call) : 0;
  // Bytes of a piece within a block of `bytes` (unequal blocks end within a piece, or before).
  const auto within = [](const Piece& p, size_t bytes) { return p.offset < bytes ? std::min(p.bytes, bytes - p.offset) : 0; };
  // Blocks of one size back to back (a gather's or scatter's root): one strided copy.
  bool regular = unequal;
  for (size_t b = 0; regular && b < call.blockRanges.size(); ++b)
    regular = call.blockRanges[b].second == call.blockRanges[0].second && call.blockRanges[b].first == b * call.blockRanges[0].second;
  const auto copyPiece = [&](char* dst, const char* src, const Piece& p, bool manyBlocks) -> Status {
    if (regular && manyBlocks) {
      const size_t size = call.blockRanges[0].second, n = within(p, size);
      return n > 0 ? rt_.copyRowsAsync(dst + p.offset, size, src + p.offset, size, n, call.blockRanges.size(), s)
                   : Status::ok();
    }
    if (unequal && manyBlocks) {
      for (const auto& [at, bytes] : call.blockRanges) {
        const size_t n = within(p, bytes);
        if (n > 0) BRAID_RETURN_IF_ERROR(rt_.copyAsync(dst + at + p.offset, src + at + p.offset, n, s));
      }
      return Status::ok();
    }
    if (unequal) {
      const size_t n = within(p, call.blockRanges[call.ownBlock].second);
      return n > 0 ? rt_.copyAsync(dst + p.offset, src + p.offset, n, s) : Status::ok();
    }
    if (!manyBlocks) return rt_.copyAsync(dst + p.offset, src + p.offset, p.bytes, s);
    return rt_.copyRowsAsync(dst + p.offset, block, src + p.offset, block, p.bytes, call.blocks, s);
  };
  const bool inBlocks = unequal ? !call.blocksOnOutput : blockwise && call.inputBytes >= call.outputBytes;
  const bool outBlocks = unequal ? call.blocksOnOutput : blockwise && call.outputBytes >= call.inputBytes;
  const std::vector<Piece> cut = job.pieces;
  return stagePieces(
      s, std::move(job), park,
      // A scatter's non-root has no input, a reduce's non-root no output.
      [&](size_t k) { return hostIn ? copyPiece(hostIn, devIn, cut[k], inBlocks) : Status::ok(); },
      [&](size_t k) { return hostOut ? copyPiece(devOut, hostOut, cut[k], outBlocks) : Status::ok(); });
}

// What enqueuePieces and enqueuePairPieces queue on stream `s` for `job.pieces`, given how
// piece k is copied in (`copyIn`) and back (`copyOut`). Clears *park once a wait is on the
// stream.
Status DeviceQueue::stagePieces(Stream s, Job job, Block** park, const std::function<Status(size_t)>& copyIn,
                                const std::function<Status(size_t)>& copyOut) {
  // Before any wait is queued, a failure leaves nothing waiting: the markers go, the call
  // fails here.
  for (size_t k = 0; k < job.pieces.size(); ++k) {
    Status st = copyIn(k);
    if (st.isOk()) {
      auto m = rt_.mark(s);
      if (m.isOk()) job.pieces[k].staged = m.value();
      else st = m.status();
    }
    if (!st.isOk()) {
      for (Piece& p : job.pieces)
        if (p.staged) rt_.releaseMarker(p.staged);
      return st;
    }
  }
  // Every piece's flag value is known before any wait is queued, and the job goes to the
  // proxy before the waits and copies back (up to a copy per block per piece) are queued:
  // the stream blocks at the first wait until the proxy runs piece 0, so a queue that fills
  // behind that wait must not keep the job from the proxy.
  std::vector<uint32_t> seqs;
  for (Piece& p : job.pieces) {
    p.seq = ++nextSeq_;
    job.seq = p.seq;
    seqs.push_back(p.seq);
  }
  *park = nullptr;
  std::shared_ptr<Issue> issue = pushIssuing(std::move(job));
  Status st;
  for (size_t k = 0; k < seqs.size() && st.isOk(); ++k) {
    st = rt_.waitFlag(s, flag_, seqs[k]);
    if (st.isOk()) st = copyOut(k);  // on failure the proxy runs every piece and stores every value regardless
  }
  return finishIssue(*issue, s, st);
}

// The proxy side of a call staged in pieces: each piece's collective once the stream has
// staged it, then its flag value, which lets the stream copy that piece back.
Status DeviceQueue::runPieces(Job& job) {
  Status st = asyncError();
  const auto* hostIn = static_cast<const char*>(job.hostInput);
  auto* hostOut = static_cast<char*>(job.hostOutput);
  for (const Piece& p : job.pieces) {
    if (!st.isOk()) break;
    st = waitReached(p.staged);
    if (st.isOk()) st = job.pieceRun(hostIn, hostOut, p.offset / job.elementBytes, p.bytes / job.elementBytes);
    if (st.isOk()) flag_.host->store(p.seq, std::memory_order_release);
  }
  return st;
}

size_t DeviceQueue::pairPieceBytes(size_t bytes, size_t blocks) {
  const size_t share = kPieceBytes / std::max<size_t>(blocks, 1);
  return alignUp(std::max({share, (bytes + kMaxPieces - 1) / kMaxPieces, size_t{1}}), size_t{4096});
}

// A pairwise call's pieces on this rank: the most any block of its own takes, on either side
// (at least one).
size_t DeviceQueue::ownPairPieces(const DeviceCall& call) {
  size_t most = 1;
  for (const auto* ranges : {&call.inputRanges, &call.outputRanges}) {
    for (const auto& [at, bytes] : *ranges) {
      const size_t piece = pairPieceBytes(bytes, ranges->size());
      most = std::max(most, (bytes + piece - 1) / piece);
    }
  }
  return most;
}

// The stream side of a pairwise call this rank stages in pieces, as enqueuePieces: piece k
// of every block (a copy per block it reaches). Called with issueMu_ held, `job` laid out by
// enqueue().
Status DeviceQueue::enqueuePairPieces(const DeviceCall& call, Job job, Block** park) {
  const Stream s = call.stream;
  const auto copyPiece = [&](char* dst, const char* src, const std::vector<std::pair<size_t, size_t>>& ranges,
                             size_t k) -> Status {
    for (const auto& [at, bytes] : ranges) {
      const size_t piece = pairPieceBytes(bytes, ranges.size()), from = k * piece;
      if (from < bytes) BRAID_RETURN_IF_ERROR(rt_.copyAsync(dst + at + from, src + at + from, std::min(piece, bytes - from), s));
    }
    return Status::ok();
  };
  const auto* devIn = static_cast<const char*>(call.input);
  auto* devOut = static_cast<char*>(call.output);
  auto* hostIn = static_cast<char*>(const_cast<void*>(job.hostInput));  // inside our own block
  auto* hostOut = static_cast<char*>(job.hostOutput);
  job.pieces.assign(job.ownPieces, Piece{});
  return stagePieces(
      s, std::move(job), park,
      [&](size_t k) { return hostIn ? copyPiece(hostIn, devIn, call.inputRanges, k) : Status::ok(); },
      [&](size_t k) { return hostOut ? copyPiece(devOut, hostOut, call.outputRanges, k) : Status::ok(); });
}

// The proxy side of a pairwise call: the ranks agree how many pieces it runs, then this rank
// runs them all, each once the stream has staged it (a call staged whole, or direct: once the
// stream has reached the call), releasing each piece staged on its own as it is done. Agreed
// on one piece, the call runs whole.
Status DeviceQueue::runPairPieces(Job& job) {
  Status st = asyncError();
  size_t all = 0;
  if (st.isOk()) {
    auto agreed = job.agree(job.ownPieces);
    if (!agreed.isOk()) st = agreed.status();
    else if (agreed.value() < job.ownPieces || agreed.value() > kMaxPieces)
      st = internalError("the ranks agreed on " + std::to_string(agreed.value()) + " pieces of an alltoallv where this rank has " +
                         std::to_string(job.ownPieces) + " (at most " + std::to_string(kMaxPieces) + ")");
    else all = agreed.value();
  }
  const bool ownPieces = !job.pieces.empty();
  if (st.isOk() && !ownPieces) st = waitReached(job.staged);
  if (st.isOk() && all == 1) return job.run(job.hostInput, job.hostOutput, job.hostExtra);
  for (size_t k = 0; k < all && st.isOk(); ++k) {
    const bool own = k < job.pieces.size();
    if (own) st = waitReached(job.pieces[k].staged);
    if (st.isOk()) st = job.pieceRun(job.hostInput, job.hostOutput, k, all);
    if (st.isOk() && own) flag_.host->store(job.pieces[k].seq, std::memory_order_release);
  }
  return st;
}

Status DeviceQueue::runInOrder(const std::function<Status()>& fn) {
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status result;
  };
  std::shared_ptr<Waiter> w;
  {
    std::lock_guard<std::mutex> issuing(issueMu_);  // after any call another thread is issuing
    std::lock_guard<std::mutex> lock(mu_);
    // With nothing enqueued still to run, the call goes now, on this thread.
    if (proxy_.joinable() && (!queue_.empty() || busy_)) {
      w = std::make_shared<Waiter>();
      Job job;
      job.hostOnly = true;
      job.run = [w, &fn](const void*, void*, const std::vector<void*>&) {
        Status st = fn();
        std::lock_guard<std::mutex> l(w->mu);
        w->result = st;
        w->done = true;
        w->cv.notify_all();
        return Status::ok();  // a host call's failure is its caller's, not the streams'
      };
      queue_.push_back(std::move(job));
      cv_.notify_all();
    }
  }
  if (!w) return fn();
  std::unique_lock<std::mutex> l(w->mu);
  w->cv.wait(l, [&] { return w->done; });
  return w->result;
}

Status DeviceQueue::asyncError() {
  BRAID_RETURN_IF_ERROR(flagStatus_);
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void DeviceQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void DeviceQueue::fail(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.isOk()) error_ = s;
}

Status DeviceQueue::waitReached(void* marker) {
  Deadline d = Deadline::after(timeoutSec_);
  const int64_t spinUntil = nowNanos() + kSpinNanos;
  for (;;) {
    BRAID_ASSIGN_OR_RETURN(bool done, rt_.reached(marker));
    if (done) return Status::ok();
    if (d.expired()) {
      return Status(Code::kTimeout, "the stream did not reach the collective within " +
                                        std::to_string(static_cast<int>(timeoutSec_)) +
                                        " s (earlier work on it still running or blocked?)");
    }
    if (nowNanos() < spinUntil) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Returns the host blocks of jobs whose results the stream has copied back; `all` waits
// for each (bounded), and leaks a block the stream may still read.
void DeviceQueue::retire(bool all) {
  std::vector<Job> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs.swap(retiring_);
  }
  std::vector<Job> keep;
  for (Job& j : jobs) {
    if (j.issue) {
      // Its copies back may still be being queued by the caller's thread.
      bool issued = false;
      {
        std::lock_guard<std::mutex> lock(j.issue->mu);
        issued = j.issue->done;
        if (issued) j.copiedBack = j.issue->copiedBack;
      }
      if (issued) j.issue.reset();
    }
    if (j.issue) {
      keep.push_back(std::move(j));
      continue;
    }
    bool done = !j.copiedBack;
    if (j.copiedBack) {
      if (all) {
        done = waitReached(j.copiedBack).isOk();
      } else {
        auto r = rt_.reached(j.copiedBack);
        done = r.isOk() && r.value();
      }
    }
    if (!done) {
      if (!all) keep.push_back(std::move(j));
      else if (j.done)
        j.done->finish(Status(Code::kTimeout, "the stream did not copy the results back before the communicator went"));
      continue;  // at teardown: the stream may still read the block, so it is not freed
    }
    if (j.done) j.done->finish();
    if (j.staged) rt_.releaseMarker(j.staged);
    for (const Piece& p : j.pieces)
      if (p.staged) rt_.releaseMarker(p.staged);
    if (j.copiedBack) rt_.releaseMarker(j.copiedBack);
    std::lock_guard<std::mutex> lock(mu_);
    if (j.block.ptr) release(j.block);  // a direct call has none
  }
  if (!keep.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Job& j : keep) retiring_.push_back(std::move(j));
  }
}

void DeviceQueue::proxyLoop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && !stop_) {
        // Wake now and then while blocks wait to be returned to the pool.
        if (retiring_.empty()) cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        else cv_.wait_for(lock, std::chrono::milliseconds(1));
      }
      if (queue_.empty()) {
        if (stop_) return;
        lock.unlock();
        retire(/*all=*/false);
        continue;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    // After a failure the communicator's ranks are out of step: later calls are failed
    // with the same error rather than run.
    if (job.hostOnly) {
      // A host call queued behind device work: it runs whatever happened before (its own
      // communicator reports a broken state) and touches no stream.
      (void)job.run(nullptr, nullptr, job.hostExtra);
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      cv_.notify_all();
      continue;
    }
    Status st;
    if (job.agree) {
      st = runPairPieces(job);
    } else if (job.direct) {
      // On the device buffers, once the stream has reached the call: whole, or its pieces
      // one after another.
      st = asyncError();
      if (st.isOk()) st = waitReached(job.staged);
      for (size_t i = 0; i < job.pieces.size() && st.isOk(); ++i) {
        const Piece& p = job.pieces[i];
        st = job.pieceRun(job.hostInput, job.hostOutput, p.offset / job.elementBytes, p.bytes / job.elementBytes);
      }
      if (st.isOk() && job.pieces.empty()) st = job.run(job.hostInput, job.hostOutput, job.hostExtra);
    } else if (!job.pieces.empty()) {
      st = runPieces(job);
    } else {
      st = asyncError();
      if (st.isOk()) st = waitReached(job.staged);
      if (st.isOk()) st = job.run(job.hostInput, job.hostOutput, job.hostExtra);
    }
    if (!st.isOk()) fail(st);
    if (job.done) job.done->ran(st);
    // Releases the stream (and any later wait, which compares cyclically).
    flag_.host->store(job.seq, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job.run = nullptr;
      job.pieceRun = nullptr;
      retiring_.push_back(std::move(job));
      busy_ = false;
    }
    cv_.notify_all();
    retire(/*all=*/false);
  }
}

}  // namespace braid::device

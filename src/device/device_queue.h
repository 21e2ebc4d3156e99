#pragma once
// Collectives on device buffers in stream order, staged through pinned host memory (the
// first GPU path: correct everywhere the CUDA runtime is, ahead of the direct paths of
// docs/cuda.md). For each call, on the caller's stream:
//
//   [copy device input -> host] [mark A] [wait: flag >= seq] [copy host output -> device] [mark B]
//
// and on the queue's proxy thread, in issue order: wait until the stream passes A, run the
// collective on the host copies, store seq into the flag. enqueue() only enqueues: the
// caller's thread never synchronizes a stream; work queued on the stream after the call
// sees its result. Host buffers return to a pool when the stream passes B.
//
// An elementwise call (allreduce, broadcast, reduce: output element i depends only on the
// input elements i) of kPieceMin bytes or more is staged in pieces, each with its own marker
// and flag value:
//
//   [in piece 0 -> host][mark A0] ... [in piece k -> host][mark Ak]
//   [wait: flag >= seq0][out piece 0 -> device] ... [wait: flag >= seqk][out piece k -> device][mark B]
//
// and the proxy runs the collective piece by piece as each Ai is passed, so copies in both
// directions overlap the collective on the other pieces (NCCL pipelines its staging the
// same way). Every rank cuts the same count into the same pieces. A blockwise call
// (allgather, reduce-scatter: one buffer holds a block per rank, the other one block;
// alltoall: both hold a block per rank; element i of a block depends only on element i of
// the blocks) is cut the same way, a piece being the same range of every block: on a side
// that holds the blocks, one strided copy per piece. Blocks of their own sizes
// (allgatherv, reduce_scatterv, whose counts every rank knows) are cut alike, a piece's
// range clipped to each block's end, with a copy per block that reaches the range; so are
// gather and scatter, whose root alone holds the blocks (one strided copy again).
//
// An alltoallv (DeviceCall::pairwise) has blocks of its own sizes on both sides, and a rank
// knows only its own: what it sends each peer and receives from each. Each block is cut by
// its size alone (pairPieceBytes), so its sender and its receiver cut it alike, but how many
// pieces the call runs is the largest count over every block of every rank, which no rank
// knows: the proxy first agrees it with the other ranks (DeviceCall::agreePieces, one small
// allreduce), then runs that many, each an alltoallv of the blocks' ranges. A rank stages
// its own pieces as above (a copy per block the piece reaches), or, when every block of its
// own fits in one piece, stages the call whole and runs all the pieces on that copy.
//
// A direct call (DeviceCall::direct) puts only [mark A] [wait: flag >= seq] on the stream;
// the proxy runs it on the device buffers once the stream passes A, then stores seq.
//
// A collective that fails still stores seq (a stream is never left waiting): its output is
// whatever the failed call left, and the error is returned by the next enqueue() and by
// asyncError(), as NCCL reports errors of enqueued work.
//
// Captured calls (enqueueCaptured): on a stream being captured into a CUDA graph nothing is
// run now; the graph gets
//
//   [copy device input -> host] [host node: the collective on the host copies] [copy host output -> device]
//
// and each replay of the graph runs the collective in its host node, on CUDA's callback
// thread, when the replay's stream reaches it (a host node may block; it may not call
// CUDA, and the staged collective does not). No marker or flag is involved: a replay needs
// nothing from the proxy, so replays and calls enqueued the usual way keep stream order.
// The host block and the call belong to the graph and go with it (a CUDA user object).
// A call that the usual path cuts into pieces runs its pieces in the host node, one after
// another on the host copies: the same collectives the peers issue for it uncaptured.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "device/runtime.h"

namespace braid::device {

// A further buffer of a call (a point-to-point message): read by it (a send) or written
// (a receive).
struct DeviceExtra {
  void* buf = nullptr;
  size_t bytes = 0;
  bool read = true;
};

// One call's device buffers: `input` (inputBytes) and `output` (outputBytes). The two may
// overlap (in place: one inside the other); staging keeps that relation in host memory.
struct DeviceCall {
  Stream stream = nullptr;
  const void* input = nullptr;
  size_t inputBytes = 0;
  void* output = nullptr;
  size_t outputBytes = 0;
  // False when the collective may leave bytes of the output untouched (the gaps of a
  // v-variant): the output is then staged in first, so those bytes come back unchanged.
  bool writesWholeOutput = true;
  std::vector<DeviceExtra> extra;  // staged each on its own
  // > 0: the call is elementwise on elements of this size (input and output the same
  // size, or no output: a reduce's non-root; no extra buffers) and may be staged in pieces
  // (enqueue's pieceRun).
  size_t elementBytes = 0;
  // > 1, with elementBytes: the call is blockwise instead: one of input and output holds
  // `blocks` equal blocks back to back, the other one block (allgather: the output holds
  // them; reduce-scatter: the input), or both hold them (alltoall).
  size_t blocks = 0;
  // Blockwise with blocks of their own sizes (allgatherv, reduce_scatterv) or held by one
  // rank (gather, scatter: the root's side, absent, size 0, on the others): each block of
  // the side that holds them all as (byte offset, bytes), one per rank in rank order;
  // `ownBlock` is this rank's, the size of the other side; `blocksOnOutput` says which side
  // holds them. Empty: `blocks` equal blocks back to back. Only the blocks are staged in
  // pieces (gaps between them are left as they are on the device).
  std::vector<std::pair<size_t, size_t>> blockRanges;
  size_t ownBlock = 0;
  bool blocksOnOutput = false;
  // Alltoallv: input and output each hold a block per rank of its own size, as (byte
  // offset, bytes) in rank order, the send counts' and the receive counts' (`inputRanges`,
  // `outputRanges`); with elementBytes, the call is staged and run in pieces (the header's
  // alltoallv), `agreePieces` giving, from this rank's number of pieces, the largest over
  // all ranks (the same answer on every rank; it runs on the proxy, in the calls' order).
  bool pairwise = false;
  std::vector<std::pair<size_t, size_t>> inputRanges, outputRanges;
  std::function<StatusOr<size_t>(size_t)> agreePieces;
  // The direct path (device_mover.h): nothing is staged; the proxy runs the collective on
  // the device buffers themselves once the stream reaches the call, in the same pieces a
  // staged call would be cut into (so ranks on either path issue the same calls).
  bool direct = false;
};

// A host thread's view of one enqueued call (a C++ Work on device buffers): done once the
// stream has copied the call's results back (staged), or once the proxy has run it on the
// device buffers (direct), with the call's result.
class DeviceDone {
 public:
  explicit DeviceDone(double timeoutSec) : timeoutSec_(timeoutSec) {}
  // Whether the call is done; then its result in *result.
  bool test(Status* result);
  // Blocks until the call is done and gives its result. Once the proxy has run it, the
  // stream has at most the timeout to copy the results back (its copies come next on it).
  Status wait();
  // The proxy ran the call (or failed it), then the stream went past it: done.
  void ran(const Status& result);
  void finish(const Status& late = Status::ok());

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool ran_ = false, done_ = false;
  int64_t ranAt_ = 0;
  Status result_;
  double timeoutSec_;
};

// What a session shares with the calls captured into graphs: a replay runs its call only
// while the session lives (under `runMu`, which the session takes to go), and leaves the
// first failure in `error` (under `errorMu`, which callers take without waiting for a
// replay's collective).
struct CaptureGuard {
  std::mutex runMu;
  bool alive = true;
  std::mutex errorMu;
  Status error;
};

class DeviceQueue {
 public:
  // Runs the collective on host buffers laid out like the device ones (`extra`: the staged
  // DeviceCall::extra, in order), or, for a direct call, on the device buffers.
  using HostRun = std::function<Status(const void* input, void* output, const std::vector<void*>& extra)>;
  // Runs the collective on elements [first, first + elements) of the host copies (one piece
  // of an elementwise call), or of every block (of a blockwise call; of unequal blocks,
  // clipped to each block's end); `input` and `output` are the whole buffers (output
  // nullptr where the call has none). For a pairwise call, `first` is the piece's index and
  // `elements` the number of pieces the ranks agreed on.
  using PieceRun = std::function<Status(const void* input, void* output, size_t first, size_t elements)>;

  // Pieces: calls of at least kPieceMin bytes, in pieces of kPieceBytes (more for very
  // large calls: at most kMaxPieces), a multiple of 4 KiB and so of every element size. A
  // blockwise call's piece is kPieceBytes over all its blocks, each block's range rounded up
  // to 4 KiB.
  static constexpr size_t kPieceBytes = size_t{4} << 20;
  static constexpr size_t kPieceMin = 2 * kPieceBytes;
  static constexpr size_t kMaxPieces = 64;

  // A pairwise call's block of `bytes`, among `blocks` blocks a side: the bytes of each of
  // its pieces (the last may be shorter), as an alltoall's block share of a piece, more for a
  // block that would take over kMaxPieces; a multiple of 4 KiB.
  static size_t pairPieceBytes(size_t bytes, size_t blocks);

  // `timeoutSec` bounds how long the proxy waits for a stream to reach a call (a stream
  // stalled by other work) before failing it.
  DeviceQueue(Runtime& rt, double timeoutSec);
  ~DeviceQueue();
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  // Enqueues `call` on its stream and `run` on the proxy; returns at once. Fails without
  // enqueueing anything when an earlier call failed (that error) or a runtime call fails.
  // `done`, if given, is told when the call is done.
  Status enqueue(const DeviceCall& call, HostRun run, PieceRun pieceRun = nullptr,
                 std::shared_ptr<DeviceDone> done = nullptr);

  // Records `call` into the graph its stream is being captured into, run by `run` (by
  // `pieceRun`, piece by piece, where enqueue() would cut it) at every replay while `guard`
  // is alive (the header's "Captured calls"). Staged calls only. Needs no queue (nor its
  // proxy): a capture may be the first device call of a communicator.
  static Status enqueueCaptured(Runtime& rt, const DeviceCall& call, HostRun run, PieceRun pieceRun,
                                std::shared_ptr<CaptureGuard> guard);

  // Runs `fn` (a host collective on the same communicator) after every collective enqueued
  // before it, so the communicator sees calls in issue order whatever memory they use: at
  // once on this thread when nothing is pending, else on the proxy, waiting for it.
  Status runInOrder(const std::function<Status()>& fn);

  // The first failure of enqueued work, or Ok.
  Status asyncError();

  // Blocks until every enqueued collective has run on the proxy (not until the streams
  // copied the results back). For tests and teardown.
  void drain();

 private:
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  struct Piece {
    size_t offset = 0;  // from the start of input and output alike (of every block, blockwise)
    size_t bytes = 0;
    void* staged = nullptr;  // marker A of this piece
    uint32_t seq = 0;        // the flag value that releases its copy back
  };
  // A job reaches the proxy once its stream waits for it, before the copies back behind
  // those waits are queued (a stream's queue of work is bounded; the caller's thread blocks
  // when it is full, and it drains only as the proxy runs the job). The caller's thread
  // then records here the marker after them; retire() returns the job's block once the
  // stream is past it.
  struct Issue {
    std::mutex mu;
    bool done = false;
    void* copiedBack = nullptr;  // marker B, or none when queueing failed
  };
  struct Job {
    uint32_t seq = 0;            // the last flag value the stream waits for
    void* staged = nullptr;      // marker A: the inputs are in host memory (whole calls)
    void* copiedBack = nullptr;  // marker B: the stream no longer reads the host buffers
    Block block;
    const void* hostInput = nullptr;
    void* hostOutput = nullptr;
    std::vector<void*> hostExtra;
    HostRun run;
    bool hostOnly = false;  // runInOrder: no stream, no staging
    std::vector<Piece> pieces;  // a call staged in pieces (then `staged` is unused)
    PieceRun pieceRun;
    size_t elementBytes = 0;
    bool direct = false;  // run on the device buffers (hostInput etc. are those)
    std::shared_ptr<DeviceDone> done;  // a waiting Work's view of it, if any
    std::shared_ptr<Issue> issue;  // set while enqueue still queues its copies back
    // A pairwise call: how many pieces the ranks run is agreed first (`pieces`: this rank's
    // staged pieces, or none when it is staged whole or direct; `ownPieces`: its count).
    std::function<StatusOr<size_t>(size_t)> agree;
    size_t ownPieces = 0;
  };

  // Where input, output and extra buffers sit in a call's host block, and its size:
  // overlapping buffers share one block at the same distance apart, disjoint ones sit one
  // after the other.
  struct HostLayout {
    size_t bytes = 0, inAt = 0, outAt = 0;
    std::vector<size_t> extraAt;
  };
  static HostLayout hostLayout(const DeviceCall& call);
  static Status stageIn(Runtime& rt, const DeviceCall& call, const void* hostInput, void* hostOutput,
                        const std::vector<void*>& hostExtra);
  static Status stageOut(Runtime& rt, const DeviceCall& call, const void* hostOutput,
                         const std::vector<void*>& hostExtra);
  StatusOr<Block> take(size_t bytes, Stream s);  // takes mu_ itself
  Block takePooled(size_t bytes);  // under mu_: the smallest pooled block that fits, or none
  void push(Job job);  // to the proxy
  std::shared_ptr<Issue> pushIssuing(Job&& job);  // to the proxy, its copies back still to queue
  Status finishIssue(Issue& issue, Stream s, Status st);
  // One job less uses `b` (under mu_): back to the pool (or, with `park`, kept unused for
  // good: the stream may still write it) when no job uses it and it is no stream's block.
  void release(const Block& b, bool park = false);
  void proxyLoop();
  Status runPieces(Job& job);
  Status enqueueDirect(const DeviceCall& call, HostRun run, PieceRun pieceRun, std::shared_ptr<DeviceDone> done);
  Status markThenWait(Job& job, Stream s);
  static bool cutsIntoPieces(const DeviceCall& call);
  static size_t pieceBytes(size_t total);
  static std::vector<Piece> cutPieces(const DeviceCall& call);
  static bool cutsUnequalBlocks(const DeviceCall& call);
  static size_t blockBytes(const DeviceCall& call);
  Status enqueuePieces(const DeviceCall& call, Job job, Block** park);
  Status stagePieces(Stream s, Job job, Block** park, const std::function<Status(size_t)>& copyIn,
                     const std::function<Status(size_t)>& copyOut);
  static size_t ownPairPieces(const DeviceCall& call);
  Status enqueuePairPieces(const DeviceCall& call, Job job, Block** park);
  Status runPairPieces(Job& job);
  Status waitReached(void* marker);
  void retire(bool all);
  void fail(const Status& s);

  Runtime& rt_;
  double timeoutSec_;
  Flag flag_;
  Status flagStatus_;

  // Held while a call's work is queued on its stream (enqueue), so calls reach the proxy in
  // the order of their flag values. The proxy never takes it.
  std::mutex issueMu_;
  uint32_t nextSeq_ = 0;  // under issueMu_

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;       // waiting for the proxy
  std::vector<Job> retiring_;   // run; host buffers held until the stream copied back
  std::vector<Block> pool_;
  // Calls on one stream share that stream's current block: every use of it is ordered by
  // the stream (take() says why). users_ counts the queued, running and retiring jobs of
  // each block in use.
  std::unordered_map<Stream, Block> streamBlock_;
  std::unordered_map<void*, int> users_;
  Status error_;
  bool stop_ = false;
  bool busy_ = false;
  std::thread proxy_;
};

}  // namespace braid::device

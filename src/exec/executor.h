#pragma once
// The executor runs one channel of a Schedule over transport connections. It cuts every
// step into `rounds` parts and every part into slices no larger than a slot, so that slice
// k+1 travels while slice k is reduced, and it does all waiting: spin, then yield, then
// sleep on the connection's futex or socket, checking the deadline, the abort flag and
// peer liveness while it waits.

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "exec/schedule.h"
#include "transports/transport.h"

namespace braid::exec {

struct Buffers {
  const void* input = nullptr;
  void* output = nullptr;
  void* scratch = nullptr;
  std::vector<void*> extra;  // Buf::kExtra0 + i
};

// The connections one channel may use, indexed by peer rank (nullptr where none exists).
struct ChannelLinks {
  std::vector<transport::Connection*> sendTo;
  std::vector<transport::Connection*> recvFrom;
};

// How long to spin and yield before sleeping, in microseconds. `pauseYields`: yields that
// keep losing the core for a time slice pause (common/core_yield.h); for ranks that each have
// a core, where whatever takes it is not another rank waiting in turn. Without it (ranks
// that share cores) a loss counts only while the CPUs are busy with something other than the
// job (yieldShared).
struct WaitPolicy {
  int spinMicros = 20;
  int yieldMicros = 100;
  bool pauseYields = false;
};

// What a channel is waiting for right now, for a live view of a running job (braid-info
// --status) read from another thread. Written only once a wait has lasted a health-check
// period (100 ms), so short waits cost nothing; cleared when that wait ends.
struct WaitNote {
  std::atomic<int> peer{-1};          // the rank waited for; -1 when not waiting
  std::atomic<int> what{0};           // 0 receive from, 1 send to, 2 flush data to
  std::atomic<int64_t> sinceNs{0};    // when the wait began (nowNanos)
};

// Moves and reduces the bytes of a run whose buffers the host cannot touch (device memory):
// when RunContext::mover is set, every data operation of the executor goes through it, on
// the calling thread, and has completed (its writes visible to the host and to peers
// reading the slots) when the call returns. The connections' slots it reads and writes must
// be reachable by it (registered, mapped host memory). The executor then never sends from
// or receives into the caller's memory through a transport, and cuts whole-block steps into
// slices as for any other schedule: only the mover touches the caller's buffers.
class DataMover {
 public:
  virtual ~DataMover() = default;
  // dst0 and, when not null, dst1 = a (op) b over `bytes` bytes of `type`; with b null, a
  // copy of a (bit for bit, whatever the type). dst0 may equal a or b.
  virtual Status reduceCopy(void* dst0, void* dst1, const void* a, const void* b, size_t bytes, DataType type,
                            ReduceOp op) = 0;
  // buf = buf / divisor, element by element (the last step of an average).
  virtual Status divide(void* buf, size_t bytes, DataType type, int divisor) = 0;
  // dst = src x scalar, rounded to `type` (the first step of a pre-multiplied sum).
  virtual Status scale(void* dst, const void* src, size_t bytes, DataType type, double scalar) = 0;
  // Memory the mover reaches, for a run's scratch (index 0) and a scaled input (index 1):
  // at least `bytes`, kept until the next request for the same index. One run at a time.
  virtual StatusOr<void*> workspace(int index, size_t bytes) = 0;
  // Before a kernel reads a payload a NIC wrote into device memory (GPUDirect RDMA): makes
  // those writes visible to it.
  virtual Status flushRemoteWrites() { return Status::ok(); }
};

// What a channel asks of its caller while a wait lasts (RunContext::hooks).
class RunHooks {
 public:
  virtual ~RunHooks() = default;
  // Called while waiting, about every 100 ms, with the run's deadline: reports a dead peer,
  // a peer's abort or a lost store, returning by the deadline at the latest.
  virtual Status healthCheck(Deadline deadline) = 0;
  // Called once per channel run when a wait has lasted kLongWaitNs.
  virtual void longWait() = 0;
};

// Which steps of a channel send from the caller's memory (zero copy), as the executor
// worked them out for one set of buffers. That depends on where the buffers lie (a send
// must not read bytes a later step writes), and working it out was most of a small call's
// set-up in the executor (about 1,300 instructions of a 2-rank allgather over UCX). A
// caller that runs one ChannelSetup again and again, one run at a time
// (Communicator::runAlone), keeps one of these beside it (RunContext::directSends): a run
// with the same buffers then takes the decisions from it.
struct DirectSends {
  bool valid = false;
  Buffers buffers;            // what they were worked out for
  bool streamOutput = false;  // ... and RunContext::streamOutput
  bool reduces = false;       // some step of the operation reduces
  bool sendsOnly = false;     // the channel's steps only send
  uint64_t bits = 0;          // steps 0-63
  std::vector<bool> more;     // the others, when some of them sends from the caller's memory
  uint64_t workedOut = 0;     // how many runs worked them out (the others reused them)
};

struct RunContext {
  int rank = 0;
  size_t sliceBytes = 512 * 1024;  // identical on every rank: both ends cut the same slices
  // The slice for a Schedule::wholeBlocks schedule when every connection of every rank
  // carries messages that large (agreed at init, identical on every rank); 0 = sliceBytes.
  size_t wholeBlockBytes = 0;
  // The slots of each connection's FIFO (the same on every connection the schedule uses);
  // 0 keeps ChannelPlan::overlapRounds off (unknown, or BRAID_RING_AHEAD says not).
  int fifoSlots = 0;
  uint64_t tag = 0;                // operation sequence number and call-shape hash
  Deadline deadline;
  WaitPolicy wait;
  // Write the output with streaming stores: set when the result outgrows the caches, so
  // that writing it does not first read every destination line.
  bool streamOutput = false;
  const std::atomic<int>* abortFlag = nullptr;  // nonzero: stop with kAborted
  // Asked while waiting (null: nobody to ask). An interface, not two std::functions: every
  // small call sets it.
  RunHooks* hooks = nullptr;
  // Set (when not null) to the tag a peer sent when the executor fails with a collective
  // mismatch, so that the caller can decode both calls.
  uint64_t* mismatchTag = nullptr;
  // The tag whose bits fill in those a transport does not carry in that report (UCX keeps
  // 10 of the sequence number's): this operation's own for a collective, the sequence
  // number of the next collective for a point-to-point call (whose tag has none).
  uint64_t mismatchFill = 0;
  // The other connection set's links owned by this thread (the mesh while running on the
  // rings, channel 0's rings while running on the mesh), or null. A peer that issued a
  // different collective may be sending on them: a wait longer than kLongWaitNs scans them,
  // and this channel's own links, for a slot of this operation with another shape.
  const ChannelLinks* otherLinks = nullptr;
  // Where this channel notes a long wait (null: nowhere).
  WaitNote* waitNote = nullptr;
  // The links Schedule::ackTo/ackFrom travel on (the mesh), or null. Set for channel 0
  // only, whose thread owns the mesh.
  const ChannelLinks* ackLinks = nullptr;
  // Where the buffers are device memory: what moves and reduces their bytes (null: the
  // host's memcpy and SIMD kernels).
  DataMover* mover = nullptr;
  // With a ChannelSetup only: the decisions of the last run with it, reused when this run's
  // buffers are the same, and replaced otherwise (DirectSends). Null: worked out each run.
  DirectSends* directSends = nullptr;
};

// How long a wait lasts before it looks for a mismatched peer (RunContext::otherLinks).
constexpr int64_t kLongWaitNs = 500 * 1000 * 1000;

// What runChannel works out about a channel before it runs the steps, for a caller that
// runs the same schedule over the same links again and again (a loop of small calls): the
// connections the steps use, whether those exist, the slice, and each step's length when
// every step is one slice of one round. Made by prepareChannel for a RunContext whose
// sliceBytes, wholeBlockBytes and ackLinks are those of the runs it serves, without a
// mover; valid while the schedule and the connections live.
struct ChannelSetup {
  std::vector<transport::Connection*> active;
  Status links;              // why a step's connection is missing, or ok
  size_t sliceBytes = 0;
  bool whole = false;        // whole blocks above a slot (RunContext::wholeBlockBytes)
  bool announces = false;    // a connection acts on receives announced ahead (expectRecv)
  bool acks = false;         // this channel carries the schedule's acknowledgements
  bool userSends = false;    // a connection may send from the caller's memory
  // Every step one slice of one round: stepBytes[i] is step i's length, run in step order.
  bool singleSlices = false;
  std::vector<size_t> stepBytes;
  // The first receiving step and its first slice's length (0: none), announced up front.
  size_t firstRecv = 0;
  size_t firstRecvBytes = 0;
};
ChannelSetup prepareChannel(const Schedule& schedule, int channel, const ChannelLinks& links,
                            const RunContext& ctx);

// Runs channel `channel` of `schedule` to completion (all sends flushed). Blocks; uses only
// the calling thread. On error the connections are left in an undefined state and the
// communicator must be aborted. `setup`: prepareChannel's for this schedule, channel, links
// and context (ctx.mover null), or null to work it out here.
Status runChannel(const Schedule& schedule, int channel, const Buffers& buffers,
                  const ChannelLinks& links, const RunContext& ctx, const ChannelSetup* setup = nullptr);

}  // namespace braid::exec

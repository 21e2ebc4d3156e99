#pragma once
// A Schedule is what an algorithm produces and the executor runs: for one rank, per
// channel, an ordered list of primitive steps over byte ranges of the user's buffers.
// Algorithms never move bytes; the executor never knows which algorithm it runs.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace braid::exec {

// Which buffer a region refers to.
enum class Buf : uint16_t {
  kInput,    // the user's send buffer (equals kOutput when in place)
  kOutput,   // the user's receive buffer
  kScratch,  // executor-owned temporary space of Schedule::scratchBytes
  kExtra0,   // kExtra0 + i: Buffers::extra[i] (one per message of a point-to-point group)
};
inline Buf extraBuf(size_t i) { return static_cast<Buf>(static_cast<size_t>(Buf::kExtra0) + i); }

struct Region {
  Buf buf = Buf::kInput;
  size_t offset = 0;  // bytes
  size_t bytes = 0;
};

enum class Prim : uint8_t {
  kSend,                 // send(peerOut, src)
  kRecv,                 // recv(peerIn, dst)
  kRecvReduce,           // dst = incoming (op) src
  kRecvReduceSend,       // forward incoming (op) src to peerOut without storing it
  kRecvReduceCopySend,   // dst = incoming (op) src, and forward it to peerOut
  kRecvCopySend,         // dst = incoming, and forward it to peerOut
  kCopy,                 // dst = src
  kLocalReduce,          // dst = src (op) dst  (two local regions)
};

const char* primName(Prim p);

struct Step {
  Prim prim = Prim::kCopy;
  int peerIn = -1;
  int peerOut = -1;
  Region src;  // unused by kRecv / kRecvCopySend
  Region dst;  // unused by kSend / kRecvReduceSend
  // kCopy: nothing later in the operation reads `dst` (a broadcast root's own copy), so an
  // output that outgrows the caches is written with streaming stores, as received results
  // are (RunContext::streamOutput).
  bool finalOut = false;
  // Bytes the step moves; equal to src.bytes or dst.bytes, whichever it uses.
  size_t bytes() const;
};

// The steps of one channel. The executor runs them in `rounds`: round k processes the
// k-th of `rounds` equal parts of every step, in step order, so that no step ever sends
// more than one round's share ahead of its receiver (deadlock freedom with finite FIFOs)
// while consecutive rounds pipeline through the FIFOs. Both ends of every connection must
// compute the same parts, so algorithms set `rounds` from global quantities only.
//
// Parts are cut per step, from that step's own length: a step that reads what an earlier
// step of a different length wrote in the same phase would read elements not yet written
// in this round. Such dependent steps belong in separate phases.
//
// A plan may instead be cut into phases, each a run of consecutive steps with its own round
// count, run to completion one after the other. A tree uses two: the reduction flows up in
// its rounds, pipelined, and only then the result flows down in its own.
struct Phase {
  size_t firstStep = 0;
  size_t numSteps = 0;
  int rounds = 1;
};
struct ChannelPlan {
  std::vector<Step> steps;
  int rounds = 1;
  std::vector<Phase> phases;  // empty: one phase of all steps with `rounds`
  // A ring's rounds (no phases): the steps are sends and copies, then steps that receive
  // and send, then one that only receives. The executor may then run round r+1's leading
  // sends and copies before round r's last receive, so that the ring does not drain
  // between rounds; the order of messages on every connection stays the same
  // (RunContext::fifoSlots bounds when).
  bool overlapRounds = false;
};

struct Schedule {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<ChannelPlan> channels;
  size_t scratchBytes = 0;
  // Divide kOutput by this after all channels finish (kAvg); 0 = no division.
  // Each channel divides only the output ranges listed in `divideRanges[channel]`.
  int divisor = 0;
  std::vector<std::vector<Region>> divideRanges;
  std::string algorithm;  // for logs and traces
  // Every step moves a whole block that no later step forwards piece by piece, from the
  // caller's memory (allgather's ring, pairwise alltoall out of place, point-to-point groups;
  // not a chain or a tree, whose pipelining needs slices, nor schedules that send from
  // scratch): where every connection carries large messages (RunContext::wholeBlockBytes),
  // the executor sends each step's round as one message.
  bool wholeBlocks = false;
  // A point-to-point group: the steps sending to one peer form a lane, as do those receiving
  // from one, each lane run in step order; the executor takes each lane as far as its
  // connection lets it, independently of the others, so that a send waiting for a receiver
  // busy with a later call never holds up the group's other messages (nonblocking sends and
  // receives completed together: MPI_Waitall, NCCL's groups). One channel, sends and
  // receives (and copies between this rank's own buffers) only.
  bool lanes = false;
  // Which of the communicator's connection sets the steps use: 0 = the per-channel rings'
  // (large slots, deep FIFOs, ring neighbours only), 1 = the mesh (smaller slots, every
  // peer; a mesh schedule has exactly one channel).
  int connectionSet = 0;
  // Acknowledgements (computeAcks): a rank that sends to a peer it receives nothing from in
  // the operation would finish without seeing that peer's call, and so without noticing a
  // peer that issued another collective. Channel 0 sends an empty message carrying this
  // operation's tag to every rank in `ackTo` as it starts, over the mesh, and before it
  // finishes receives one from every rank in `ackFrom`, checking its tag like any slot's.
  std::vector<int> ackTo;    // ranks this rank receives from and never sends to
  std::vector<int> ackFrom;  // ranks this rank sends to and never receives from
};

// ChannelPlan::overlapRounds, for a plan of no phases cut into `rounds` parts and those
// into slices of `sliceBytes` over FIFOs of `fifoSlots`: how many leading steps of each
// round run before the last step of the round before (0: none). They are the steps before
// the first that receives, at most one of which sends, and the last step only receives.
// Ahead, that send finds in its FIFO what the step before the last sent in the round
// before, which its receiver takes only in its own last step, after its own steps ahead;
// so the most slices a round of each takes must fit in the FIFO together. Then, in a ring
// where every rank has got that far, each still has room to finish its send, as long as
// every receiver, while it waits, tells its sender of each slot it has released
// (transport::Connection::progress). A ring's round part is at most half the FIFO
// (Layout::roundBytes), so its two fit. The executor and the simulator
// both ask this; each also keeps a round's leading steps behind when they touch what the
// round before's last step does.
size_t stepsAhead(const ChannelPlan& plan, size_t rounds, size_t sliceBytes, size_t elemBytes, int fifoSlots);

// Fills Schedule::ackTo/ackFrom from the steps of every channel (steps that move bytes).
// Both ends of every pair agree: a rank is in this rank's ackFrom exactly when this rank is
// in that rank's ackTo, as both derive it from the same pair of steps.
void computeAcks(Schedule* s, int nranks);

// Checks a Schedule's internal consistency (regions inside buffers of the given sizes,
// peers in range, element-aligned parts). Used by tests and in debug builds.
// `extraBytes` are the sizes of Buffers::extra. Acknowledgement peers must be in range.
std::string validate(const Schedule& s, int nranks, size_t inputBytes, size_t outputBytes,
                     const std::vector<size_t>& extraBytes = {});

}  // namespace braid::exec

#include "exec/executor.h"

#include "common/copy.h"
#include "common/core_yield.h"
#include "common/timeline.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "reduce/reduce.h"
#include "transports/slot_fifo.h"

namespace braid::exec {
namespace {

using transport::Connection;
using transport::Slot;
using transport::WaitHandle;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Two-destination steps work in pieces this large so the second write reads from L1.
constexpr size_t kFuseBytes = 16 * 1024;
constexpr int64_t kHealthPeriodNs = 100 * 1000 * 1000;
constexpr int64_t kSleepMicros = 10 * 1000;  // cap per sleep, so deadlines are noticed
// Tries of a wait that spins before it reads the clock (well under a microsecond each).
constexpr int kSpinsBeforeClock = 16;

std::string describeTag(uint64_t tag) {
  return "operation #" + std::to_string(tag >> 32) + " (shape " + std::to_string(tag & 0xffffffffu) + ")";
}

class ChannelRunner {
 public:
  ChannelRunner(const Schedule& s, int channel, const Buffers& b, const ChannelLinks& links,
                const RunContext& ctx, const ChannelSetup* setup = nullptr)
      : s_(s), plan_(s.channels[channel]), b_(b), links_(links), ctx_(ctx),
        es_(dataTypeSize(s.dtype)), channel_(channel), setup_(setup) {
    arrival_.fn = &ChannelRunner::reduceArrived;
    arrival_.ctx = this;
    arrival_.elemBytes = es_;
    if (setup) {
      for (Connection* c : setup->active) active_.push_back(c);
      announces_ = setup->announces;
      acks_ = setup->acks;
      sliceBytes_ = setup->sliceBytes;
      whole_ = setup->whole;
      return;
    }
    // The distinct connections this channel touches: all of them are progressed while any
    // one is awaited, so a stream transport never sits on staged bytes a peer waits for.
    for (const Step& st : plan_.steps) {
      if (st.peerIn >= 0 && links_.recvFrom[st.peerIn]) addActive(links_.recvFrom[st.peerIn]);
      if (st.peerOut >= 0 && links_.sendTo[st.peerOut]) addActive(links_.sendTo[st.peerOut]);
    }
    acks_ = ctx.ackLinks && (!s.ackTo.empty() || !s.ackFrom.empty());
    if (acks_) {
      for (int p : s.ackTo)
        if (ctx.ackLinks->sendTo[p]) addActive(ctx.ackLinks->sendTo[p]);
      for (int p : s.ackFrom)
        if (ctx.ackLinks->recvFrom[p]) addActive(ctx.ackLinks->recvFrom[p]);
    }
    // Receives are announced where a connection acts on it (UCX), never through a DataMover.
    if (!ctx.mover)
      for (Connection* c : active_) announces_ = announces_ || c->takesAnnouncements();
    sliceBytes_ = std::max(es_, ctx.sliceBytes / es_ * es_);
    // Whole blocks over connections that carry large messages: a step's round is one message.
    whole_ = s.wholeBlocks && ctx.wholeBlockBytes > sliceBytes_ && !ctx.mover;
    if (whole_) sliceBytes_ = ctx.wholeBlockBytes / es_ * es_;
  }

  // prepareChannel: what the constructor and runSteps work out, kept for later runs.
  ChannelSetup workedOut() {
    ChannelSetup out;
    const bool memoryOff = scheduleReduces() || planSendsOnly();  // see directPays
    for (Connection* c : active_) {
      out.active.push_back(c);
      out.userSends = out.userSends || (c->sendsFromUser() && !(c->inReceiverMemory() && memoryOff));
    }
    for (const Step& st : plan_.steps) {
      out.links = checkLinks(st);
      if (!out.links.isOk()) break;
    }
    out.sliceBytes = sliceBytes_;
    out.announces = announces_;
    out.whole = whole_;
    out.acks = acks_;
    bool oneRound = plan_.phases.empty() ? plan_.rounds == 1 : true;
    for (const Phase& ph : plan_.phases) oneRound = oneRound && ph.rounds == 1;
    out.singleSlices = oneRound;
    for (const Step& st : plan_.steps) {
      const size_t len = st.bytes() & ~(es_ - 1);
      out.singleSlices = out.singleSlices && len <= sliceBytes_;
      out.stepBytes.push_back(len);
    }
    if (!out.singleSlices) out.stepBytes.clear();
    out.firstRecv = firstReceive(&out.firstRecvBytes);
    return out;
  }

  Status run() {
    // Which steps may send from the caller's memory depends on the buffers: worked out on
    // every run, or taken from the last run with the same ones (DirectSends).
    if (!ctx_.mover && (!setup_ || setup_->userSends)) {
      DirectSends* kept = setup_ ? ctx_.directSends : nullptr;
      if (kept && kept->valid && sameBuffers(kept->buffers, b_) && kept->streamOutput == ctx_.streamOutput) {
        reduces_ = kept->reduces;
        sendsOnly_ = kept->sendsOnly;
        directBits_ = kept->bits;
        directMore_ = kept->more;
      } else {
        markDirectSends();
        if (kept) {
          kept->valid = true;
          kept->buffers = b_;
          kept->streamOutput = ctx_.streamOutput;
          kept->reduces = reduces_;
          kept->sendsOnly = sendsOnly_;
          kept->bits = directBits_;
          kept->more = directMore_;
          ++kept->workedOut;
        }
      }
    }
    Status st = runSteps();
    // After a failure the transport may still read a copy a large message was sent from;
    // the connections are abandoned with the communicator, and the copies with them.
    if (!st.isOk())
      for (auto& b : bounce_) (void)b.release();
    return st;
  }

 private:
  Status runSteps() {
    if (setup_) {
      BRAID_RETURN_IF_ERROR(setup_->links);
    } else {
      for (const Step& st : plan_.steps) BRAID_RETURN_IF_ERROR(checkLinks(st));
    }
    if (acks_) BRAID_RETURN_IF_ERROR(sendAcks());
    else if (announces_ && !s_.lanes) BRAID_RETURN_IF_ERROR(announceFirst());
    if (s_.lanes) {
      BRAID_RETURN_IF_ERROR(runLanes());
    } else if (setup_ && setup_->singleSlices && !timeline::on()) {
      // One slice per step, in step order: what the rounds below come to for these steps.
      const size_t n = plan_.steps.size();
      for (size_t i = 0; i < n; ++i) {
        const size_t len = setup_->stepBytes[i];
        if (len == 0) continue;
        const bool direct = isDirect(i);
        const Step& st = plan_.steps[i];
        if (announces_ && receives(st.prim)) {
          const bool nx = i + 1 < n && setup_->stepBytes[i + 1] > 0;
          BRAID_RETURN_IF_ERROR(
              announce(st, 0, len, nx ? &plan_.steps[i + 1] : nullptr, 0, nx ? setup_->stepBytes[i + 1] : 0));
        }
        BRAID_RETURN_IF_ERROR(runSlice(st, direct, 0, len));
      }
    } else if (plan_.phases.empty()) {
      BRAID_RETURN_IF_ERROR(runPhase(0, plan_.steps.size(), plan_.rounds));
    } else {
      for (const Phase& ph : plan_.phases) BRAID_RETURN_IF_ERROR(runPhase(ph.firstStep, ph.numSteps, ph.rounds));
    }
    if (acks_) BRAID_RETURN_IF_ERROR(receiveAcks());
    return flushAll();
  }

  // Schedule::ackTo: an empty message with this operation's tag to every rank that only
  // sends to this one, sent first so that it is usually there before the peer looks. The
  // mesh connection it takes carries nothing else of this operation, and the older messages
  // a full FIFO may still hold belong to operations the peer finishes without this one.
  Status sendAcks() {
    for (int p : s_.ackTo) {
      Connection* c = ctx_.ackLinks->sendTo[p];
      if (!c) return internalError("no connection to rank " + std::to_string(p) + " for an acknowledgement");
      Slot slot;
      BRAID_RETURN_IF_ERROR(waitFor(c, /*forSend=*/true, &slot));
      slot.tag = ctx_.tag;
      BRAID_RETURN_IF_ERROR(c->postSend(slot, 0));
      BRAID_RETURN_IF_ERROR(c->progress());
    }
    return Status::ok();
  }

  // Schedule::ackFrom: every rank this one only sent to shows its call, like a slot would.
  Status receiveAcks() {
    for (int p : s_.ackFrom) {
      Connection* c = ctx_.ackLinks->recvFrom[p];
      if (!c) return internalError("no connection from rank " + std::to_string(p) + " for an acknowledgement");
      Slot slot;
      BRAID_RETURN_IF_ERROR(waitFor(c, /*forSend=*/false, &slot));
      if ((slot.tag ^ ctx_.tag) & c->tagMask()) return mismatchWith(p, slot.tag, c->tagMask());
      if (slot.bytes != 0) {
        return Status(Code::kInvalidArgument,
                      "collective mismatch: rank " + std::to_string(p) + " sent " + std::to_string(slot.bytes) +
                          " bytes where rank " + std::to_string(ctx_.rank) + " expected its acknowledgement of " +
                          describeTag(ctx_.tag),
                      p);
      }
      BRAID_RETURN_IF_ERROR(c->releaseRecv(slot));
    }
    return Status::ok();
  }

  // Part r of `rounds` of a step of `bytes` bytes, [*lo, *hi), in whole elements; both ends
  // compute the same split. One round (every small message) takes the whole step without
  // dividing (es_ is a power of 2).
  void roundPart(size_t bytes, size_t r, size_t rounds, size_t* lo, size_t* hi) const {
    *lo = 0;
    *hi = bytes & ~(es_ - 1);
    if (rounds > 1) {
      const size_t elems = *hi / es_;
      *lo = elems * r / rounds * es_;
      *hi = elems * (r + 1) / rounds * es_;
    }
  }

  Status runPhase(size_t first, size_t count, int nrounds) {
    const size_t rounds = static_cast<size_t>(nrounds);
    const size_t end = first + count;
    // Only a plan of no phases has leading steps (ChannelPlan::overlapRounds).
    const size_t lead = ctx_.mover ? 0 : stepsAhead(plan_, rounds, sliceBytes_, es_, ctx_.fifoSlots);
    size_t ahead = 0;  // round r's leading steps already run, before round r-1's last
    for (size_t r = 0; r < rounds; ++r) {
      size_t next = 0;
      for (size_t i = first + ahead; i < end; ++i) {
        if (lead && i + 1 == end && r + 1 < rounds && leadClear(first, lead, end - 1, r, rounds)) {
          for (size_t j = first; j < first + lead; ++j) BRAID_RETURN_IF_ERROR(runRoundPart(j, r + 1, rounds, end));
          next = lead;
        }
        BRAID_RETURN_IF_ERROR(runRoundPart(i, r, rounds, end));
      }
      ahead = next;
    }
    return Status::ok();
  }

  // Round r of step i, slice by slice (`end`: the end of its phase's steps).
  Status runRoundPart(size_t i, size_t r, size_t rounds, size_t end) {
    const Step& st = plan_.steps[i];
    size_t lo, hi;
    roundPart(st.bytes(), r, rounds, &lo, &hi);
    const bool direct = isDirect(i);
    const int64_t t0 = timeline::on() ? timeline::nowUs() : 0;
    for (size_t off = lo; off < hi; off += sliceBytes_) {
      const size_t len = std::min(sliceBytes_, hi - off);
      if (announces_ && receives(st.prim)) {
        // The receive after this one on the same connection, when it comes next: this
        // step's next slice, or the next step's first.
        const Step* nx = nullptr;
        size_t nxOff = 0, nxLen = 0;
        if (off + len < hi) {
          nx = &st;
          nxOff = off + len;
          nxLen = std::min(sliceBytes_, hi - nxOff);
        } else if (i + 1 < end) {
          size_t nlo, nhi;
          roundPart(plan_.steps[i + 1].bytes(), r, rounds, &nlo, &nhi);
          if (nhi > nlo) {
            nx = &plan_.steps[i + 1];
            nxOff = nlo;
            nxLen = std::min(sliceBytes_, nhi - nlo);
          }
        }
        BRAID_RETURN_IF_ERROR(announce(st, off, len, nx, nxOff, nxLen));
      }
      BRAID_RETURN_IF_ERROR(runSlice(st, direct, off, len));
    }
    if (t0) traceStep(st, r, rounds, hi - lo, t0);
    return Status::ok();
  }

  // Whether round r+1 of the phase's `lead` leading steps touches nothing round r of its
  // last step touches: they run before it instead of after (and a receive announced for
  // it may land while they run).
  bool leadClear(size_t first, size_t lead, size_t last, size_t r, size_t rounds) const {
    const Step& tail = plan_.steps[last];
    size_t tlo, thi;
    roundPart(tail.bytes(), r, rounds, &tlo, &thi);
    for (size_t j = first; j < first + lead; ++j) {
      const Step& st = plan_.steps[j];
      size_t lo, hi;
      roundPart(st.bytes(), r + 1, rounds, &lo, &hi);
      for (const Region* a : {&st.src, &st.dst}) {
        if (a->bytes == 0 || hi <= lo) continue;
        const char* at = addr(*a, lo);
        for (const Region* b : {&tail.src, &tail.dst})
          if (thi > tlo && meets(*b, tlo, thi - tlo, at, hi - lo)) return false;
      }
    }
    return true;
  }

  static bool reducing(Prim p) {
    return p == Prim::kRecvReduce || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend;
  }
  static bool receives(Prim p) { return p != Prim::kSend && p != Prim::kCopy && p != Prim::kLocalReduce; }
  // Where runSlice asks the slice of `st` at `off` to land: the destination of a step that
  // only stores or forwards what it receives, else a slot (nullptr).
  void* landingOf(const Step& st, size_t off) const {
    return st.prim == Prim::kRecv || st.prim == Prim::kRecvCopySend ? addr(st.dst, off) : nullptr;
  }

  // Tells the connection of the slice of `st` at `off` (`len` bytes) about its receive, and
  // about the one after it when that is the slice of `nx` at `nxOff` (Connection::expectRecv):
  // over UCX, that one is then posted while this slice is still reduced and sent, instead of
  // arriving before its receive and being copied out of UCX's unexpected queue. The next
  // landing must lie clear of all this slice reads and writes, the only work between now
  // and its peek; a send from the caller's memory is never of a range a later step writes
  // (markDirectSends), so earlier sends still in flight cannot meet it.
  Status announce(const Step& st, size_t off, size_t len, const Step* nx, size_t nxOff, size_t nxLen) {
    Connection* c = links_.recvFrom[st.peerIn];
    const bool reduces = c->reducesOnArrival();
    transport::ArrivalReduce r = arrival_;
    if (reduces && reducing(st.prim)) {
      // Handed to the transport with its reduction; unless its destination is the next
      // peer's slot, reserved only at the step: announced into a slot of its own, a payload
      // would be copied there and read again, where left to the step it is copied at most
      // once (out of the transport's queue) and reduced as it is read.
      char* rd = reduceLandingOf(st, off, &r);
      if (!rd) return Status::ok();
      BRAID_RETURN_IF_ERROR(c->expectReduce(0, rd, len, r));
    } else {
      BRAID_RETURN_IF_ERROR(c->expectRecv(0, landingOf(st, off), len));
    }
    if (!nx || nxLen == 0 || !receives(nx->prim) || nx->peerIn != st.peerIn) return Status::ok();
    if (reduces && reducing(nx->prim)) {
      char* rd = reduceLandingOf(*nx, nxOff, &r);
      if (!rd) return Status::ok();
      // This slice reads its source and writes its destination before the next one's
      // peek: neither may meet where the next one lands, nor what it reduces with be
      // written.
      const char* lo = static_cast<const char*>(r.local);
      if (meets(st.src, off, len, rd, nxLen) || meets(st.dst, off, len, rd, nxLen) || meets(st.dst, off, len, lo, nxLen))
        return Status::ok();
      return c->expectReduce(1, rd, nxLen, r);
    }
    char* at = static_cast<char*>(landingOf(*nx, nxOff));
    if (at && (meets(st.src, off, len, at, nxLen) || meets(st.dst, off, len, at, nxLen))) return Status::ok();
    return c->expectRecv(1, at, nxLen);
  }
  // Where the slice of `st` at `off` is reduced when its payload is reduced on arrival
  // (receiveReduce), with r->local set to what it is reduced with; nullptr for a step that
  // reduces into a slot reserved only then, or does not reduce.
  char* reduceLandingOf(const Step& st, size_t off, transport::ArrivalReduce* r) const {
    const bool into = st.prim == Prim::kRecvReduce ||
                      (st.prim == Prim::kRecvReduceCopySend && isDirect(static_cast<size_t>(&st - plan_.steps.data())));
    if (!into || ctx_.mover) return nullptr;
    r->local = addr(st.src, off);
    return addr(st.dst, off);
  }
  // Whether `len` bytes of `r` from `off` meet [at, at + atLen); an empty region meets nothing.
  bool meets(const Region& r, size_t off, size_t len, const char* at, size_t atLen) const {
    if (r.bytes == 0) return false;
    const char* b = addr(r, off);
    return b < at + atLen && at < b + len;
  }

  // The channel's first receive, announced before its first step: a peer's message that
  // comes while this rank still copies its own block or sends (every allgather, the first
  // exchange of every allreduce) then lands in a receive already posted, copied out of the
  // transport piece by piece as it arrives, instead of waiting whole in UCX's unexpected
  // queue to be copied after its post. Its landing must lie clear of every step before it,
  // which run between now and its peek; otherwise the step announces it when it comes.
  Status announceFirst() {
    size_t i, len;
    if (setup_) {
      i = setup_->firstRecv;
      len = setup_->firstRecvBytes;
    } else {
      i = firstReceive(&len);
    }
    if (len == 0) return Status::ok();
    const Step& st = plan_.steps[i];
    Connection* c = links_.recvFrom[st.peerIn];
    transport::ArrivalReduce r = arrival_;
    char* rd = c->reducesOnArrival() ? reduceLandingOf(st, 0, &r) : nullptr;
    if (!rd && c->reducesOnArrival() && reducing(st.prim)) return Status::ok();  // as in announce
    char* at = rd ? rd : static_cast<char*>(landingOf(st, 0));
    if (at) {
      for (size_t j = 0; j < i; ++j) {
        const Step& before = plan_.steps[j];
        if (meets(before.src, 0, before.src.bytes, at, len) || meets(before.dst, 0, before.dst.bytes, at, len))
          return Status::ok();
        if (rd && meets(before.dst, 0, before.dst.bytes, static_cast<const char*>(r.local), len)) return Status::ok();
      }
    }
    return rd ? c->expectReduce(0, rd, len, r) : c->expectRecv(0, at, len);
  }
  // The channel's first receiving step, and the length of its first slice (round 0 of its
  // phase starts at offset 0); *len 0 when there is none or that slice is empty.
  size_t firstReceive(size_t* len) const {
    *len = 0;
    for (size_t i = 0; i < plan_.steps.size(); ++i) {
      const Step& st = plan_.steps[i];
      if (!receives(st.prim)) continue;
      size_t rounds = static_cast<size_t>(plan_.rounds);
      for (const Phase& ph : plan_.phases)
        if (i >= ph.firstStep && i < ph.firstStep + ph.numSteps) rounds = static_cast<size_t>(ph.rounds);
      size_t lo, hi;
      roundPart(st.bytes(), 0, rounds, &lo, &hi);
      *len = std::min(sliceBytes_, hi - lo);
      return i;
    }
    return 0;
  }

  // The region a step sends from the caller's memory when its connection can (zero copy):
  // a plain send's source, and the destination a forwarding step has just written.
  static const Region* sentRegion(const Step& st) {
    switch (st.prim) {
      case Prim::kSend: return &st.src;
      case Prim::kRecvCopySend:
      case Prim::kRecvReduceCopySend: return &st.dst;
      default: return nullptr;
    }
  }
  static bool writesDst(Prim p) {
    return p != Prim::kSend && p != Prim::kRecvReduceSend;
  }

  // BRAID_TIMELINE: one round's part of a step.
  void traceStep(const Step& st, size_t round, size_t rounds, size_t bytes, int64_t t0) const {
    std::string name = primName(st.prim);
    if (st.peerIn >= 0) name += " <" + std::to_string(st.peerIn);
    if (st.peerOut >= 0) name += " >" + std::to_string(st.peerOut);
    timeline::span(name, "step", t0, timeline::nowUs() - t0, channel_,
                   "\"round\": " + std::to_string(round) + ", \"rounds\": " + std::to_string(rounds) +
                       ", \"bytes\": " + std::to_string(bytes));
  }

  // Schedule::lanes. A lane is the steps to one peer or from one, in step order; `next`
  // and `off` say how far it has come.
  struct Lane {
    bool forSend = false;
    int peer = -1;
    std::vector<size_t> steps;
    size_t next = 0;
    size_t off = 0;
    int64_t started = 0;  // BRAID_TIMELINE: when steps[next] began
    bool done() const { return next == steps.size(); }
    // A send lane's steps as runs of contiguous memory (a message's parts make one), where
    // a receive may overwrite what a send is to send: the index in `steps` where each run
    // starts and the address where it ends; `run` is the one `next` is in.
    struct Run {
      size_t first;
      uintptr_t end;
    };
    std::vector<Run> runs;
    size_t run = 0;
  };

  Connection* laneConnection(const Lane& l) const {
    return l.forSend ? links_.sendTo[l.peer] : links_.recvFrom[l.peer];
  }

  // Whether bytes [lo, hi) of the caller's memory are still to be sent by some lane: a
  // receive into them must wait (a group that receives into the buffer it sends from, as a
  // sendrecv in place, gets each part out before it is overwritten).
  bool unsent(std::vector<Lane>& lanes, uintptr_t lo, uintptr_t hi) const {
    for (Lane& l : lanes) {
      if (!l.forSend || l.done()) continue;
      while (l.run + 1 < l.runs.size() && l.runs[l.run + 1].first <= l.next) ++l.run;
      for (size_t r = l.run; r < l.runs.size(); ++r) {
        const size_t k = r == l.run ? l.next : l.runs[r].first;
        const auto from = reinterpret_cast<uintptr_t>(addr(plan_.steps[l.steps[k]].src, r == l.run ? l.off : 0));
        if (from < hi && lo < l.runs[r].end) return true;
      }
    }
    return false;
  }

  // EarlierWriters' sorted addresses and Fenwick trees.
  struct EarlierScratch {
    std::vector<uintptr_t> at;           // every start and end, sorted, without repeats
    std::vector<uint32_t> starts, ends;  // the trees over `at`
  };
  // Kept by each thread from one run to the next, so that a loop of small groups allocates
  // nothing (a Lane's vectors keep their capacity).
  struct LaneScratch {
    std::vector<Lane> lanes;
    std::vector<std::pair<uintptr_t, uintptr_t>> sent;
    std::vector<uintptr_t> reach;
    std::vector<uintptr_t> starts, ends;  // markDirectSends'
    EarlierScratch earlier;               // markDirectSends'
  };
  static LaneScratch& laneScratch() {
    static thread_local LaneScratch scratch;
    return scratch;
  }

  // Whether some receive of the plan writes bytes some send of it reads.
  bool receivesOverSends() const {
    std::vector<std::pair<uintptr_t, uintptr_t>>& sent = laneScratch().sent;
    sent.clear();
    for (const Step& st : plan_.steps) {
      if (st.prim != Prim::kSend || st.src.bytes == 0) continue;
      const auto lo = reinterpret_cast<uintptr_t>(addr(st.src, 0));
      sent.emplace_back(lo, lo + st.src.bytes);
    }
    if (sent.empty()) return false;
    std::sort(sent.begin(), sent.end());
    // The longest send range starting at or before each one, so a receive is checked
    // against the one range that could reach it.
    std::vector<uintptr_t>& reach = laneScratch().reach;
    reach.resize(sent.size());
    for (size_t k = 0; k < sent.size(); ++k) reach[k] = std::max(sent[k].second, k ? reach[k - 1] : 0);
    for (const Step& st : plan_.steps) {
      if (st.prim != Prim::kRecv || st.dst.bytes == 0) continue;
      const auto lo = reinterpret_cast<uintptr_t>(addr(st.dst, 0));
      const auto hi = lo + st.dst.bytes;
      // The sends starting before hi: the furthest of them ends past lo?
      const size_t before = static_cast<size_t>(
          std::lower_bound(sent.begin(), sent.end(), std::make_pair(hi, uintptr_t{0})) - sent.begin());
      if (before > 0 && reach[before - 1] > lo) return true;
    }
    return false;
  }

  // Runs the next slice of lane `l` if its connection has room or data now: moved is set if
  // it did. The slice's reserve or receive is the first thing it does and the only thing
  // that waits (nonBlocking_ makes it return kWouldBlock at once), so a slice that cannot go
  // yet has changed nothing.
  Status laneSlice(std::vector<Lane>& lanes, Lane& l, bool* moved) {
    while (!l.done()) {
      const size_t i = l.steps[l.next];
      const Step& st = plan_.steps[i];
      const size_t len = st.bytes() & ~(es_ - 1);
      if (l.off >= len) {  // done (an empty message sends nothing, as in runPhase)
        if (l.started) traceStep(st, 0, 1, len, l.started);
        ++l.next;
        l.off = 0;
        l.started = 0;
        continue;
      }
      if (l.off == 0 && !l.started && timeline::on()) l.started = timeline::nowUs();
      const size_t n = std::min(sliceBytes_, len - l.off);
      if (!l.forSend && receivesOverSends_) {
        const auto lo = reinterpret_cast<uintptr_t>(addr(st.dst, l.off));
        if (unsent(lanes, lo, lo + n)) return Status::ok();
      }
      Status s = runSlice(st, isDirect(i), l.off, n);
      if (s.code() == Code::kWouldBlock) return Status::ok();
      BRAID_RETURN_IF_ERROR(s);
      l.off += n;
      *moved = true;
      return Status::ok();
    }
    return Status::ok();
  }

  // One slice of every lane that can go; whether any did, and whether any lane is left.
  Status lanePass(std::vector<Lane>& lanes, bool* moved, bool* left) {
    BRAID_RETURN_IF_ERROR(progressAll());
    *left = false;
    for (Lane& l : lanes) {
      BRAID_RETURN_IF_ERROR(laneSlice(lanes, l, moved));
      *left = *left || !l.done();
    }
    return Status::ok();
  }

  Status runLanes() {
    std::vector<Lane>& lanes = laneScratch().lanes;
    size_t used = 0;
    for (size_t i = 0; i < plan_.steps.size(); ++i) {
      const Step& st = plan_.steps[i];
      if (st.prim != Prim::kSend && st.prim != Prim::kRecv) {
        // A message to this rank itself: a copy that waits for nobody.
        const size_t len = st.bytes() & ~(es_ - 1);
        for (size_t off = 0; off < len; off += sliceBytes_)
          BRAID_RETURN_IF_ERROR(runSlice(st, false, off, std::min(sliceBytes_, len - off)));
        continue;
      }
      const bool forSend = st.prim == Prim::kSend;
      const int peer = forSend ? st.peerOut : st.peerIn;
      auto it = std::find_if(lanes.begin(), lanes.begin() + static_cast<std::ptrdiff_t>(used),
                             [&](const Lane& l) { return l.forSend == forSend && l.peer == peer; });
      if (it == lanes.begin() + static_cast<std::ptrdiff_t>(used)) {
        if (used == lanes.size()) lanes.emplace_back();
        Lane& l = lanes[used++];
        l.forSend = forSend;
        l.peer = peer;
        l.steps.clear();
        l.next = l.off = 0;
        l.started = 0;
        l.runs.clear();
        l.run = 0;
        it = lanes.begin() + static_cast<std::ptrdiff_t>(used - 1);
      }
      it->steps.push_back(i);
    }
    lanes.resize(used);
    receivesOverSends_ = receivesOverSends();
    for (Lane& l : lanes) {
      if (!receivesOverSends_ || !l.forSend) continue;
      for (size_t k = 0; k < l.steps.size(); ++k) {
        const Step& st = plan_.steps[l.steps[k]];
        const auto lo = reinterpret_cast<uintptr_t>(addr(st.src, 0));
        const auto hi = lo + (st.bytes() & ~(es_ - 1));
        if (!l.runs.empty() && l.runs.back().end == lo) l.runs.back().end = hi;
        else l.runs.push_back({k, hi});
      }
    }
    nonBlocking_ = true;
    struct Blocking {
      bool& flag;
      ~Blocking() { flag = false; }
    } blocking{nonBlocking_};
    NoteGuard guard{this};
    // A stall (no lane could go) waits as waitLoop does: spin, yield, then sleep, checking
    // the deadline, the abort flag and the peers' health, naming the first lane left.
    Phases phases;
    bool stalled = false;
    int phase = 0;  // of a stall, as in waitLoop: 0 spin, 1 yield, 2 sleep
    for (uint32_t iter = 0;; ++iter) {
      bool moved = false, left = false;
      BRAID_RETURN_IF_ERROR(lanePass(lanes, &moved, &left));
      if (!left) return Status::ok();
      if (moved) {
        stalled = false;
        iter = 0;
        guard.clear();
        continue;
      }
      // A peer a little behind is met in the first passes, before the clock is read.
      if (!stalled && ctx_.wait.spinMicros > 0 && iter < kSpinsBeforeClock) {
        cpuRelax();
        continue;
      }
      if (!stalled || phase == 2 || (iter & 31) == 0) {
        const int64_t now = nowNanos();
        if (!stalled) {
          stalled = true;
          phases = beginWait(now);
        }
        const Lane& first = *std::find_if(lanes.begin(), lanes.end(), [](const Lane& l) { return !l.done(); });
        BRAID_RETURN_IF_ERROR(checkAlive(first.peer, first.forSend ? "send to" : "receive from", now));
        phase = phases.at(now);
      }
      if (!relax(phase)) BRAID_RETURN_IF_ERROR(sleepOnLanes(lanes));
    }
  }

  // Sleeps until a connection some lane waits for may be ready: the sockets of stream
  // connections (and of others with output still to drain) polled, the futex word of the
  // first memory connection watched, briefly when there is more than one thing to watch; a
  // connection that gives nothing to wait on (it is ready) makes it only yield. Armed first,
  // then one more pass (a peer that went on before the arming wakes nobody): if a lane goes,
  // no sleep.
  Status sleepOnLanes(std::vector<Lane>& lanes) {
    pollfd fds[16];
    int nfds = 0, words = 0;
    const uint32_t* word = nullptr;
    uint32_t value = 0;
    bool ready = false;
    std::vector<std::pair<Connection*, bool>> armed;
    for (const Lane& l : lanes) {
      if (l.done()) continue;
      Connection* c = laneConnection(l);
      armed.emplace_back(c, l.forSend);
      WaitHandle h = c->waitHandle(l.forSend);
      if (h.fd >= 0 && nfds < 16) fds[nfds++] = {h.fd, h.fdEvents, 0};
      if (h.futexWord && words++ == 0) {
        word = h.futexWord;
        value = h.futexValue;
      }
      ready = ready || (h.fd < 0 && !h.futexWord);
    }
    for (Connection* other : active_) {
      auto lane = [other](const std::pair<Connection*, bool>& a) { return a.first == other; };
      // A memory transport has nothing staged to drain (an unread reference waits in flushAll).
      if (other->inReceiverMemory() || other->flushed() || nfds == 16 ||
          std::any_of(armed.begin(), armed.end(), lane))
        continue;
      WaitHandle oh = other->waitHandle(true);
      if (oh.fd >= 0) fds[nfds++] = {oh.fd, oh.fdEvents ? oh.fdEvents : static_cast<short>(POLLOUT), 0};
    }
    bool moved = false, left = false;
    Status st = lanePass(lanes, &moved, &left);
    if (st.isOk() && !moved && left) {
      if (ready) {
        giveCore();
      } else if (word) {
        transport::futexWait(word, value, nfds || words > 1 ? 200 : kSleepMicros);
      } else if (nfds) {
        ::poll(fds, static_cast<nfds_t>(nfds), ctx_.deadline.remainingMillis(static_cast<int>(kSleepMicros / 1000)));
      } else {
        giveCore();
      }
    }
    for (const auto& a : armed) a.first->disarm(a.second);
    return st;
  }

  // A step may hand its connection the caller's memory only if nothing in the operation
  // writes those bytes while the transport may still read them, which it does until the
  // operation is flushed: no step of another channel (they run side by side) and no later
  // step of this one writes an overlapping range. Input and output alias when the call is
  // in place; comparing addresses covers that. Scratch is reused between steps and never
  // qualifies.
  //
  // A step of this channel that is over before the send starts cannot write while the
  // transport reads: one of an earlier phase, or one before it in a phase of one round
  // (runPhase runs such a step whole before the next; in more rounds the steps
  // interleave). Where a connection moves a message from the caller's memory to the
  // receiver's without a slot between them (maxMessageBytes above slotBytes: UCX's
  // rendezvous), such writers do not count, so a reduction's result goes out from where it
  // was written, as do the blocks of a recursive-doubling allgather: 4 ranks over UCX's
  // shared memory, 1 MiB, rabenseifner, two-shot and tree allreduce and that allgather took
  // 0.62-0.88 of the time. Elsewhere they still count: over tcp the kernel copies either
  // way, and rabenseifner at 2 ranks and 1 MiB took 1.2-1.4x as long; over shared memory
  // the receiver then reads the sender's memory, slower on some machines than a slot
  // (that allgather at 1 MiB, 1.4-1.6x as long; docs/performance.md).
  //
  // Over a memory transport a slot is already the receiver's memory: sending from the
  // caller's memory moves the one copy to the receiver, which then copies once instead of
  // twice (into the slot, out of it). That pays where the receiver's copy lands in its
  // destination and the sender had other copying to do, so that the work halves. Not:
  // - in operations that reduce (the receiver reduces from the slot, and a reduction
  //   forwards straight into the next slot);
  // - where this rank only sends (a gather's leaves, a one-way send): its copy into the
  //   slot ran beside the receiver's, and the receiver's read of the sender's memory is
  //   slower than a copy out of a slot in its cache (2 and 4 ranks, 1-16 MiB: 0.62-0.89x);
  // - for outputs large enough to be written with streaming stores, which the receiver's
  //   copy out of a slot uses and the kernel's copy does not (2 ranks, 64 MiB: 0.43-0.87x).
  bool directPays(const Connection* c) const {
    if (!c->sendsFromUser()) return false;
    return !c->inReceiverMemory() || (!reduces_ && !sendsOnly_ && !ctx_.streamOutput);
  }
  bool planSendsOnly() const {
    return std::all_of(plan_.steps.begin(), plan_.steps.end(), [](const Step& st) { return st.prim == Prim::kSend; });
  }
  bool scheduleReduces() const {
    for (const ChannelPlan& ch : s_.channels)
      for (const Step& st : ch.steps)
        if (st.prim == Prim::kRecvReduce || st.prim == Prim::kRecvReduceSend || st.prim == Prim::kRecvReduceCopySend ||
            st.prim == Prim::kLocalReduce)
          return true;
    return false;
  }
  void markDirectSends() {
    reduces_ = scheduleReduces();
    sendsOnly_ = planSendsOnly();
    bool any = false;
    for (const Step& st : plan_.steps) {
      const Region* r = sentRegion(st);
      Connection* c = st.peerOut >= 0 ? links_.sendTo[st.peerOut] : nullptr;
      if (r && c && r->buf != Buf::kScratch && directPays(c)) any = true;
    }
    if (!any) return;
    // Every written range of the operation, as sorted starts and sorted ends: the ranges
    // meeting [lo, hi) are those starting before hi less those ending at or before lo, so
    // each query costs two binary searches (a run of many ranks and channels has thousands
    // of steps, and this runs on every call).
    std::vector<uintptr_t>& starts = laneScratch().starts;
    std::vector<uintptr_t>& ends = laneScratch().ends;
    starts.clear();
    ends.clear();
    for (const ChannelPlan& ch : s_.channels) {
      for (const Step& st : ch.steps) {
        uintptr_t lo, hi;
        if (!writtenRange(st, &lo, &hi)) continue;
        starts.push_back(lo);
        ends.push_back(hi);
      }
    }
    std::sort(starts.begin(), starts.end());
    std::sort(ends.begin(), ends.end());
    EarlierWriters earlier(laneScratch().earlier);
    size_t phase = 0;  // of plan_.phases, the one holding step i
    for (size_t i = 0; i < plan_.steps.size(); ++i) {
      const Step& st = plan_.steps[i];
      while (phase + 1 < plan_.phases.size() && plan_.phases[phase + 1].firstStep <= i) ++phase;
      const Region* r = sentRegion(st);
      Connection* c = st.peerOut >= 0 ? links_.sendTo[st.peerOut] : nullptr;
      if (!r || !c || r->buf == Buf::kScratch || r->bytes == 0 || !directPays(c)) continue;
      const auto lo = reinterpret_cast<uintptr_t>(addr(*r, 0));
      const auto hi = lo + r->bytes;
      size_t meeting = static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(), hi) - starts.begin()) -
                       static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), lo) - ends.begin());
      // A forwarding step's own destination is the range it sends: not another writer.
      if (writesDst(st.prim) && st.dst.bytes > 0) --meeting;
      if (meeting > 0 && !s_.lanes && c->maxMessageBytes() > c->slotBytes()) {
        // The steps over before this one starts (lanes run in no fixed order: none).
        const Phase ph = plan_.phases.empty() ? Phase{0, plan_.steps.size(), plan_.rounds} : plan_.phases[phase];
        meeting -= earlier.meeting(*this, ph.rounds == 1 ? i : ph.firstStep, lo, hi);
      }
      if (meeting == 0) setDirect(i);
    }
  }

  // How many of this channel's first `over` steps write a range meeting [lo, hi).
  // markDirectSends asks with `over` increasing, and each step's range goes once into two
  // Fenwick trees (of starts and of ends, over the sorted addresses), so a channel of
  // thousands of steps costs O(steps log steps) per call.
  class EarlierWriters {
   public:
    explicit EarlierWriters(EarlierScratch& s) : s_(s) {}
    size_t meeting(const ChannelRunner& ex, size_t over, uintptr_t lo, uintptr_t hi) {
      if (!built_) build(ex);
      for (; added_ < over; ++added_) {
        uintptr_t wlo, whi;
        if (!ex.writtenRange(ex.plan_.steps[added_], &wlo, &whi)) continue;
        bump(s_.starts, indexOf(wlo));
        bump(s_.ends, indexOf(whi));
      }
      // Those starting before hi, less those ending at or before lo.
      const auto beforeHi = static_cast<size_t>(std::lower_bound(s_.at.begin(), s_.at.end(), hi) - s_.at.begin());
      const auto uptoLo = static_cast<size_t>(std::upper_bound(s_.at.begin(), s_.at.end(), lo) - s_.at.begin());
      return sum(s_.starts, beforeHi) - sum(s_.ends, uptoLo);
    }

   private:
    void build(const ChannelRunner& ex) {
      built_ = true;
      s_.at.clear();
      for (const Step& st : ex.plan_.steps) {
        uintptr_t wlo, whi;
        if (!ex.writtenRange(st, &wlo, &whi)) continue;
        s_.at.push_back(wlo);
        s_.at.push_back(whi);
      }
      std::sort(s_.at.begin(), s_.at.end());
      s_.at.erase(std::unique(s_.at.begin(), s_.at.end()), s_.at.end());
      s_.starts.assign(s_.at.size() + 1, 0);
      s_.ends.assign(s_.at.size() + 1, 0);
    }
    size_t indexOf(uintptr_t a) const {
      return static_cast<size_t>(std::lower_bound(s_.at.begin(), s_.at.end(), a) - s_.at.begin());
    }
    // Fenwick tree over positions 0..n-1 (stored 1-based): add one at k; the sum below k.
    static void bump(std::vector<uint32_t>& t, size_t k) {
      for (size_t j = k + 1; j < t.size(); j += j & (~j + 1)) ++t[j];
    }
    static size_t sum(const std::vector<uint32_t>& t, size_t k) {
      size_t n = 0;
      for (size_t j = k; j > 0; j -= j & (~j + 1)) n += t[j];
      return n;
    }
    EarlierScratch& s_;
    bool built_ = false;
    size_t added_ = 0;
  };
  // The bytes `st` writes, as markDirectSends counts them: none for a copy onto itself (an
  // in-place call's own block, which runSlice skips).
  bool writtenRange(const Step& st, uintptr_t* lo, uintptr_t* hi) const {
    if (!writesDst(st.prim) || st.dst.bytes == 0) return false;
    if (st.prim == Prim::kCopy && addr(st.dst, 0) == addr(st.src, 0)) return false;
    *lo = reinterpret_cast<uintptr_t>(addr(st.dst, 0));
    *hi = *lo + st.dst.bytes;
    return true;
  }
  static bool sameBuffers(const Buffers& a, const Buffers& b) {
    return a.input == b.input && a.output == b.output && a.scratch == b.scratch && a.extra == b.extra;
  }
  // Which steps send from the caller's memory (markDirectSends): a bit per step, the first
  // 64 without an allocation.
  bool isDirect(size_t i) const { return i < 64 ? (directBits_ >> i) & 1 : i < directMore_.size() && directMore_[i]; }
  void setDirect(size_t i) {
    if (i < 64) {
      directBits_ |= uint64_t{1} << i;
      return;
    }
    if (directMore_.size() < plan_.steps.size()) directMore_.assign(plan_.steps.size(), false);
    directMore_[i] = true;
  }


  void addActive(Connection* c) {
    if (std::find(active_.begin(), active_.end(), c) == active_.end()) active_.push_back(c);
  }

  Status checkLinks(const Step& st) {
    bool needIn = st.prim != Prim::kSend && st.prim != Prim::kCopy && st.prim != Prim::kLocalReduce;
    bool needOut = st.prim == Prim::kSend || st.prim == Prim::kRecvReduceSend ||
                   st.prim == Prim::kRecvReduceCopySend || st.prim == Prim::kRecvCopySend;
    if (needIn && !links_.recvFrom[st.peerIn])
      return internalError(std::string("no connection from rank ") + std::to_string(st.peerIn) + " for " + primName(st.prim));
    if (needOut && !links_.sendTo[st.peerOut])
      return internalError(std::string("no connection to rank ") + std::to_string(st.peerOut) + " for " + primName(st.prim));
    return Status::ok();
  }

  char* addr(const Region& r, size_t off) const {
    char* base = r.buf == Buf::kInput     ? const_cast<char*>(static_cast<const char*>(b_.input))
                 : r.buf == Buf::kOutput  ? static_cast<char*>(b_.output)
                 : r.buf == Buf::kScratch ? static_cast<char*>(b_.scratch)
                                          : static_cast<char*>(b_.extra[static_cast<size_t>(r.buf) -
                                                                        static_cast<size_t>(Buf::kExtra0)]);
    return base + r.offset + off;
  }

  // Stores a slice of the final result.
  void writeOut(void* dst, const void* src, size_t bytes) {
    if (ctx_.streamOutput) reduce::copyStreaming(dst, src, bytes);
    else copyBytes(dst, src, bytes);
  }

  void reduceInto(void* dst, const void* a, const void* b, size_t bytes) {
    reduce::reduce2(s_.dtype, s_.op, dst, a, b, bytes / es_);
  }

  // runSlice through RunContext::mover: slots and the caller's buffers are touched only by
  // it, one call per slice, both destinations of a forwarding step in one pass.
  Status runSliceMoved(const Step& st, size_t off, size_t len) {
    DataMover& m = *ctx_.mover;
    const DataType t = s_.dtype;
    const ReduceOp op = s_.op;
    Slot in, out;
    switch (st.prim) {
      case Prim::kSend: {
        BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
        BRAID_RETURN_IF_ERROR(m.reduceCopy(outgoing(st.peerOut, out), nullptr, addr(st.src, off), nullptr, len, t, op));
        return postMoved(st.peerOut, out, len);
      }
      case Prim::kRecv: {
        BRAID_RETURN_IF_ERROR(receive(st.peerIn, &in, len));
        BRAID_ASSIGN_OR_RETURN(const void* p, incoming(st.peerIn, in));
        BRAID_RETURN_IF_ERROR(m.reduceCopy(addr(st.dst, off), nullptr, p, nullptr, len, t, op));
        return release(st.peerIn, in);
      }
      case Prim::kRecvReduce: {
        BRAID_RETURN_IF_ERROR(receive(st.peerIn, &in, len));
        BRAID_ASSIGN_OR_RETURN(const void* p, incoming(st.peerIn, in));
        BRAID_RETURN_IF_ERROR(m.reduceCopy(addr(st.dst, off), nullptr, p, addr(st.src, off), len, t, op));
        return release(st.peerIn, in);
      }
      case Prim::kRecvReduceSend:
      case Prim::kRecvReduceCopySend:
      case Prim::kRecvCopySend: {
        BRAID_RETURN_IF_ERROR(receive(st.peerIn, &in, len));
        BRAID_ASSIGN_OR_RETURN(const void* p, incoming(st.peerIn, in));
        BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
        void* second = st.prim == Prim::kRecvReduceSend ? nullptr : addr(st.dst, off);
        const void* local = st.prim == Prim::kRecvCopySend ? nullptr : addr(st.src, off);
        BRAID_RETURN_IF_ERROR(m.reduceCopy(outgoing(st.peerOut, out), second, p, local, len, t, op));
        BRAID_RETURN_IF_ERROR(postMoved(st.peerOut, out, len));
        return release(st.peerIn, in);
      }
      case Prim::kCopy: {
        char* d = addr(st.dst, off);
        const char* sp = addr(st.src, off);
        return d == sp ? Status::ok() : m.reduceCopy(d, nullptr, sp, nullptr, len, t, op);
      }
      case Prim::kLocalReduce: {
        char* d = addr(st.dst, off);
        return m.reduceCopy(d, nullptr, addr(st.src, off), d, len, t, op);
      }
    }
    return internalError("unknown primitive");
  }

  // Through the mover, a slot's payload is in the connection's device area where it has one
  // (Connection::deviceData), else in the slot itself (registered host memory).
  void* outgoing(int peer, const Slot& out) const {
    void* d = links_.sendTo[peer]->deviceData(out);
    return d ? d : out.data;
  }
  Status postMoved(int peer, Slot& out, size_t len) {
    Connection* c = links_.sendTo[peer];
    if (!c->deviceData(out)) return post(peer, out, len);
    out.tag = ctx_.tag;
    return c->postSendDevice(out, len);
  }
  // A payload a NIC wrote into this rank's device area (GPUDirect RDMA) is made visible to
  // the kernel that reads it first.
  StatusOr<const void*> incoming(int peer, const Slot& in) const {
    if (!in.device) return static_cast<const void*>(in.data);
    Connection* c = links_.recvFrom[peer];
    const void* d = c->deviceData(in);
    if (!d) return internalError("a message from rank " + std::to_string(peer) + " in device slots this connection lacks");
    if (c->deviceAreaKind() == Connection::DeviceAreaKind::kRegistered)
      BRAID_RETURN_IF_ERROR(ctx_.mover->flushRemoteWrites());
    return d;
  }

  // `direct`: the step's connection sends this step's bytes from the caller's memory
  // (markDirectSends). Receives that only store or forward ask to land in the destination.
  Status runSlice(const Step& st, bool direct, size_t off, size_t len) {
    if (ctx_.mover) return runSliceMoved(st, off, len);
    Slot in, out;
    switch (st.prim) {
      case Prim::kSend: {
        BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
        return sendCopy(st.peerOut, out, addr(st.src, off), len, direct);
      }
      case Prim::kRecv: {
        char* d = addr(st.dst, off);
        BRAID_RETURN_IF_ERROR(receive(st.peerIn, &in, len, d));
        if (in.data != d) writeOut(d, in.data, len);
        return release(st.peerIn, in);
      }
      case Prim::kRecvReduce: {
        char* d = addr(st.dst, off);
        const char* sp = addr(st.src, off);
        BRAID_RETURN_IF_ERROR(receiveReduce(st.peerIn, &in, len, d, sp));
        if (in.data != d) reduceInto(d, in.data, sp, len);
        return release(st.peerIn, in);
      }
      case Prim::kRecvReduceSend: {
        const char* sp = addr(st.src, off);
        if (reservedNow(st.peerIn, st.peerOut, &out)) {
          // The next peer's slot is already free: the payload is reduced into it as it
          // arrives, where the transport can.
          BRAID_RETURN_IF_ERROR(receiveReduce(st.peerIn, &in, len, out.data, sp));
          if (in.data != out.data) reduceInto(out.data, in.data, sp, len);
        } else {
          BRAID_RETURN_IF_ERROR(receive(st.peerIn, &in, len));
          BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
          reduceInto(out.data, in.data, sp, len);
        }
        BRAID_RETURN_IF_ERROR(post(st.peerOut, out, len));
        return release(st.peerIn, in);
      }
      case Prim::kRecvReduceCopySend: {
        if (direct) {
          // Reduce into the output (as the payload arrives, where the transport can) and
          // send the result from there.
          char* d = addr(st.dst, off);
          const char* sp = addr(st.src, off);
          BRAID_RETURN_IF_ERROR(receiveReduce(st.peerIn, &in, len, d, sp));
          if (in.data != d) reduceInto(d, in.data, sp, len);
          BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
          BRAID_RETURN_IF_ERROR(postFrom(st.peerOut, out, d, len));
          return release(st.peerIn, in);
        }
        BRAID_RETURN_IF_ERROR(receive(st.peerIn, &in, len));
        BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
        // Reduce into the peer's slot, then copy that piece to the output while it is still
        // in L1: the inputs are read once and both destinations written once.
        char* o = static_cast<char*>(out.data);
        const char* i = static_cast<const char*>(in.data);
        const char* sp = addr(st.src, off);
        char* d = addr(st.dst, off);
        for (size_t k = 0; k < len; k += kFuseBytes) {
          size_t piece = std::min(kFuseBytes, len - k);
          reduceInto(o + k, i + k, sp + k, piece);
          writeOut(d + k, o + k, piece);
        }
        BRAID_RETURN_IF_ERROR(post(st.peerOut, out, len));
        return release(st.peerIn, in);
      }
      case Prim::kRecvCopySend: {
        char* d = addr(st.dst, off);
        BRAID_RETURN_IF_ERROR(receive(st.peerIn, &in, len, d));
        const bool landed = in.data == d;
        if (landed || direct) {
          if (!landed) writeOut(d, in.data, len);
          BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
          BRAID_RETURN_IF_ERROR(sendCopy(st.peerOut, out, d, len, direct));
          return release(st.peerIn, in);
        }
        BRAID_RETURN_IF_ERROR(reserve(st.peerOut, &out));
        for (size_t k = 0; k < len; k += kFuseBytes) {
          size_t piece = std::min(kFuseBytes, len - k);
          copyBytes(static_cast<char*>(out.data) + k, static_cast<const char*>(in.data) + k, piece);
          writeOut(addr(st.dst, off) + k, static_cast<const char*>(in.data) + k, piece);
        }
        BRAID_RETURN_IF_ERROR(post(st.peerOut, out, len));
        return release(st.peerIn, in);
      }
      case Prim::kCopy: {
        char* d = addr(st.dst, off);
        const char* sp = addr(st.src, off);
        if (d == sp) return Status::ok();
        if (st.finalOut) writeOut(d, sp, len);
        else reduce::copy(d, sp, len);
        return Status::ok();
      }
      case Prim::kLocalReduce: {
        char* d = addr(st.dst, off);
        reduceInto(d, addr(st.src, off), d, len);
        return Status::ok();
      }
    }
    return internalError("unknown primitive");
  }

  // Sends `len` bytes at `src` as the next message to `peer`, whose slot `out` is reserved:
  // from `src` itself where the step may (direct), else through the slot, or, for a message
  // larger than a slot (whole blocks), through a copy this run keeps until it is flushed.
  Status sendCopy(int peer, Slot& out, const void* src, size_t len, bool direct) {
    if (direct) return postFrom(peer, out, src, len);
    if (!whole_ || len <= links_.sendTo[peer]->slotBytes()) {
      copyBytes(out.data, src, len);
      return post(peer, out, len);
    }
    bounce_.emplace_back(new char[len]);
    copyBytes(bounce_.back().get(), src, len);
    return postFrom(peer, out, bounce_.back().get(), len);
  }

  // A receive whose payload is to be reduced with `local` into `dst`: on a connection that
  // reduces on arrival (UCX over tcp), handed to the transport with the receive, which then
  // returns slot->data == dst once done; elsewhere an ordinary receive into a slot.
  Status receiveReduce(int peer, Slot* slot, size_t len, void* dst, const void* local) {
    Connection* c = links_.recvFrom[peer];
    if (!c->reducesOnArrival()) return receive(peer, slot, len);
    arrival_.local = local;
    askReduce_ = &arrival_;
    Status st = receive(peer, slot, len, dst);
    askReduce_ = nullptr;
    return st;
  }
  // Reserves the slot to `peerOut` when one is free right now and the receive from `peerIn`
  // reduces on arrival (the slot is then the reduction's destination); else false, and the
  // step reserves after its receive, as everywhere else.
  bool reservedNow(int peerIn, int peerOut, Slot* out) {
    if (!links_.recvFrom[peerIn]->reducesOnArrival()) return false;
    Connection* c = links_.sendTo[peerOut];
    return c->reserveSend(out).isOk() && !c->deviceData(*out);
  }
  // The executor's reduction, for a transport to apply as a payload arrives.
  static void reduceArrived(void* ctx, void* dst, const void* payload, const void* local, size_t bytes) {
    auto* self = static_cast<ChannelRunner*>(ctx);
    self->reduceInto(dst, payload, local, bytes);
  }

  // `landing`: where the payload should go if the transport can put it there (zero copy).
  Status receive(int peer, Slot* slot, size_t expectBytes, void* landing = nullptr) {
    Connection* c = links_.recvFrom[peer];
    BRAID_RETURN_IF_ERROR(waitFor(c, /*forSend=*/false, slot, landing, expectBytes));
    if (whole_ && expectBytes > c->slotBytes() && slot->data != landing) {
      return internalError("a message of " + std::to_string(expectBytes) + " bytes from rank " + std::to_string(peer) +
                           " did not land where it was asked to (larger than a slot)");
    }
    if ((slot->tag ^ ctx_.tag) & c->tagMask()) return mismatchWith(peer, slot->tag, c->tagMask());
    if (slot->device && !ctx_.mover) {
      return Status(Code::kInvalidArgument,
                    "collective mismatch: rank " + std::to_string(peer) + " sent " + describeTag(slot->tag) +
                        " from device buffers where rank " + std::to_string(ctx_.rank) +
                        " runs it on host buffers; every rank of a call must pass the same kind of memory "
                        "when BRAID_CUDA_PATH=ipc",
                    peer);
    }
    if (slot->bytes != expectBytes) {
      return Status(Code::kInvalidArgument,
                    "collective mismatch: rank " + std::to_string(peer) + " sent a slice of " +
                        std::to_string(slot->bytes) + " bytes where rank " + std::to_string(ctx_.rank) +
                        " expected " + std::to_string(expectBytes) + " (different counts?)",
                    peer);
    }
    return Status::ok();
  }

  Status mismatchWith(int peer, uint64_t peerTag, uint64_t mask) {
    // Bits the transport does not carry (UCX keeps 10 of the sequence number's) are taken
    // from RunContext::mismatchFill: this operation's tag (for a point-to-point call, the
    // next collective's sequence number), the nearest operation with the bits the peer sent.
    if (ctx_.mismatchTag) *ctx_.mismatchTag = (peerTag & mask) | (ctx_.mismatchFill & ~mask);
    return Status(Code::kInvalidArgument,
                  "collective mismatch: rank " + std::to_string(peer) + " sent " + describeTag(peerTag) +
                      " while rank " + std::to_string(ctx_.rank) + " runs " + describeTag(ctx_.tag) +
                      "; every rank must issue the same collectives, with the same count, type, op "
                      "and root, in the same order",
                  peer);
  }

  // A long wait looks at every incoming connection this thread owns: a slot of this very
  // operation (same sequence number) with another shape means a peer issued another call,
  // perhaps over the other connection set, where nobody here would ever read it.
  Status scanForeign() {
    auto scan = [&](const ChannelLinks& l) -> Status {
      for (size_t p = 0; p < l.recvFrom.size(); ++p) {
        Connection* c = l.recvFrom[p];
        if (!c) continue;
        // A look that commits nothing: the message may be a whole block that only the
        // receive of its own step can take. A connection that fails here (a peer that left
        // cleanly closes its sockets) is left to the health check and the waits that use it.
        uint64_t tag = 0;
        if (!c->peekTag(&tag).isOk()) continue;
        const uint64_t mask = c->tagMask();
        const uint64_t diff = (tag ^ ctx_.tag) & mask;
        if ((diff >> 32) == 0 && (diff & 0xffffffffu) != 0) return mismatchWith(static_cast<int>(p), tag, mask);
      }
      return Status::ok();
    };
    BRAID_RETURN_IF_ERROR(scan(links_));
    return ctx_.otherLinks ? scan(*ctx_.otherLinks) : Status::ok();
  }

  Status release(int peer, const Slot& slot) { return links_.recvFrom[peer]->releaseRecv(slot); }

  Status reserve(int peer, Slot* slot) { return waitFor(links_.sendTo[peer], /*forSend=*/true, slot); }

  Status post(int peer, Slot& slot, size_t len) {
    slot.tag = ctx_.tag;
    Connection* c = links_.sendTo[peer];
    BRAID_RETURN_IF_ERROR(c->postSend(slot, len));
    // Push it out now on stream transports; a no-op on memory transports.
    return c->progress();
  }

  Status postFrom(int peer, Slot& slot, const void* src, size_t len) {
    slot.tag = ctx_.tag;
    Connection* c = links_.sendTo[peer];
    BRAID_RETURN_IF_ERROR(c->postSendFrom(slot, src, len));
    return c->progress();
  }

  Status progressAll() {
    for (Connection* c : active_) BRAID_RETURN_IF_ERROR(c->progress());
    return Status::ok();
  }

  // Checks abort flag, deadline and (rarely) peer health. `peer` names whom we wait for.
  Status checkAlive(int peer, const char* what, int64_t now) {
    if (ctx_.abortFlag && ctx_.abortFlag->load(std::memory_order_relaxed))
      return Status(Code::kAborted, "communicator aborted");
    if (ctx_.deadline.expired()) {
      return Status(Code::kTimeout,
                    std::string("timed out waiting to ") + what + " rank " + std::to_string(peer) +
                        " (rank " + std::to_string(ctx_.rank) + ", " + s_.algorithm +
                        "); raise BRAID_TIMEOUT if the peer is merely slow",
                    peer);
    }
    if (ctx_.hooks && now >= nextHealthNs_) {
      nextHealthNs_ = now + kHealthPeriodNs;
      if (ctx_.waitNote && !noted_ && peer >= 0) {
        ctx_.waitNote->what.store(what[0] == 'r' ? 0 : what[0] == 's' ? 1 : 2, std::memory_order_relaxed);
        ctx_.waitNote->sinceNs.store(waitStartNs_, std::memory_order_relaxed);
        ctx_.waitNote->peer.store(peer, std::memory_order_release);
        noted_ = true;
      }
      BRAID_RETURN_IF_ERROR(ctx_.hooks->healthCheck(ctx_.deadline));
      if (waitStartNs_ && now - waitStartNs_ >= kLongWaitNs) {
        if (!longWaitSeen_) ctx_.hooks->longWait();
        longWaitSeen_ = true;
        BRAID_RETURN_IF_ERROR(scanForeign());
      }
    }
    return Status::ok();
  }

  Status tryOnce(Connection* c, bool forSend, Slot* slot, void* landing, size_t bytes) {
    if (forSend) return c->reserveSend(slot);
    if (askReduce_) return c->peekRecvReduce(slot, landing, bytes, *askReduce_);
    return landing ? c->peekRecvInto(slot, landing, bytes) : c->peekRecv(slot);
  }

  Status waitFor(Connection* c, bool forSend, Slot* slot, void* landing = nullptr, size_t bytes = 0) {
    auto attempt = [&]() { return tryOnce(c, forSend, slot, landing, bytes); };
    Status st = attempt();
    if (st.code() != Code::kWouldBlock || nonBlocking_) return st;
    if (timeline::on()) {
      // The wait as a span when it lasted long enough to matter.
      const int64_t t0 = timeline::nowUs();
      st = waitLoop(c, forSend, slot, landing, bytes);
      const int64_t dur = timeline::nowUs() - t0;
      if (dur >= timeline::kMinWaitUs) {
        timeline::span(std::string(forSend ? "wait to send to rank " : "wait for rank ") + std::to_string(c->peer()),
                       "wait", t0, dur, channel_, "\"peer\": " + std::to_string(c->peer()));
      }
      return st;
    }
    return waitLoop(c, forSend, slot, landing, bytes);
  }

  // Clears the wait note, when one was written, as the wait it describes ends.
  struct NoteGuard {
    ChannelRunner* r;
    ~NoteGuard() { clear(); }
    void clear() {
      if (r->noted_) {
        r->ctx_.waitNote->peer.store(-1, std::memory_order_release);
        r->noted_ = false;
      }
    }
  };

  // The phases of a wait that began at `start` (waitLoop, runLanes): it spins until
  // `spinEnd`, yields until `yieldEnd`, then sleeps. While yields are paused (a busy process
  // keeps taking the core, common/core_yield.h) it goes from spinning to sleeping.
  struct Phases {
    int64_t spinEnd = 0, yieldEnd = 0;
    int at(int64_t now) const { return now < spinEnd ? 0 : now < yieldEnd && !yieldsPaused(now) ? 1 : 2; }
  };
  // Begins a wait at `start`: its phases, and the health check's first turn.
  Phases beginWait(int64_t start) {
    waitStartNs_ = start;
    if (nextHealthNs_ == 0) nextHealthNs_ = start + kHealthPeriodNs;
    Phases p;
    p.spinEnd = start + int64_t{ctx_.wait.spinMicros} * 1000;
    p.yieldEnd = p.spinEnd + int64_t{ctx_.wait.yieldMicros} * 1000;
    return p;
  }
  // Gives the core up once where a wait has nothing to sleep on.
  void giveCore() const {
    if (ctx_.wait.pauseYields) yieldOrNap();
    else sched_yield();
  }

  // Spins or yields once in phase 0 or 1; false in phase 2, where the caller sleeps its way.
  // A yield that lost the core for a slice moves the wait on to phase 2 (common/core_yield.h):
  // a busy process beside it would take the core again at each of its next yields. The loss
  // is noted too: always under a policy that pauses yields, and where ranks share cores while
  // the CPUs are busy with something other than the job.
  bool relax(int& phase) const {
    if (phase == 0) {
      cpuRelax();
    } else if (phase == 1 && !(ctx_.wait.pauseYields ? yieldCore() : yieldShared())) {
      phase = 2;
    }
    return phase < 2;
  }

  Status waitLoop(Connection* c, bool forSend, Slot* slot, void* landing, size_t bytes) {
    NoteGuard guard{this};
    auto attempt = [&]() { return tryOnce(c, forSend, slot, landing, bytes); };
    Status st;
    if (ctx_.wait.spinMicros > 0) {
      // A peer a little behind (every small collective) is met here, before the clock is
      // read; the spin window then starts these few tries late.
      for (int i = 0; i < kSpinsBeforeClock; ++i) {
        BRAID_RETURN_IF_ERROR(progressAll());
        st = attempt();
        if (st.code() != Code::kWouldBlock) return st;
        cpuRelax();
      }
    }
    const char* what = forSend ? "send to" : "receive from";
    const int64_t start = nowNanos();
    const Phases phases = beginWait(start);
    // 0 spin, 1 yield, 2 sleep. Decided now, not after the first 32 tries: with more ranks
    // than cores (no spinning), a wait that spun before its first yield kept the core from
    // the very rank it waits for.
    int phase = phases.at(start);
    for (uint32_t iter = 1;; ++iter) {
      BRAID_RETURN_IF_ERROR(progressAll());
      st = attempt();
      if (st.code() != Code::kWouldBlock) return st;
      if (phase == 2 || (iter & 31) == 0) {
        int64_t now = nowNanos();
        BRAID_RETURN_IF_ERROR(checkAlive(c->peer(), what, now));
        phase = phases.at(now);
      }
      if (!relax(phase)) {
        st = sleepOn(c, forSend, slot, landing, bytes);
        if (st.code() != Code::kWouldBlock) return st;
      }
    }
  }

  // Sleeps until `c` may be ready (futex or poll), bounded by kSleepMicros.
  Status sleepOn(Connection* c, bool forSend, Slot* slot, void* landing, size_t bytes) {
    WaitHandle h = c->waitHandle(forSend);
    // Re-check after arming: a peer that progressed before we armed will not wake us.
    Status st = tryOnce(c, forSend, slot, landing, bytes);
    if (st.code() != Code::kWouldBlock) {
      c->disarm(forSend);
      return st;
    }
    pollfd fds[16];
    int nfds = 0;
    if (h.fd >= 0) fds[nfds++] = {h.fd, h.fdEvents, 0};
    // Other stream connections with staged output must keep draining while we sleep.
    for (Connection* other : active_) {
      if (other == c || other->inReceiverMemory() || other->flushed() || nfds == 16) continue;
      WaitHandle oh = other->waitHandle(true);
      if (oh.fd >= 0) fds[nfds++] = {oh.fd, oh.fdEvents ? oh.fdEvents : static_cast<short>(POLLOUT), 0};
    }
    if (h.futexWord) {
      transport::futexWait(h.futexWord, h.futexValue, nfds ? 200 : kSleepMicros);
    } else if (nfds) {
      int timeoutMs = ctx_.deadline.remainingMillis(static_cast<int>(kSleepMicros / 1000));
      ::poll(fds, static_cast<nfds_t>(nfds), timeoutMs);
    } else {
      giveCore();
    }
    c->disarm(forSend);
    return Status(Code::kWouldBlock, "");
  }

  Status flushAll() {
    // Memory transports are flushed unless the receiver has yet to read a message sent from
    // the caller's memory; stream transports while they hold staged bytes, UCX while a
    // message is not taken (a rendezvous the receiver has yet to read).
    bool flushed = true;
    for (Connection* c : active_) flushed &= c->flushed();
    if (flushed) return Status::ok();
    NoteGuard guard{this};
    const int64_t start = nowNanos();
    // Every flush goes through the spin, yield and sleep phases of any other wait: a futex
    // for a memory transport's receiver, the wait handles of the others (sockets, UCX's
    // event fd). Polling those from the 65th try on, as flushes once did, slept while
    // ranks outnumbered cores instead of yielding to the peer that was to read: UCX over
    // shared memory, 4 ranks on 2 cores, allgather at 64 KiB and 1 MiB 1.19x and 1.43x the
    // busbw with the phases, braid's tcp within the noise (docs/performance.md, "Flushes
    // wait in phases").
    const Phases phases = beginWait(start);
    int phase = phases.at(start);
    for (uint32_t iter = 1;; ++iter) {
      BRAID_RETURN_IF_ERROR(progressAll());
      bool done = true;
      pollfd fds[16];
      int nfds = 0;
      int waitingOn = -1;
      Connection* onFutex = nullptr;  // a memory transport whose receiver has yet to read
      for (Connection* c : active_) {
        if (c->flushed()) continue;
        done = false;
        waitingOn = c->peer();
        if (c->inReceiverMemory()) {
          if (!onFutex) onFutex = c;
          continue;
        }
        if (phase < 2) continue;
        WaitHandle h = c->waitHandle(true);
        if (h.fd >= 0 && nfds < 16) fds[nfds++] = {h.fd, h.fdEvents ? h.fdEvents : static_cast<short>(POLLOUT), 0};
      }
      if (done) return Status::ok();
      if (phase == 2 || (iter & 31) == 0) {
        const int64_t now = nowNanos();
        BRAID_RETURN_IF_ERROR(checkAlive(waitingOn, "flush data to", now));
        phase = phases.at(now);
      }
      if (relax(phase)) continue;
      if (onFutex) {
        const WaitHandle futex = onFutex->waitHandle(true);
        // Armed, then checked again: a release before the arming would wake nobody.
        if (futex.futexWord && !onFutex->flushed())
          transport::futexWait(futex.futexWord, futex.futexValue, nfds ? 200 : kSleepMicros);
        onFutex->disarm(true);
      } else if (nfds) {
        ::poll(fds, static_cast<nfds_t>(nfds), 1);
      } else {
        giveCore();
      }
    }
  }

  const Schedule& s_;
  const ChannelPlan& plan_;
  const Buffers& b_;
  const ChannelLinks& links_;
  const RunContext& ctx_;
  size_t es_;
  size_t sliceBytes_;
  bool whole_ = false;  // slices of a wholeBlocks schedule above a slot (RunContext::wholeBlockBytes)
  // Receives are announced to their connections ahead (announce), where one of them acts on
  // it; not through a DataMover, whose receives never land in the caller's memory.
  bool announces_ = false;
  bool acks_ = false;   // this channel sends and receives the schedule's acknowledgements
  // The reduction a receive hands its transport (receiveReduce), and set only while it waits.
  transport::ArrivalReduce arrival_;
  const transport::ArrivalReduce* askReduce_ = nullptr;
  // Copies that large messages of non-direct steps are sent from (sendCopy).
  std::vector<std::unique_ptr<char[]>> bounce_;
  // A handful of connections in practice; a small inline array keeps a small collective
  // free of heap allocations.
  class ConnList {
   public:
    void push_back(Connection* c) {
      if (n_ < kInline) {
        inline_[n_] = c;
      } else {
        if (n_ == kInline) heap_.assign(inline_, inline_ + kInline);
        heap_.push_back(c);
      }
      ++n_;
    }
    Connection* const* begin() const { return n_ <= kInline ? inline_ : heap_.data(); }
    Connection* const* end() const { return begin() + n_; }

   private:
    static constexpr size_t kInline = 8;
    Connection* inline_[kInline] = {};
    std::vector<Connection*> heap_;
    size_t n_ = 0;
  };
  ConnList active_;
  int channel_;
  const ChannelSetup* setup_;  // prepareChannel's, or null
  uint64_t directBits_ = 0;        // isDirect of steps 0-63
  std::vector<bool> directMore_;   // of the others, when some of them is
  bool reduces_ = false;          // some step of the operation reduces (markDirectSends)
  bool sendsOnly_ = false;        // this channel's steps only send
  int64_t nextHealthNs_ = 0;
  int64_t waitStartNs_ = 0;    // when the current wait began
  bool longWaitSeen_ = false;  // RunHooks::longWait was called
  bool noted_ = false;         // the current wait is in ctx_.waitNote
  bool nonBlocking_ = false;   // runLanes: waitFor returns kWouldBlock rather than wait
  bool receivesOverSends_ = false;  // runLanes: a receive may overwrite what a send is to send
};

}  // namespace

ChannelSetup prepareChannel(const Schedule& schedule, int channel, const ChannelLinks& links,
                            const RunContext& ctx) {
  ChannelSetup out;
  if (channel < 0 || channel >= static_cast<int>(schedule.channels.size())) {
    out.links = internalError("channel out of range");
    return out;
  }
  // No buffers: nothing the setup works out depends on their addresses (markDirectSends,
  // which does, runs on every call where userSends says it must).
  const Buffers none;
  RunContext plain = ctx;
  plain.mover = nullptr;
  ChannelRunner runner(schedule, channel, none, links, plain);
  return runner.workedOut();
}

Status runChannel(const Schedule& schedule, int channel, const Buffers& buffers,
                  const ChannelLinks& links, const RunContext& ctx, const ChannelSetup* setup) {
  if (channel < 0 || channel >= static_cast<int>(schedule.channels.size()))
    return internalError("channel out of range");
  ChannelRunner runner(schedule, channel, buffers, links, ctx, ctx.mover ? nullptr : setup);
  BRAID_RETURN_IF_ERROR(runner.run());
  if (schedule.divisor > 1 && channel < static_cast<int>(schedule.divideRanges.size())) {
    for (const Region& r : schedule.divideRanges[channel]) {
      char* base = static_cast<char*>(buffers.output) + r.offset;
      if (ctx.mover) {
        BRAID_RETURN_IF_ERROR(ctx.mover->divide(base, r.bytes, schedule.dtype, schedule.divisor));
        continue;
      }
      reduce::divideInPlace(schedule.dtype, base, r.bytes / dataTypeSize(schedule.dtype), schedule.divisor);
    }
  }
  return Status::ok();
}

}  // namespace braid::exec

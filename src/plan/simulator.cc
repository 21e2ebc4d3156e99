#include "plan/simulator.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <string>
#include <unordered_map>

#include "plan/planner.h"

namespace braid::plan {

using exec::Prim;
using exec::Step;

namespace {

bool needsIn(Prim p) { return p != Prim::kSend && p != Prim::kCopy && p != Prim::kLocalReduce; }
bool needsOut(Prim p) {
  return p == Prim::kSend || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend || p == Prim::kRecvCopySend;
}

// One direction of one connection: a FIFO of `slots` slots, as time stamps.
struct Conn {
  int slots = 2;
  bool inter = false;
  int srcHost = 0, dstHost = 0;
  std::vector<double> arrive;    // per slot: when the slice in it arrives
  std::vector<size_t> bytes;     // per slot: its size
  std::vector<double> release;   // per slot: when the receiver freed it
  uint64_t posted = 0, consumed = 0;
  double linkFree = 0;
  int reader = -1, writer = -1;  // agents blocked on this connection
};

// One executor thread: a rank's channel.
struct Agent {
  int rank = 0;
  const exec::ChannelPlan* plan = nullptr;
  size_t es = 1;
  size_t slice = 0;
  std::vector<exec::Phase> phases;
  std::vector<int> inConn, outConn;  // per step
  size_t phase = 0, step = 0, off = 0, hi = 0;
  int round = 0;
  bool done = false;
  bool started = false;
  // exec::stepsAhead: the plan's leading steps that run ahead of the round before; whether
  // those of round+1 are running now; whether the current round has passed the point where
  // they would; whether its own already ran.
  size_t lead = 0;
  bool ahead = false, aheadChecked = false, leadDone = false;
  double clock = 0;
};

class Sim {
 public:
  Sim(const std::vector<exec::Schedule>& s, const Machine& m, const SimOptions& o) : s_(s), m_(m), opts_(o) {}

  StatusOr<SimResult> run() {
    const int n = m_.nranks();
    if (static_cast<int>(s_.size()) != n)
      return invalidArgument("simulate: " + std::to_string(s_.size()) + " schedules for " + std::to_string(n) + " ranks");
    chooseResolution();
    egress_.assign(static_cast<size_t>(m_.nhosts()), 0);
    ingress_.assign(static_cast<size_t>(m_.nhosts()), 0);
    for (int r = 0; r < n; ++r) {
      const exec::Schedule& sc = s_[r];
      for (size_t c = 0; c < sc.channels.size(); ++c) {
        Agent a;
        a.rank = r;
        a.plan = &sc.channels[c];
        a.es = dataTypeSize(sc.dtype);
        size_t sl = sc.connectionSet == 1 ? meshSlice_ : ringSlice_;
        a.slice = std::max(a.es, sl / a.es * a.es);
        a.phases = a.plan->phases;
        if (a.phases.empty()) a.phases.push_back(exec::Phase{0, a.plan->steps.size(), a.plan->rounds});
        for (exec::Phase& ph : a.phases) ph.rounds = coarseRounds(ph.rounds);
        // exec::stepsAhead with the simulated slices and rounds (scaled together, so each
        // part takes as many slices as it would); 0 for a plan of phases.
        a.lead = exec::stepsAhead(*a.plan, static_cast<size_t>(std::max(1, a.phases[0].rounds)), a.slice, a.es,
                                  sc.connectionSet == 1 ? meshSlots_ : ringSlots_);
        for (const Step& st : a.plan->steps) {
          const int set = sc.connectionSet;
          const int ch = set == 1 ? 0 : static_cast<int>(c);
          a.inConn.push_back(needsIn(st.prim) ? connFor(set, ch, st.peerIn, r) : -1);
          a.outConn.push_back(needsOut(st.prim) ? connFor(set, ch, r, st.peerOut) : -1);
          if ((needsIn(st.prim) && (st.peerIn < 0 || st.peerIn >= n)) ||
              (needsOut(st.prim) && (st.peerOut < 0 || st.peerOut >= n)))
            return invalidArgument("simulate: rank " + std::to_string(r) + " names a peer out of range");
        }
        agents_.push_back(std::move(a));
      }
    }
    for (size_t i = 0; i < agents_.size(); ++i) heap_.push({0.0, static_cast<int>(i)});
    while (!heap_.empty()) {
      auto [t, id] = heap_.top();
      heap_.pop();
      BRAID_RETURN_IF_ERROR(advance(id));
    }
    SimResult res;
    for (const Agent& a : agents_) {
      if (!a.done)
        return internalError("simulate: deadlock, rank " + std::to_string(a.rank) + " blocked at step " +
                             std::to_string(a.step) + " of " + s_[a.rank].algorithm);
      res.seconds = std::max(res.seconds, a.clock);
    }
    res.slices = slices_;
    res.simSliceBytes = ringSlice_;
    return res;
  }

 private:
  using Entry = std::pair<double, int>;

  // Coarsens the run when it would need more than opts_.maxSlices slice events: slices
  // grow by a factor f and every phase's round count shrinks by f, so parts, slices and
  // FIFO bytes all scale together and the run keeps its structure (same slots per FIFO,
  // same steps) at a coarser grain; only pipeline fill gets coarser.
  void chooseResolution() {
    double total = 0;
    for (const exec::Schedule& sc : s_) {
      size_t slot = sc.connectionSet == 1 ? m_.meshSlotBytes : m_.ringSlotBytes;
      for (const exec::ChannelPlan& p : sc.channels) {
        int rounds = p.rounds;
        for (const exec::Phase& ph : p.phases) rounds = std::max(rounds, ph.rounds);
        for (const Step& st : p.steps) total += static_cast<double>(st.bytes()) / slot + std::max(1, rounds);
      }
    }
    factor_ = 1;
    if (opts_.maxSlices && total > static_cast<double>(opts_.maxSlices))
      factor_ = static_cast<size_t>(std::ceil(total / static_cast<double>(opts_.maxSlices)));
    ringSlice_ = m_.ringSlotBytes * factor_;
    meshSlice_ = m_.meshSlotBytes * factor_;
    ringSlots_ = std::max(2, m_.ringSlots);
    meshSlots_ = std::max(2, m_.meshSlots);
  }

  int coarseRounds(int rounds) const {
    size_t r = static_cast<size_t>(std::max(1, rounds));
    return static_cast<int>((r + factor_ - 1) / factor_);
  }

  int connFor(int set, int ch, int from, int to) {
    if (from < 0 || to < 0 || from >= m_.nranks() || to >= m_.nranks()) return -1;
    uint64_t key = (static_cast<uint64_t>(set) << 62) | (static_cast<uint64_t>(ch) << 48) |
                   (static_cast<uint64_t>(from) << 24) | static_cast<uint64_t>(to);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    Conn c;
    c.slots = set == 1 ? meshSlots_ : ringSlots_;
    c.srcHost = m_.hostOf[from];
    c.dstHost = m_.hostOf[to];
    c.inter = c.srcHost != c.dstHost;
    c.arrive.assign(static_cast<size_t>(c.slots), 0);
    c.bytes.assign(static_cast<size_t>(c.slots), 0);
    c.release.assign(static_cast<size_t>(c.slots), 0);
    conns_.push_back(std::move(c));
    int id = static_cast<int>(conns_.size() - 1);
    index_.emplace(key, id);
    return id;
  }

  // Moves `a` to its next non-empty slice; false when the agent has finished. Runs the
  // steps in the executor's order (exec/executor.cc, runPhase).
  bool seek(Agent& a) {
    for (;;) {
      if (a.phase >= a.phases.size()) return false;
      const exec::Phase& ph = a.phases[a.phase];
      const size_t end = ph.firstStep + ph.numSteps;
      if (a.round >= std::max(1, ph.rounds)) {
        ++a.phase;
        a.round = 0;
        a.started = false;
        a.leadDone = false;
        continue;
      }
      if (!a.started) {  // position on the phase's first step of this round not yet run
        a.step = ph.firstStep + (a.leadDone ? a.lead : 0);
        a.started = true;
        a.ahead = a.aheadChecked = a.leadDone = false;
        setPart(a);
      }
      if (a.ahead) {  // round+1's leading steps, before this round's last
        if (a.off < a.hi) return true;
        if (++a.step < ph.firstStep + a.lead) {
          setPart(a);
          continue;
        }
        a.ahead = false;
        a.leadDone = true;
        a.step = end - 1;
        setPart(a);
        continue;
      }
      if (a.step >= end) {
        ++a.round;
        a.started = false;
        continue;
      }
      if (a.lead && a.step + 1 == end && !a.aheadChecked) {
        a.aheadChecked = true;
        if (a.round + 1 < ph.rounds && leadClear(a, ph)) {
          a.ahead = true;
          a.step = ph.firstStep;
          setPart(a);
          continue;
        }
      }
      if (a.off < a.hi) return true;
      ++a.step;
      if (a.step < end) setPart(a);
    }
  }

  // The executor's check that round+1 of the leading steps touches nothing this round of
  // the last step touches, on offsets: the input and the output count as one buffer (they
  // are one in place), the others each as its own.
  bool leadClear(const Agent& a, const exec::Phase& ph) const {
    const size_t rounds = static_cast<size_t>(std::max(1, ph.rounds));
    const Step& tail = a.plan->steps[ph.firstStep + ph.numSteps - 1];
    size_t tlo, thi, lo, hi;
    partOf(a, tail, static_cast<size_t>(a.round), rounds, &tlo, &thi);
    auto space = [](exec::Buf b) { return b == exec::Buf::kInput ? exec::Buf::kOutput : b; };
    for (size_t j = ph.firstStep; j < ph.firstStep + a.lead; ++j) {
      const Step& st = a.plan->steps[j];
      partOf(a, st, static_cast<size_t>(a.round) + 1, rounds, &lo, &hi);
      for (const exec::Region* x : {&st.src, &st.dst}) {
        if (x->bytes == 0 || hi <= lo) continue;
        for (const exec::Region* y : {&tail.src, &tail.dst}) {
          if (y->bytes == 0 || thi <= tlo || space(x->buf) != space(y->buf)) continue;
          if (x->offset + lo < y->offset + thi && y->offset + tlo < x->offset + hi) return false;
        }
      }
    }
    return true;
  }

  // Part r of `rounds` of step `st`, in bytes from its start (the executor's roundPart).
  static void partOf(const Agent& a, const Step& st, size_t r, size_t rounds, size_t* lo, size_t* hi) {
    const size_t elems = st.bytes() / a.es;
    *lo = elems * r / rounds * a.es;
    *hi = elems * (r + 1) / rounds * a.es;
  }

  void setPart(Agent& a) {
    if (a.step >= a.plan->steps.size()) {
      a.off = a.hi = 0;
      return;
    }
    const size_t rounds = static_cast<size_t>(std::max(1, a.phases[a.phase].rounds));
    const size_t r = static_cast<size_t>(a.round) + (a.ahead ? 1 : 0);
    partOf(a, a.plan->steps[a.step], r, rounds, &a.off, &a.hi);
  }

  double cpu(Prim p, size_t b) const {
    const double r = static_cast<double>(b) / m_.reduceBeta, c = static_cast<double>(b) / m_.copyBeta;
    switch (p) {
      case Prim::kSend: return c;
      case Prim::kRecv: return c;
      case Prim::kRecvReduce: return r;
      case Prim::kRecvReduceSend: return r;
      case Prim::kRecvReduceCopySend: return r + c;
      case Prim::kRecvCopySend: return 2 * c;
      case Prim::kCopy: return c;
      case Prim::kLocalReduce: return r;
    }
    return 0;
  }

  void wake(int& who) {
    if (who < 0) return;
    heap_.push({agents_[who].clock, who});
    who = -1;
  }

  Status advance(int id) {
    Agent& a = agents_[id];
    for (;;) {
      if (!seek(a)) {
        a.done = true;
        return Status::ok();
      }
      const Step& st = a.plan->steps[a.step];
      const size_t len = std::min(a.slice, a.hi - a.off);
      double start = a.clock;
      Conn* in = a.inConn[a.step] >= 0 ? &conns_[a.inConn[a.step]] : nullptr;
      Conn* out = a.outConn[a.step] >= 0 ? &conns_[a.outConn[a.step]] : nullptr;
      if (in) {
        if (in->consumed >= in->posted) {
          in->reader = id;
          return Status::ok();
        }
        size_t k = in->consumed % in->slots;
        if (in->bytes[k] != len)
          return invalidArgument("simulate: rank " + std::to_string(a.rank) + " expects a slice of " +
                                 std::to_string(len) + " bytes from rank " + std::to_string(st.peerIn) + ", which sent " +
                                 std::to_string(in->bytes[k]) + " (" + s_[a.rank].algorithm + ")");
        start = std::max(start, in->arrive[k]);
      }
      if (out && out->posted >= static_cast<uint64_t>(out->slots)) {
        uint64_t need = out->posted - out->slots;  // the slice whose slot we reuse
        if (out->consumed <= need) {
          out->writer = id;
          return Status::ok();
        }
        start = std::max(start, out->release[need % out->slots]);
      }
      if (start > a.clock + 1e-15) {  // keep the machine's shared links in time order
        a.clock = start;
        heap_.push({start, id});
        return Status::ok();
      }
      double work = cpu(st.prim, len);
      if (in) work += in->inter ? m_.inter.overhead : m_.intra.overhead;
      if (out) work += out->inter ? m_.inter.overhead : m_.intra.overhead;
      const double end = start + work;
      ++slices_;
      if (in) {
        in->release[in->consumed % in->slots] = end;
        ++in->consumed;
        wake(in->writer);
      }
      if (out) {
        const double b = static_cast<double>(len);
        double arrival;
        if (out->inter) {
          double e = std::max(end, egress_[out->srcHost]);
          egress_[out->srcHost] = e + b / m_.inter.beta;
          double i = std::max(e, ingress_[out->dstHost]);
          ingress_[out->dstHost] = i + b / m_.inter.beta;
          arrival = ingress_[out->dstHost] + m_.inter.alpha;
        } else {
          double s = std::max(end, out->linkFree);
          out->linkFree = s + b / m_.intra.beta;
          arrival = out->linkFree + m_.intra.alpha;
        }
        size_t k = out->posted % out->slots;
        out->arrive[k] = arrival;
        out->bytes[k] = len;
        ++out->posted;
        wake(out->reader);
      }
      a.clock = end;
      a.off += len;
      if (!heap_.empty() && heap_.top().first < a.clock) {
        heap_.push({a.clock, id});
        return Status::ok();
      }
    }
  }

  const std::vector<exec::Schedule>& s_;
  const Machine& m_;
  SimOptions opts_;
  size_t factor_ = 1;
  size_t ringSlice_ = 0, meshSlice_ = 0;
  int ringSlots_ = 2, meshSlots_ = 2;
  std::vector<Agent> agents_;
  std::vector<Conn> conns_;
  std::unordered_map<uint64_t, int> index_;
  std::vector<double> egress_, ingress_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  size_t slices_ = 0;
};

}  // namespace

StatusOr<SimResult> simulate(const std::vector<exec::Schedule>& schedules, const Machine& machine,
                             const SimOptions& opts) {
  Sim sim(schedules, machine, opts);
  return sim.run();
}

algorithms::Layout simLayout(const Machine& machine, int rank) {
  World w;
  w.rank = rank;
  w.nranks = machine.nranks();
  for (int h : machine.hostOf) w.hostIds.push_back("host" + std::to_string(h));
  w.nchannels = machine.nchannels;
  w.roundBytes = machine.ringSlotBytes * static_cast<size_t>(machine.ringSlots / 2);
  w.smallRoundBytes = machine.meshSlotBytes * static_cast<size_t>(machine.meshSlots / 2);
  w.smallMaxBytes = 64 * 1024;
  return layoutFor(w);
}

StatusOr<SimResult> simulateAlgorithm(const algorithms::AlgorithmInfo& algo, const algorithms::Request& req,
                                      const Machine& machine, const SimOptions& opts) {
  std::vector<exec::Schedule> all;
  all.reserve(static_cast<size_t>(machine.nranks()));
  // Every rank's layout is rank 0's with its own rank (layoutFor reads the rank nowhere
  // else): built once, not once per rank, which at 512 ranks was a third of the run.
  algorithms::Layout layout = simLayout(machine, 0);
  for (int r = 0; r < machine.nranks(); ++r) {
    layout.rank = r;
    BRAID_ASSIGN_OR_RETURN(exec::Schedule s, algo.build(req, layout));
    all.push_back(std::move(s));
  }
  return simulate(all, machine, opts);
}

}  // namespace braid::plan

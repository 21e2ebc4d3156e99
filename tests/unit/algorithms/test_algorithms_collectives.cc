// The allgather, reduce-scatter, alltoall, gather, scatter and barrier schedules, run by a
// simulator that cuts steps exactly as the executor does (phases, rounds, slices) and
// moves the slices through FIFOs of a fixed number of slots, so a schedule that could
// deadlock with finite FIFOs does deadlock here. Every output element is compared with a
// reference, every byte outside the output must stay untouched, and each rank tracks which
// ranks it has (transitively) heard from, which proves the barrier waits for everyone.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithm.h"
#include "plan/planner.h"
#include "reduce/reduce.h"
#include "support/catch.h"

using namespace braid;
using algorithms::Collective;
using exec::Buf;
using exec::Prim;

namespace {

constexpr DataType kType = DataType::kInt32;
constexpr size_t kEs = 4;
constexpr uint8_t kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;

// Tiny FIFOs and rounds: many slices and rounds per step even for a few elements.
constexpr size_t kRoundBytes = 24;       // ring: half a FIFO of 2 slots of 24 bytes
constexpr int kRingSlots = 2;
constexpr size_t kSmallRoundBytes = 32;  // mesh: 4 slots of 16 bytes
constexpr int kMeshSlots = 4;
// Large messages (Layout::wholeBlockBytes): 0 in most tests; set, a wholeBlocks schedule's
// steps are cut into messages this large, each taking one slot of the FIFO as the executor's
// would (exec::RunContext::wholeBlockBytes).
size_t gWholeBlockBytes = 0;

algorithms::Layout layoutOf(int rank, int n, int nch) {
  plan::World w;
  w.rank = rank;
  w.nranks = n;
  w.nchannels = nch;
  w.roundBytes = kRoundBytes;
  w.smallRoundBytes = kSmallRoundBytes;
  for (int r = 0; r < n; ++r) w.hostIds.push_back("h" + std::to_string(r % 3));  // rings are not 0,1,2,...
  algorithms::Layout l = plan::layoutFor(w);
  l.wholeBlockBytes = gWholeBlockBytes;
  return l;
}

int32_t value(int rank, size_t i) { return static_cast<int32_t>((rank * 7919 + i * 104729 + 13) % 2001) - 1000; }

// One rank's memory: a guarded arena with the output and (unless in place) the input.
struct Memory {
  std::vector<uint8_t> arena;
  size_t outAt = 0, inAt = 0, outBytes = 0, inBytes = 0;
  std::vector<uint8_t> scratch;
  uint8_t* addr(Buf b, size_t off) {
    if (b == Buf::kInput) return arena.data() + inAt + off;
    if (b == Buf::kOutput) return arena.data() + outAt + off;
    return scratch.data() + off;
  }
  int32_t out(size_t i) const {
    int32_t v;
    std::memcpy(&v, arena.data() + outAt + i * kEs, kEs);
    return v;
  }
};

struct Slice {
  std::vector<uint8_t> bytes;
  uint64_t heard = 0;  // ranks the sender had heard from
};

// One channel of one rank: the slices it will run, in order.
struct Op {
  const exec::Step* st;
  size_t off, len;
};

std::vector<Op> cut(const exec::ChannelPlan& plan, size_t sliceBytes, size_t es) {
  std::vector<Op> ops;
  sliceBytes = std::max(es, sliceBytes / es * es);
  auto phase = [&](size_t first, size_t count, size_t rounds) {
    for (size_t r = 0; r < rounds; ++r)
      for (size_t i = first; i < first + count; ++i) {
        const exec::Step& st = plan.steps[i];
        size_t elems = st.bytes() / es;
        size_t lo = elems * r / rounds * es, hi = elems * (r + 1) / rounds * es;
        for (size_t off = lo; off < hi; off += sliceBytes) ops.push_back(Op{&st, off, std::min(sliceBytes, hi - off)});
      }
  };
  if (plan.phases.empty()) phase(0, plan.steps.size(), static_cast<size_t>(plan.rounds));
  for (const exec::Phase& ph : plan.phases) phase(ph.firstStep, ph.numSteps, static_cast<size_t>(ph.rounds));
  return ops;
}

// Runs every rank's schedule; returns "" or what went wrong.
std::string simulate(const std::vector<exec::Schedule>& sched, std::vector<Memory>& mem, const algorithms::Layout& l0,
                     uint64_t* heardOut = nullptr) {
  const int n = static_cast<int>(sched.size());
  const bool mesh = sched[0].connectionSet == 1;
  size_t slice = mesh ? kSmallRoundBytes / (kMeshSlots / 2) : kRoundBytes / (kRingSlots / 2);
  if (sched[0].wholeBlocks && gWholeBlockBytes > slice) slice = gWholeBlockBytes;
  const size_t cap = mesh ? kMeshSlots : kRingSlots;
  const int nch = static_cast<int>(sched[0].channels.size());
  std::vector<uint64_t> heard(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) heard[r] = uint64_t{1} << r;
  for (int r = 0; r < n; ++r) {
    if (static_cast<int>(sched[r].channels.size()) != nch) return "ranks disagree on the channel count";
    if (sched[r].connectionSet != sched[0].connectionSet) return "ranks disagree on the connection set";
    mem[r].scratch.assign(sched[r].scratchBytes, 0x5C);
  }
  for (int c = 0; c < nch; ++c) {
    std::vector<std::vector<Op>> ops(n);
    std::vector<size_t> pc(n, 0);
    for (int r = 0; r < n; ++r) {
      ops[r] = cut(sched[r].channels[c], slice, dataTypeSize(sched[r].dtype));
      // Ring schedules may only use the ring neighbours of their channel.
      if (!mesh) {
        algorithms::RingPos pos = algorithms::ringPosition(l0.rings[c], r);
        for (const exec::Step& st : sched[r].channels[c].steps) {
          bool in = st.prim != Prim::kSend && st.prim != Prim::kCopy && st.prim != Prim::kLocalReduce;
          bool out = st.prim == Prim::kSend || st.prim == Prim::kRecvReduceSend || st.prim == Prim::kRecvReduceCopySend ||
                     st.prim == Prim::kRecvCopySend;
          if ((in && st.peerIn != pos.prev) || (out && st.peerOut != pos.next))
            return "rank " + std::to_string(r) + " uses a connection outside its ring";
        }
      }
    }
    std::map<std::pair<int, int>, std::deque<Slice>> fifo;
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < n; ++r) {
        Memory& m = mem[r];
        while (pc[r] < ops[r].size()) {
          const Op& op = ops[r][pc[r]];
          const exec::Step& st = *op.st;
          const bool needIn = st.prim != Prim::kSend && st.prim != Prim::kCopy && st.prim != Prim::kLocalReduce;
          const bool needOut = st.prim == Prim::kSend || st.prim == Prim::kRecvReduceSend ||
                               st.prim == Prim::kRecvReduceCopySend || st.prim == Prim::kRecvCopySend;
          if (needIn && (st.peerIn == r || fifo[{st.peerIn, r}].empty())) break;
          if (needOut && (st.peerOut == r || fifo[{r, st.peerOut}].size() >= cap)) break;
          Slice in;
          if (needIn) {
            in = std::move(fifo[{st.peerIn, r}].front());
            fifo[{st.peerIn, r}].pop_front();
            if (in.bytes.size() != op.len)
              return "rank " + std::to_string(r) + " expected a slice of " + std::to_string(op.len) + " bytes from rank " +
                     std::to_string(st.peerIn) + ", got " + std::to_string(in.bytes.size());
            heard[r] |= in.heard;
          }
          std::vector<uint8_t> result(op.len);
          uint8_t* src = m.addr(st.src.buf, st.src.offset + op.off);
          uint8_t* dst = m.addr(st.dst.buf, st.dst.offset + op.off);
          const DataType dt = sched[r].dtype;
          const size_t elems = op.len / dataTypeSize(dt);
          switch (st.prim) {
            case Prim::kSend: std::memcpy(result.data(), src, op.len); break;
            case Prim::kRecv: std::memcpy(dst, in.bytes.data(), op.len); break;
            case Prim::kRecvReduce: reduce::reduce2(dt, sched[r].op, dst, in.bytes.data(), src, elems); break;
            case Prim::kRecvReduceSend: reduce::reduce2(dt, sched[r].op, result.data(), in.bytes.data(), src, elems); break;
            case Prim::kRecvReduceCopySend:
              reduce::reduce2(dt, sched[r].op, result.data(), in.bytes.data(), src, elems);
              std::memcpy(dst, result.data(), op.len);
              break;
            case Prim::kRecvCopySend:
              result = in.bytes;
              std::memcpy(dst, result.data(), op.len);
              break;
            case Prim::kCopy:
              if (dst != src) {
                if (dst < src + op.len && src < dst + op.len) return "rank " + std::to_string(r) + ": overlapping copy";
                std::memcpy(dst, src, op.len);
              }
              break;
            case Prim::kLocalReduce: reduce::reduce2(dt, sched[r].op, dst, src, dst, elems); break;
          }
          if (needOut) fifo[{r, st.peerOut}].push_back(Slice{std::move(result), heard[r]});
          ++pc[r];
          progress = true;
        }
      }
    }
    for (int r = 0; r < n; ++r)
      if (pc[r] != ops[r].size()) {
        const exec::Step& st = *ops[r][pc[r]].st;
        return "deadlock on channel " + std::to_string(c) + ": rank " + std::to_string(r) + " stuck in " +
               exec::primName(st.prim) + " (in " + std::to_string(st.peerIn) + ", out " + std::to_string(st.peerOut) + ")";
      }
    for (auto& [key, q] : fifo)
      if (!q.empty()) return "rank " + std::to_string(key.first) + " sent rank " + std::to_string(key.second) + " slices nobody received";
    for (int r = 0; r < n; ++r)
      if (sched[r].divisor > 1 && c < static_cast<int>(sched[r].divideRanges.size()))
        for (const exec::Region& g : sched[r].divideRanges[c])
          reduce::divideInPlace(sched[r].dtype, mem[r].addr(Buf::kOutput, g.offset), g.bytes / dataTypeSize(sched[r].dtype), sched[r].divisor);
  }
  if (heardOut) {
    *heardOut = ~uint64_t{0};
    for (int r = 0; r < n; ++r) *heardOut &= heard[r];
  }
  return "";
}

// A collective call as the test sees it: the request (same on every rank except v-counts
// of alltoallv, which `perRank` supplies), sizes, and where the input sits when in place.
struct Call {
  algorithms::Request req;
  std::vector<algorithms::Request> perRank;  // alltoallv only
  const algorithms::Request& at(int r) const { return perRank.empty() ? req : perRank[r]; }
};

// Lays out memory for rank r: the output, then the input (or the input inside the output).
Memory memoryFor(const algorithms::Request& req, int r, int n) {
  Memory m;
  m.outBytes = algorithms::outputElems(req, r, n) * kEs;
  m.inBytes = algorithms::inputElems(req, r, n) * kEs;
  size_t inOff = 0;  // the input's offset inside the output when in place
  bool inside = false;
  if (req.inPlace) {
    switch (req.coll) {
      case Collective::kAllGather: inside = true; inOff = r * req.count * kEs; break;
      case Collective::kAllGatherV: inside = true; inOff = req.displs[r] * kEs; break;
      case Collective::kGather: inside = r == req.root; inOff = algorithms::blockAt(req, r) * kEs; break;
      case Collective::kAllToAll: case Collective::kAllToAllV: inside = true; break;
      default: break;
    }
  }
  // Collectives whose output lies inside the input when in place.
  bool outInside = req.inPlace && (req.coll == Collective::kReduceScatter || req.coll == Collective::kReduceScatterV ||
                                   (req.coll == Collective::kScatter && r == req.root));
  size_t outOffInIn = 0;
  if (outInside) {
    if (req.coll == Collective::kReduceScatterV)
      for (int j = 0; j < r; ++j) outOffInIn += req.counts[j] * kEs;
    else
      outOffInIn = algorithms::blockAt(req, r) * kEs;
  }
  if (outInside) {
    m.arena.assign(kGuardBytes * 2 + m.inBytes, kGuard);
    m.inAt = kGuardBytes;
    m.outAt = kGuardBytes + outOffInIn;
  } else if (inside) {
    m.arena.assign(kGuardBytes * 2 + std::max(m.outBytes, inOff + m.inBytes), kGuard);
    m.outAt = kGuardBytes;
    m.inAt = kGuardBytes + inOff;
  } else {
    m.arena.assign(kGuardBytes * 3 + m.outBytes + m.inBytes, kGuard);
    m.outAt = kGuardBytes;
    m.inAt = kGuardBytes * 2 + m.outBytes;
  }
  return m;
}

// The expected output element i of rank r, given every rank's input.
int32_t expected(const Call& call, int r, int n, size_t i, const std::vector<std::vector<int32_t>>& inputs) {
  const algorithms::Request& q = call.at(r);
  switch (q.coll) {
    case Collective::kAllGather: return inputs[i / q.count][i % q.count];
    case Collective::kAllGatherV:
      for (int b = 0; b < n; ++b)
        if (i >= q.displs[b] && i < q.displs[b] + q.counts[b]) return inputs[b][i - q.displs[b]];
      return 0;
    case Collective::kReduceScatter:
    case Collective::kReduceScatterV: {
      size_t base = 0;
      if (q.coll == Collective::kReduceScatter) base = r * q.count;
      else
        for (int j = 0; j < r; ++j) base += q.counts[j];
      int64_t acc = inputs[0][base + i];
      for (int j = 1; j < n; ++j) {
        int64_t v = inputs[j][base + i];
        acc = q.op == ReduceOp::kMax ? std::max(acc, v) : q.op == ReduceOp::kMin ? std::min(acc, v) : acc + v;
      }
      if (q.op == ReduceOp::kAvg) acc /= n;
      return static_cast<int32_t>(acc);
    }
    case Collective::kAllToAll: return inputs[i / q.count][r * q.count + i % q.count];
    case Collective::kAllToAllV:
      for (int j = 0; j < n; ++j)
        if (i >= q.displs[j] && i < q.displs[j] + q.counts[j]) return inputs[j][call.at(j).sendDispls[r] + i - q.displs[j]];
      return 0;
    case Collective::kGather:
      for (int b = 0; b < n; ++b)
        if (i >= algorithms::blockAt(q, b) && i < algorithms::blockAt(q, b) + q.count) return inputs[b][i - algorithms::blockAt(q, b)];
      return 0;
    case Collective::kScatter: return inputs[q.root][algorithms::blockAt(q, r) + i];
    default: return 0;
  }
}

// Whether output element i of rank r is written by the collective (allgatherv and
// alltoallv outputs may have gaps that must stay untouched).
bool written(const Call& call, int r, int n, size_t i) {
  const algorithms::Request& q = call.at(r);
  if (q.coll == Collective::kGather && !q.displs.empty()) {
    for (int j = 0; j < n; ++j)
      if (i >= q.displs[j] && i < q.displs[j] + q.count) return true;
    return false;
  }
  if (q.coll != Collective::kAllGatherV && q.coll != Collective::kAllToAllV) return true;
  for (int j = 0; j < n; ++j)
    if (i >= q.displs[j] && i < q.displs[j] + q.counts[j]) return true;
  return false;
}

std::string runCall(const Call& call, int n, int nch, algorithms::Builder build) {
  std::vector<exec::Schedule> sched;
  std::vector<Memory> mem;
  std::vector<std::vector<int32_t>> inputs(n);
  for (int r = 0; r < n; ++r) {
    const algorithms::Request& q = call.at(r);
    algorithms::Layout l = layoutOf(r, n, nch);
    auto s = build(q, l);
    if (!s.isOk()) return "rank " + std::to_string(r) + ": " + s.status().toString();
    Memory m = memoryFor(q, r, n);
    std::string v = exec::validate(s.value(), n, m.inBytes, m.outBytes);
    if (!v.empty()) return "rank " + std::to_string(r) + ": " + v;
    // The input; in place it is written into its place inside the output.
    inputs[r].resize(m.inBytes / kEs);
    for (size_t i = 0; i < inputs[r].size(); ++i) {
      inputs[r][i] = value(r, i);
      std::memcpy(m.addr(Buf::kInput, i * kEs), &inputs[r][i], kEs);
    }
    sched.push_back(std::move(s).value());
    mem.push_back(std::move(m));
  }
  uint64_t heard = 0;
  std::string e = simulate(sched, mem, layoutOf(0, n, nch), &heard);
  if (!e.empty()) return e;
  if (call.req.coll == Collective::kBarrier && n > 1 && heard != (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1))
    return "a rank left the barrier without hearing from every rank";
  for (int r = 0; r < n; ++r) {
    Memory& m = mem[r];
    // Guards: nothing outside the output (and, out of place, the input) may change.
    size_t inEnd = m.inAt + m.inBytes, outEnd = m.outAt + m.outBytes;
    for (size_t b = 0; b < m.arena.size(); ++b) {
      bool inOut = b >= m.outAt && b < outEnd;
      bool inIn = b >= m.inAt && b < inEnd;
      if (!inOut && !inIn && m.arena[b] != kGuard) return "rank " + std::to_string(r) + " wrote outside its buffers";
    }
    // Out of place the input must be untouched.
    if (!call.at(r).inPlace)
      for (size_t i = 0; i < inputs[r].size(); ++i) {
        int32_t v;
        std::memcpy(&v, m.addr(Buf::kInput, i * kEs), kEs);
        if (v != inputs[r][i]) return "rank " + std::to_string(r) + " modified its input at " + std::to_string(i);
      }
    for (size_t i = 0; i < m.outBytes / kEs; ++i) {
      if (!written(call, r, n, i)) {
        for (size_t k = 0; k < kEs; ++k)
          if (m.arena[m.outAt + i * kEs + k] != kGuard && !call.at(r).inPlace)
            return "rank " + std::to_string(r) + " wrote into a gap of its output at " + std::to_string(i);
        continue;
      }
      int32_t want = expected(call, r, n, i, inputs);
      if (m.out(i) != want) {
        std::ostringstream os;
        os << "rank " << r << " element " << i << " is " << m.out(i) << ", expected " << want;
        return os.str();
      }
    }
  }
  return "";
}

const int kRankCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17};

std::vector<size_t> countsFor(int n) { return {0, 1, static_cast<size_t>(std::max(1, n - 1)), 5, 37}; }

// Uneven per-rank counts with zeros, the same on every rank.
std::vector<size_t> vCounts(int n, int seed) {
  std::vector<size_t> c(n);
  for (int j = 0; j < n; ++j) c[j] = ((j * 5 + seed * 3) % 7 == 0) ? 0 : static_cast<size_t>((j * 11 + seed * 7) % 23);
  return c;
}

}  // namespace

TEST_CASE("allgather schedules deliver every block to every rank", "[unit]") {
  struct A { const char* name; algorithms::Builder build; };
  for (A a : {A{"ring", &algorithms::allgatherRing}, A{"recursive_doubling", &algorithms::allgatherRecursiveDoubling},
              A{"bruck", &algorithms::allgatherBruck}})
    for (int n : kRankCounts)
      for (int nch : {1, 3})
        for (size_t count : countsFor(n))
          for (bool ip : {false, true}) {
            if (nch > 1 && a.build != &algorithms::allgatherRing) continue;
            Call call;
            call.req.coll = Collective::kAllGather;
            call.req.dtype = kType;
            call.req.count = count;
            call.req.inPlace = ip;
            INFO(a.name << " n=" << n << " ch=" << nch << " count=" << count << (ip ? " in place" : ""));
            CHECK(runCall(call, n, nch, a.build) == "");
          }
}

TEST_CASE("allgatherv ring handles uneven counts with zeros and gaps", "[unit]") {
  for (int n : kRankCounts)
    for (int nch : {1, 2})
      for (int seed : {0, 1, 2})
        for (bool ip : {false, true}) {
          Call call;
          call.req.coll = Collective::kAllGatherV;
          call.req.dtype = kType;
          call.req.counts = vCounts(n, seed);
          call.req.inPlace = ip;
          // Blocks in reverse rank order with a gap of `seed` elements after each.
          size_t at = 0;
          call.req.displs.assign(n, 0);
          for (int j = n - 1; j >= 0; --j) {
            call.req.displs[j] = at;
            at += call.req.counts[j] + static_cast<size_t>(seed);
          }
          INFO("n=" << n << " ch=" << nch << " seed=" << seed << (ip ? " in place" : ""));
          CHECK(runCall(call, n, nch, &algorithms::allgatherVRing) == "");
        }
}

TEST_CASE("reduce-scatter schedules reduce every block exactly once", "[unit]") {
  struct A { const char* name; algorithms::Builder build; };
  for (A a : {A{"ring", &algorithms::reduceScatterRing},
              A{"recursive_halving", &algorithms::reduceScatterRecursiveHalving},
              A{"direct", &algorithms::reduceScatterDirect}})
    for (int n : kRankCounts)
      for (int nch : {1, 2})
        for (size_t count : countsFor(n))
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg})
            for (bool ip : {false, true}) {
              if (nch > 1 && a.build != &algorithms::reduceScatterRing) continue;
              Call call;
              call.req.coll = Collective::kReduceScatter;
              call.req.dtype = kType;
              call.req.op = op;
              call.req.count = count;
              call.req.inPlace = ip;
              INFO(a.name << " n=" << n << " ch=" << nch << " count=" << count << " op=" << reduceOpName(op)
                          << (ip ? " in place" : ""));
              CHECK(runCall(call, n, nch, a.build) == "");
            }
}

TEST_CASE("reduce-scatterv ring handles uneven counts and zeros", "[unit]") {
  for (int n : kRankCounts)
    for (int nch : {1, 3})
      for (int seed : {0, 1, 2})
        for (bool ip : {false, true}) {
          Call call;
          call.req.coll = Collective::kReduceScatterV;
          call.req.dtype = kType;
          call.req.counts = vCounts(n, seed);
          call.req.inPlace = ip;
          INFO("n=" << n << " ch=" << nch << " seed=" << seed << (ip ? " in place" : ""));
          CHECK(runCall(call, n, nch, &algorithms::reduceScatterVRing) == "");
        }
}

TEST_CASE("alltoall schedules move block j of rank i to block i of rank j", "[unit]") {
  struct A { const char* name; algorithms::Builder build; };
  for (A a : {A{"pairwise", &algorithms::alltoallPairwise}, A{"bruck", &algorithms::alltoallBruck}})
    for (int n : kRankCounts)
      for (size_t count : countsFor(n))
        for (bool ip : {false, true}) {
          Call call;
          call.req.coll = Collective::kAllToAll;
          call.req.dtype = kType;
          call.req.count = count;
          call.req.inPlace = ip;
          INFO(a.name << " n=" << n << " count=" << count << (ip ? " in place" : ""));
          CHECK(runCall(call, n, 1, a.build) == "");
        }
}

TEST_CASE("alltoallv pairwise handles per-pair counts with zeros and gaps", "[unit]") {
  for (int n : kRankCounts)
    for (int seed : {0, 1, 2})
      for (bool ip : {false, true}) {
        Call call;
        call.req.coll = Collective::kAllToAllV;
        call.req.dtype = kType;
        // C[i][j]: elements rank i sends rank j; some pairs send nothing, some a lot.
        auto C = [&](int i, int j) -> size_t {
          int h = (i * 31 + j * 17 + seed * 7) % 11;
          return h == 0 ? 0 : h == 1 ? 53 : static_cast<size_t>(h);
        };
        for (int r = 0; r < n; ++r) {
          algorithms::Request q = call.req;
          q.inPlace = ip;
          q.sendCounts.resize(n);
          q.sendDispls.resize(n);
          q.counts.resize(n);
          q.displs.resize(n);
          // In place the send and receive layouts are one; it must fit both directions.
          size_t at = 0, rat = 0;
          for (int j = 0; j < n; ++j) {
            q.sendCounts[j] = C(r, j);
            q.counts[j] = C(j, r);
            size_t slot = ip ? std::max(q.sendCounts[j], q.counts[j]) : q.sendCounts[j];
            q.sendDispls[j] = at;
            at += slot + static_cast<size_t>(seed);
            q.displs[n - 1 - j] = 0;  // filled below
          }
          for (int j = n - 1; j >= 0; --j) {  // receive blocks in reverse order, with gaps
            if (ip) {
              q.displs[j] = q.sendDispls[j];
            } else {
              q.displs[j] = rat;
              rat += q.counts[j] + static_cast<size_t>(seed);
            }
          }
          call.perRank.push_back(q);
        }
        INFO("n=" << n << " seed=" << seed << (ip ? " in place" : ""));
        CHECK(runCall(call, n, 1, &algorithms::alltoallVPairwise) == "");
      }
}

TEST_CASE("gather and scatter schedules for every root", "[unit]") {
  struct A { const char* name; Collective coll; algorithms::Builder build; };
  for (A a : {A{"gather direct", Collective::kGather, &algorithms::gatherDirect},
              A{"gather tree", Collective::kGather, &algorithms::gatherTree},
              A{"scatter direct", Collective::kScatter, &algorithms::scatterDirect},
              A{"scatter tree", Collective::kScatter, &algorithms::scatterTree}})
    for (int n : kRankCounts)
      for (int root = 0; root < n; ++root)
        for (size_t count : countsFor(n))
          for (bool ip : {false, true})
            for (bool apart : {false, true}) {
              Call call;
              call.req.coll = a.coll;
              call.req.dtype = kType;
              call.req.count = count;
              call.req.root = root;
              call.req.inPlace = ip;
              // The root's blocks apart (as a device call's pieces run them): in reverse
              // order, with gaps of 3 elements between and before them.
              if (apart)
                for (int b = 0; b < n; ++b) call.req.displs.push_back(3 + static_cast<size_t>(n - 1 - b) * (count + 3));
              INFO(a.name << " n=" << n << " root=" << root << " count=" << count << (ip ? " in place" : "")
                          << (apart ? " blocks apart" : ""));
              CHECK(runCall(call, n, 1, a.build) == "");
            }
}

// Where every connection carries large messages, the schedules marked wholeBlocks send each
// step's round as one message (one FIFO slot, whatever its size): they must still deliver
// and never deadlock with the same shallow FIFOs. Chains and trees, whose pipelining needs
// slices, are not marked.
TEST_CASE("whole-block schedules with large messages: one message per step and round, no deadlock", "[unit]") {
  struct A { const char* name; Collective coll; algorithms::Builder build; bool whole; };
  const A all[] = {
      {"allgather ring", Collective::kAllGather, &algorithms::allgatherRing, true},
      {"allgather recursive doubling", Collective::kAllGather, &algorithms::allgatherRecursiveDoubling, false},
      {"allgather bruck", Collective::kAllGather, &algorithms::allgatherBruck, false},
      {"alltoall pairwise", Collective::kAllToAll, &algorithms::alltoallPairwise, true},
      {"alltoall bruck", Collective::kAllToAll, &algorithms::alltoallBruck, false},
      {"gather tree", Collective::kGather, &algorithms::gatherTree, false},
      {"scatter tree", Collective::kScatter, &algorithms::scatterTree, false},
      {"reduce-scatter ring", Collective::kReduceScatter, &algorithms::reduceScatterRing, false},
  };
  gWholeBlockBytes = 1024;
  for (const A& a : all)
    for (int n : {1, 2, 3, 4, 5, 8, 13})
      for (size_t count : {size_t{1}, size_t{37}, size_t{600}})
        for (bool ip : {false, true}) {
          Call call;
          call.req.coll = a.coll;
          call.req.dtype = kType;
          call.req.count = count;
          call.req.inPlace = ip;
          const int nch = a.coll == Collective::kAllGather && a.build == &algorithms::allgatherRing ? 2 : 1;
          INFO(a.name << " n=" << n << " count=" << count << (ip ? " in place" : ""));
          auto s = a.build(call.req, layoutOf(0, n, nch));
          REQUIRE(s.isOk());
          // Pairwise alltoall sends from a scratch copy in place: not whole blocks there.
          CHECK(s.value().wholeBlocks == (a.whole && !(ip && a.coll == Collective::kAllToAll)));
          if (a.whole && a.build == &algorithms::allgatherRing) {
            // Rounds of at most one message: a channel's share of a block over gWholeBlockBytes.
            const size_t share = (count + nch - 1) / nch * kEs;
            for (const exec::ChannelPlan& p : s.value().channels)
              CHECK(p.rounds == static_cast<int>(std::max<size_t>(1, (share + gWholeBlockBytes - 1) / gWholeBlockBytes)));
          }
          CHECK(runCall(call, n, nch, a.build) == "");
        }
  // Point-to-point groups: a ring exchange of messages several FIFOs long, each part one
  // message, and parts of a message no larger than gWholeBlockBytes.
  for (int n : {2, 3, 5}) {
    for (int r = 0; r < n; ++r) {
      algorithms::Request q;
      q.coll = Collective::kSendRecv;
      q.dtype = kType;
      q.p2p = {{true, (r + 1) % n, 700}, {false, (r + n - 1) % n, 700}};
      auto s = algorithms::sendRecvGroup(q, layoutOf(r, n, 1));
      REQUIRE(s.isOk());
      CHECK(s.value().wholeBlocks);
      size_t sends = 0;
      for (const exec::Step& st : s.value().channels[0].steps) {
        if (st.prim != Prim::kSend) continue;
        ++sends;
        CHECK(st.src.bytes <= gWholeBlockBytes);
      }
      CHECK(sends == (700 * kEs + gWholeBlockBytes - 1) / gWholeBlockBytes);
    }
  }
  gWholeBlockBytes = 0;
}

TEST_CASE("dissemination barrier - nobody leaves before hearing from everyone", "[unit]") {
  for (int n = 1; n <= 40; ++n) {
    Call call;
    call.req.coll = Collective::kBarrier;
    INFO("n=" << n);
    CHECK(runCall(call, n, 1, &algorithms::barrierDissemination) == "");
    // ceil(log2 n) sends per rank.
    int rounds = 0;
    while ((1 << rounds) < n) ++rounds;
    auto s = algorithms::barrierDissemination(call.req, layoutOf(0, n, 1));
    REQUIRE(s.isOk());
    CHECK(static_cast<int>(s->channels[0].steps.size()) == 2 * rounds);
  }
}

TEST_CASE("collective builders reject malformed v-counts and roots", "[unit]") {
  algorithms::Layout l = layoutOf(0, 4, 1);
  algorithms::Request q;
  q.coll = Collective::kAllGatherV;
  q.counts = {1, 2, 3};
  q.displs = {0, 1, 3};
  CHECK(algorithms::allgatherVRing(q, l).status().code() == Code::kInvalidArgument);
  q.coll = Collective::kReduceScatterV;
  CHECK(algorithms::reduceScatterVRing(q, l).status().code() == Code::kInvalidArgument);
  q.coll = Collective::kAllToAllV;
  CHECK(algorithms::alltoallVPairwise(q, l).status().code() == Code::kInvalidArgument);
  q = algorithms::Request();
  q.coll = Collective::kGather;
  q.root = 4;
  CHECK(algorithms::gatherTree(q, l).status().code() == Code::kInvalidArgument);
  CHECK(algorithms::scatterDirect(q, l).status().code() == Code::kInvalidArgument);
  // Block displacements need one per rank.
  q.root = 0;
  q.count = 2;
  q.displs = {0, 2, 4};
  for (algorithms::Builder b : {&algorithms::gatherDirect, &algorithms::gatherTree}) {
    auto s = b(q, l);
    CHECK(s.status().code() == Code::kInvalidArgument);
    CHECK(s.status().message() == "gather: displs needs one entry per rank (4), got 3");
  }
  q.coll = Collective::kScatter;
  for (algorithms::Builder b : {&algorithms::scatterDirect, &algorithms::scatterTree})
    CHECK(b(q, l).status().code() == Code::kInvalidArgument);
}

// Acknowledgements (exec::computeAcks) over every algorithm of the rooted collectives and the
// v-variants with zero counts, for every rank count and root: a rank expects one from a peer
// exactly when that peer sends one to it, never where data already flows back, and with them
// every rank hears from every peer it sends data to, which is what lets it see a peer that
// issued another call before it returns.
TEST_CASE("acknowledgements pair up and cover every peer a rank only sends to", "[unit]") {
  auto sets = [](const exec::Schedule& s, int n, std::vector<char>* sends, std::vector<char>* recvs) {
    sends->assign(static_cast<size_t>(n), 0);
    recvs->assign(static_cast<size_t>(n), 0);
    for (const exec::ChannelPlan& ch : s.channels)
      for (const exec::Step& st : ch.steps) {
        if (st.bytes() == 0) continue;
        const bool in = st.prim != Prim::kSend && st.prim != Prim::kCopy && st.prim != Prim::kLocalReduce;
        const bool out = st.prim == Prim::kSend || st.prim == Prim::kRecvReduceSend ||
                         st.prim == Prim::kRecvReduceCopySend || st.prim == Prim::kRecvCopySend;
        if (in) (*recvs)[static_cast<size_t>(st.peerIn)] = 1;
        if (out) (*sends)[static_cast<size_t>(st.peerOut)] = 1;
      }
  };
  // `reqOf(r)`: rank r's request (alltoallv's counts differ per rank).
  auto check = [&](const algorithms::AlgorithmInfo& a, const std::function<algorithms::Request(int)>& reqOf,
                   int n) -> std::string {
    std::vector<exec::Schedule> all;
    for (int r = 0; r < n; ++r) {
      auto s = a.build(reqOf(r), layoutOf(r, n, 2));
      if (!s.isOk()) return "rank " + std::to_string(r) + ": " + s.status().toString();
      exec::computeAcks(&s.value(), n);
      std::string bad = exec::validate(s.value(), n, 1u << 30, 1u << 30);
      if (!bad.empty()) return "rank " + std::to_string(r) + ": " + bad;
      all.push_back(std::move(s).value());
    }
    for (int r = 0; r < n; ++r) {
      const exec::Schedule& s = all[static_cast<size_t>(r)];
      std::vector<char> sends, recvs;
      sets(s, n, &sends, &recvs);
      std::vector<char> ackFrom(static_cast<size_t>(n), 0);
      for (int p : s.ackFrom) ackFrom[static_cast<size_t>(p)] = 1;
      for (int p : s.ackTo)
        if (sends[static_cast<size_t>(p)] || !recvs[static_cast<size_t>(p)])
          return "rank " + std::to_string(r) + " acknowledges rank " + std::to_string(p) +
                 ", which it sends to or receives nothing from";
      for (int p = 0; p < n; ++p) {
        const std::vector<int>& to = all[static_cast<size_t>(p)].ackTo;
        const bool sent = std::find(to.begin(), to.end(), r) != to.end();
        if (sent != static_cast<bool>(ackFrom[static_cast<size_t>(p)]))
          return "rank " + std::to_string(r) + (sent ? " does not expect" : " expects") +
                 " an acknowledgement rank " + std::to_string(p) + (sent ? " sends" : " does not send");
        if (sends[static_cast<size_t>(p)] && !recvs[static_cast<size_t>(p)] && !ackFrom[static_cast<size_t>(p)])
          return "rank " + std::to_string(r) + " sends to rank " + std::to_string(p) + " and hears nothing back";
      }
    }
    return "";
  };
  size_t withAcks = 0;
  for (const algorithms::AlgorithmInfo& a : algorithms::algorithmTable()) {
    const bool rooted = a.coll == Collective::kBroadcast || a.coll == Collective::kReduce ||
                        a.coll == Collective::kGather || a.coll == Collective::kScatter;
    const bool v = a.coll == Collective::kAllGatherV || a.coll == Collective::kReduceScatterV ||
                   a.coll == Collective::kAllToAllV;
    if (!rooted && !v) continue;
    for (int n : {1, 2, 3, 4, 5, 7, 8, 9}) {
      for (int root = 0; root < (rooted ? n : 1); ++root)
        for (size_t count : {size_t{1}, size_t{37}}) {
          auto reqOf = [&](int r) {
            algorithms::Request req;
            req.coll = a.coll;
            req.dtype = kType;
            req.count = count;
            req.root = root;
            if (!v) return req;
            // One rank's share only: the others send what nobody returns.
            const size_t one = static_cast<size_t>(n / 2);
            auto layout = [&](std::vector<size_t>* counts, std::vector<size_t>* displs, bool all) {
              counts->assign(static_cast<size_t>(n), all ? count : 0);
              (*counts)[one] = count;
              displs->assign(static_cast<size_t>(n), 0);
              for (size_t j = 1; j < static_cast<size_t>(n); ++j) (*displs)[j] = (*displs)[j - 1] + (*counts)[j - 1];
            };
            if (a.coll == Collective::kAllToAllV) {
              // Every rank sends to rank n/2 alone, which receives from all: a gather.
              layout(&req.sendCounts, &req.sendDispls, false);
              layout(&req.counts, &req.displs, static_cast<size_t>(r) == one);
              if (static_cast<size_t>(r) != one) {
                req.counts.assign(static_cast<size_t>(n), 0);
                req.displs.assign(static_cast<size_t>(n), 0);
              }
            } else {
              layout(&req.counts, &req.displs, false);
            }
            return req;
          };
          INFO(a.name << " (" << algorithms::collectiveName(a.coll) << ") n=" << n << " root=" << root
                      << " count=" << count);
          CHECK(check(a, reqOf, n) == "");
          auto s0 = a.build(reqOf(0), layoutOf(0, n, 2));
          if (s0.isOk()) {
            exec::computeAcks(&s0.value(), n);
            withAcks += s0->ackFrom.size() + s0->ackTo.size();
          }
        }
    }
  }
  CHECK(withAcks > 0);
}

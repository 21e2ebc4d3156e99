// Allgather, reduce-scatter, alltoall, gather, scatter, their v-variants and the barrier in
// the in-process world, every algorithm forced through BRAID_ALGO, for rank counts 1..17
// (sampled), counts 0, 1, n-1, 1023 and about 1M, every dtype, every op (bitwise ones on
// integer types), in place and out of place, every kind of root. Every element is compared
// with an independently computed value, and guard bytes around every buffer (and the gaps
// of v-outputs) must stay untouched.

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "support/catch.h"
#include "world/reference.h"
#include "world/world.h"

using namespace braid;
using algorithms::Collective;
using braid::testing::WorldOptions;

namespace {

const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,   DataType::kUint32,
                              DataType::kInt64,   DataType::kUint64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64, DataType::kInt16,   DataType::kUint16,
                              DataType::kFloat8E4M3, DataType::kFloat8E5M2};
const ReduceOp kAllOps[] = {ReduceOp::kSum,  ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                            ReduceOp::kAvg,  ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};

// Data for collectives that only move elements: a hash of (rank, index) so that a block
// from the wrong rank or at the wrong offset shows, in 0..250, exact in every type.
double moveValue(DataType dt, int rank, size_t i) {
  uint64_t h = braid::testing::bitwiseMix((static_cast<uint64_t>(rank) << 40) ^ i) % 251;
  // fp8: -8..8, every integer there exact in both formats.
  if (braid::testing::isFp8(dt)) return static_cast<double>(h % 17) - 8;
  return braid::testing::isUnsignedType(dt) ? static_cast<double>(h) : static_cast<double>(h) - 125;
}

constexpr size_t kGuardBytes = 64;
constexpr unsigned char kFill = 0xAB;

// A buffer with guard bytes on both sides, initially all kFill.
struct Guarded {
  std::vector<unsigned char> mem;
  explicit Guarded(size_t bytes) : mem(bytes + 2 * kGuardBytes, kFill) {}
  unsigned char* data() { return mem.data() + kGuardBytes; }
  bool guardsIntact() const {
    for (size_t i = 0; i < kGuardBytes; ++i)
      if (mem[i] != kFill || mem[mem.size() - 1 - i] != kFill) return false;
    return true;
  }
};

// One call: what every rank passes (v-layouts are derived from `seed` and the rank).
struct Case {
  Collective coll;
  size_t count = 0;
  DataType dt = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool inPlace = false;
  int root = 0;
  int seed = 0;  // v-variants: which uneven layout
};

std::string describe(const Case& c, int n, int rank) {
  std::ostringstream o;
  o << algorithms::collectiveName(c.coll) << " n=" << n << " rank=" << rank << " count=" << c.count << " "
    << dataTypeName(c.dt);
  if (c.coll == Collective::kReduceScatter || c.coll == Collective::kReduceScatterV) o << " " << reduceOpName(c.op);
  if (c.coll == Collective::kGather || c.coll == Collective::kScatter) o << " root=" << c.root;
  if (c.coll == Collective::kAllGatherV || c.coll == Collective::kReduceScatterV || c.coll == Collective::kAllToAllV)
    o << " seed=" << c.seed;
  o << (c.inPlace ? " in-place" : " out-of-place");
  return o.str();
}

// Uneven per-rank counts with zeros, scaled around `count`.
std::vector<size_t> vCounts(int n, size_t count, int seed) {
  std::vector<size_t> v(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    int h = (j * 5 + seed * 3) % 7;
    v[j] = h == 0 ? 0 : count * static_cast<size_t>(h) / 4 + static_cast<size_t>(j % 3);
  }
  return v;
}

// allgatherv displacements: blocks in reverse rank order, one element of gap after each.
std::vector<size_t> vDispls(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size());
  size_t at = 1;
  for (size_t j = counts.size(); j-- > 0;) {
    d[j] = at;
    at += counts[j] + 1;
  }
  return d;
}

// alltoallv: elements rank i sends rank j, and each rank's layouts.
size_t pairCount(int i, int j, size_t count, int seed) {
  int h = (i * 31 + j * 17 + seed * 7) % 5;
  return h == 0 ? 0 : count * static_cast<size_t>(h) / 3 + static_cast<size_t>((i + j) % 2);
}
struct VLayout {
  std::vector<size_t> sendCounts, sendDispls, counts, displs;
};
VLayout alltoallvLayout(int r, int n, size_t count, int seed, bool inPlace) {
  VLayout l;
  for (int j = 0; j < n; ++j) {
    l.sendCounts.push_back(pairCount(r, j, count, seed));
    l.counts.push_back(pairCount(j, r, count, seed));
  }
  l.sendDispls.resize(n);
  l.displs.resize(n);
  size_t at = 2;
  for (int j = 0; j < n; ++j) {  // send blocks in rank order with gaps
    l.sendDispls[j] = at;
    at += (inPlace ? std::max(l.sendCounts[j], l.counts[j]) : l.sendCounts[j]) + 1;
  }
  if (inPlace) {
    l.displs = l.sendDispls;
  } else {
    at = 1;
    for (int j = n; j-- > 0;) {  // receive blocks in reverse order with gaps
      l.displs[j] = at;
      at += l.counts[j] + 2;
    }
  }
  return l;
}
size_t extent(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t m = 0;
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i]) m = std::max(m, displs[i] + counts[i]);
  return m;
}

struct Errors {
  std::mutex mu;
  std::string first;
  int count = 0;
  void note(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (first.empty()) first = e;
    ++count;
  }
};

// Runs `c` on this rank and checks the result; returns false (after noting why) on failure.
bool runCase(core::Communicator& comm, const Case& c, Errors& errors) {
  using braid::testing::loadValue;
  using braid::testing::storeValue;
  const int r = comm.rank();
  const int n = comm.size();
  const size_t es = dataTypeSize(c.dt);
  const size_t un = static_cast<size_t>(n);
  algorithms::Request req;
  req.coll = c.coll;
  req.count = c.count;
  req.dtype = c.dt;
  req.op = c.op;
  req.root = c.root;
  auto fail = [&](const std::string& why) {
    errors.note(describe(c, n, r) + ": " + why);
    return false;
  };
  auto mismatch = [&](size_t i, double got, double want) {
    std::ostringstream o;
    o << "element " << i << " is " << got << ", expected " << want;
    return fail(o.str());
  };
  auto fillMove = [&](unsigned char* p, int rank, size_t first, size_t num) {
    for (size_t i = 0; i < num; ++i) storeValue(c.dt, p, i, moveValue(c.dt, rank, first + i));
  };
  // An input's bytes before the call, and whether the call left them so.
  auto snapshot = [](const unsigned char* p, size_t bytes) { return std::vector<unsigned char>(p, p + bytes); };
  auto unchanged = [](const unsigned char* p, const std::vector<unsigned char>& before) {
    return before.empty() || std::memcmp(p, before.data(), before.size()) == 0;
  };
  auto checkMove = [&](const unsigned char* p, size_t num, auto want) {
    for (size_t i = 0; i < num; ++i) {
      double w = want(i), g = loadValue(c.dt, p, i);
      if (g != w) return mismatch(i, g, w);
    }
    return true;
  };

  switch (c.coll) {
    case Collective::kAllGather:
    case Collective::kAllGatherV: {
      std::vector<size_t> counts(un, c.count), displs(un);
      for (size_t j = 0; j < un; ++j) displs[j] = j * c.count;
      if (c.coll == Collective::kAllGatherV) {
        counts = vCounts(n, c.count, c.seed);
        displs = vDispls(counts);
        req.counts = counts;
        req.displs = displs;
      }
      Guarded out(extent(counts, displs) * es), in(counts[r] * es);
      unsigned char* src = in.data();
      if (c.inPlace) src = out.data() + displs[r] * es;
      fillMove(src, r, 0, counts[r]);
      const auto before = c.inPlace ? std::vector<unsigned char>() : snapshot(in.data(), counts[r] * es);
      req.inPlace = c.inPlace;
      Status s = comm.run(req, src, out.data());
      if (!s.isOk()) return fail(s.toString());
      if (!out.guardsIntact() || !in.guardsIntact()) return fail("wrote outside a buffer");
      std::vector<bool> covered(extent(counts, displs), false);
      for (int b = 0; b < n; ++b) {
        if (!checkMove(out.data() + displs[b] * es, counts[b], [&](size_t i) { return moveValue(c.dt, b, i); }))
          return false;
        for (size_t i = 0; i < counts[b]; ++i) covered[displs[b] + i] = true;
      }
      for (size_t i = 0; i < covered.size(); ++i)
        for (size_t k = 0; !covered[i] && k < es; ++k)
          if (out.data()[i * es + k] != kFill) return fail("wrote into a gap of the output at " + std::to_string(i));
      if (!unchanged(in.data(), before)) return fail("modified its input");
      return true;
    }
    case Collective::kReduceScatter:
    case Collective::kReduceScatterV: {
      std::vector<size_t> counts(un, c.count);
      if (c.coll == Collective::kReduceScatterV) {
        counts = vCounts(n, c.count, c.seed);
        req.counts = counts;
      }
      size_t total = 0, base = 0;
      for (int j = 0; j < n; ++j) {
        if (j < r) base += counts[j];
        total += counts[j];
      }
      Guarded in(total * es), out(counts[r] * es);
      for (size_t i = 0; i < total; ++i) storeValue(c.dt, in.data(), i, braid::testing::inputValue(c.dt, c.op, r, i));
      const auto before = c.inPlace ? std::vector<unsigned char>() : snapshot(in.data(), total * es);
      unsigned char* dst = c.inPlace ? in.data() + base * es : out.data();
      req.inPlace = c.inPlace;
      Status s = comm.run(req, in.data(), dst);
      if (!s.isOk()) return fail(s.toString());
      if (!out.guardsIntact() || !in.guardsIntact()) return fail("wrote outside a buffer");
      for (size_t i = 0; i < counts[r]; ++i) {
        double g = loadValue(c.dt, dst, i);
        double w = braid::testing::expectedAllReduce(c.dt, c.op, n, base + i);
        if (!braid::testing::matches(c.dt, g, w)) return mismatch(i, g, w);
      }
      if (!unchanged(in.data(), before)) return fail("modified its input");
      return true;
    }
    case Collective::kAllToAll:
    case Collective::kAllToAllV: {
      VLayout l;
      if (c.coll == Collective::kAllToAllV) {
        l = alltoallvLayout(r, n, c.count, c.seed, c.inPlace);
        req.sendCounts = l.sendCounts;
        req.sendDispls = l.sendDispls;
        req.counts = l.counts;
        req.displs = l.displs;
      } else {
        for (size_t j = 0; j < un; ++j) {
          l.sendCounts.push_back(c.count);
          l.counts.push_back(c.count);
          l.sendDispls.push_back(j * c.count);
          l.displs.push_back(j * c.count);
        }
      }
      const size_t inElems = extent(l.sendCounts, l.sendDispls), outElems = extent(l.counts, l.displs);
      Guarded in(inElems * es), out(c.inPlace ? 0 : outElems * es);
      if (c.inPlace) in = Guarded(std::max(inElems, outElems) * es);
      for (int j = 0; j < n; ++j) fillMove(in.data() + l.sendDispls[j] * es, r, static_cast<size_t>(j) << 24, l.sendCounts[j]);
      const auto before = c.inPlace ? std::vector<unsigned char>() : snapshot(in.data(), inElems * es);
      unsigned char* dst = c.inPlace ? in.data() : out.data();
      req.inPlace = c.inPlace;
      Status s = comm.run(req, in.data(), dst);
      if (!s.isOk()) return fail(s.toString());
      if (!out.guardsIntact() || !in.guardsIntact()) return fail("wrote outside a buffer");
      for (int j = 0; j < n; ++j) {
        // Rank j's block for this rank was filled with moveValue(j, (r << 24) + i).
        if (!checkMove(dst + l.displs[j] * es, l.counts[j], [&](size_t i) { return moveValue(c.dt, j, (static_cast<size_t>(r) << 24) + i); }))
          return false;
      }
      if (!c.inPlace) {
        std::vector<bool> covered(outElems, false);
        for (int j = 0; j < n; ++j)
          for (size_t i = 0; i < l.counts[j]; ++i) covered[l.displs[j] + i] = true;
        for (size_t i = 0; i < outElems; ++i)
          for (size_t k = 0; !covered[i] && k < es; ++k)
            if (out.data()[i * es + k] != kFill) return fail("wrote into a gap of the output at " + std::to_string(i));
        if (!unchanged(in.data(), before)) return fail("modified its input");
      }
      return true;
    }
    case Collective::kGather: {
      const bool root = r == c.root;
      Guarded out(root ? un * c.count * es : 0), in(c.count * es);
      unsigned char* src = in.data();
      if (root && c.inPlace) src = out.data() + r * c.count * es;
      fillMove(src, r, 0, c.count);
      req.inPlace = root && c.inPlace;
      Status s = comm.run(req, src, root ? out.data() : nullptr);
      if (!s.isOk()) return fail(s.toString());
      if (!out.guardsIntact() || !in.guardsIntact()) return fail("wrote outside a buffer");
      if (root)
        for (int b = 0; b < n; ++b)
          if (!checkMove(out.data() + b * c.count * es, c.count, [&](size_t i) { return moveValue(c.dt, b, i); }))
            return false;
      return true;
    }
    case Collective::kScatter: {
      const bool root = r == c.root;
      Guarded in(root ? un * c.count * es : 0), out(c.count * es);
      if (root) fillMove(in.data(), r, 0, un * c.count);
      const auto before = root && !c.inPlace ? snapshot(in.data(), un * c.count * es) : std::vector<unsigned char>();
      unsigned char* dst = out.data();
      if (root && c.inPlace) dst = in.data() + r * c.count * es;
      req.inPlace = root && c.inPlace;
      Status s = comm.run(req, root ? in.data() : nullptr, dst);
      if (!s.isOk()) return fail(s.toString());
      if (!out.guardsIntact() || !in.guardsIntact()) return fail("wrote outside a buffer");
      if (!checkMove(dst, c.count, [&](size_t i) { return moveValue(c.dt, c.root, r * c.count + i); })) return false;
      if (!unchanged(in.data(), before)) return fail("modified its input");
      return true;
    }
    default:
      return fail("not a collective this test knows");
  }
}

// Which algorithm every collective is forced to, by variant: together the variants cover
// every algorithm of the collectives under test.
std::string algoSpec(int variant) {
  static const char* allgather[] = {"ring", "recursive_doubling", "bruck"};
  static const char* reduceScatter[] = {"ring", "recursive_halving", "direct"};
  static const char* alltoall[] = {"pairwise", "bruck", "bruck"};
  static const char* gather[] = {"direct", "tree", "tree"};
  static const char* scatter[] = {"tree", "direct", "tree"};
  return std::string("allgather:") + allgather[variant] + ";reduce_scatter:" + reduceScatter[variant] +
         ";alltoall:" + alltoall[variant] + ";gather:" + gather[variant] + ";scatter:" + scatter[variant] +
         ";allgatherv:ring;reduce_scatterv:ring;alltoallv:pairwise;barrier:dissemination";
}

// The cases for one world of n ranks. `big`: add counts of about 1M elements. Small worlds
// run every dtype; larger ones (slower on a small machine) a subset that rotates with n.
std::vector<Case> casesFor(int n, bool big) {
  std::vector<Case> cases;
  std::vector<DataType> types(std::begin(kAllTypes), std::end(kAllTypes));
  if (n > 5) {
    types.clear();
    for (int k = 0; k < 4; ++k) types.push_back(kAllTypes[(n + k * 3) % 10]);
  }
  const size_t nm1 = static_cast<size_t>(n > 1 ? n - 1 : 0);
  std::vector<size_t> counts = {0, 1, nm1, 1023};
  const Collective moves[] = {Collective::kAllGather, Collective::kAllToAll, Collective::kGather, Collective::kScatter};
  for (size_t count : counts)
    for (DataType dt : types)
      for (bool ip : {false, true}) {
        for (Collective coll : moves) {
          // Roots: the first, the last and one in the middle, spread over the types.
          int root = coll == Collective::kGather || coll == Collective::kScatter
                         ? (static_cast<int>(dt) * 3 + static_cast<int>(count)) % n
                         : 0;
          cases.push_back({coll, count, dt, ReduceOp::kSum, ip, root, 0});
        }
        // Reductions: every op where it applies, at the interesting counts; sum elsewhere.
        for (ReduceOp op : kAllOps) {
          if (isBitwiseOp(op) && isFloatType(dt)) continue;
          if (op != ReduceOp::kSum && count < 2 && dt != DataType::kInt32) continue;
          cases.push_back({Collective::kReduceScatter, count, dt, op, ip, 0, 0});
        }
      }
  // Every root once for gather and scatter.
  for (int root = 0; root < n; ++root)
    for (Collective coll : {Collective::kGather, Collective::kScatter})
      cases.push_back({coll, 37, DataType::kFloat32, ReduceOp::kSum, root % 2 == 1, root, 0});
  // v-variants: uneven layouts with zeros.
  for (int seed : {0, 1, 2})
    for (size_t count : {size_t{1}, size_t{5}, size_t{700}})
      for (DataType dt : {DataType::kInt8, DataType::kFloat16, DataType::kInt64, DataType::kFloat32})
        for (bool ip : {false, true}) {
          if (n > 5 && (static_cast<int>(dt) + seed + n) % 2) continue;
          cases.push_back({Collective::kAllGatherV, count, dt, ReduceOp::kSum, ip, 0, seed});
          cases.push_back({Collective::kAllToAllV, count, dt, ReduceOp::kSum, ip, 0, seed});
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kBxor})
            if (!(isBitwiseOp(op) && isFloatType(dt))) cases.push_back({Collective::kReduceScatterV, count, dt, op, ip, 0, seed});
        }
  if (big) {
    // About 1M elements in all per call (per rank block (1M+3)/n), on a few types.
    const size_t block = ((size_t{1} << 20) + 3) / static_cast<size_t>(n) + (n % 2);
    for (Collective coll : moves)
      for (DataType dt : {DataType::kUint8, DataType::kFloat32})
        cases.push_back({coll, block, dt, ReduceOp::kSum, dt == DataType::kUint8, n / 2, 0});
    cases.push_back({Collective::kReduceScatter, block, DataType::kFloat32, ReduceOp::kSum, false, 0, 0});
    cases.push_back({Collective::kReduceScatter, block, DataType::kBFloat16, ReduceOp::kAvg, true, 0, 0});
    cases.push_back({Collective::kReduceScatter, block, DataType::kInt32, ReduceOp::kBxor, false, 0, 0});
    cases.push_back({Collective::kAllGatherV, block, DataType::kFloat32, ReduceOp::kSum, false, 0, 1});
    cases.push_back({Collective::kReduceScatterV, block, DataType::kFloat32, ReduceOp::kSum, true, 0, 2});
    cases.push_back({Collective::kAllToAllV, block, DataType::kInt32, ReduceOp::kSum, false, 0, 1});
  }
  return cases;
}

// Runs `cases` in a world; returns the first failure (and how many there were), or "".
std::string runCases(const WorldOptions& o, const std::vector<Case>& cases) {
  Errors errors;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    for (const Case& c : cases)
      if (!runCase(comm, c, errors) && errors.first.find("timed out") != std::string::npos) return;
  });
  if (!init.isOk()) return "init failed: " + init.toString();
  if (errors.count) return errors.first + " (" + std::to_string(errors.count) + " failures)";
  return "";
}

void collectiveWorlds(int variant, std::initializer_list<int> rankCounts, bool big) {
  for (int n : rankCounts) {
    WorldOptions o;
    o.nranks = n;
    o.nchannels = variant == 0 ? 2 : 1;
    o.timeoutSec = 30;
    o.algo = algoSpec(variant);
    INFO("nranks " << n << " BRAID_ALGO " << o.algo);
    CHECK(runCases(o, casesFor(n, big)) == "");
  }
}

}  // namespace

TEST_CASE("ring allgather and reduce-scatter + pairwise alltoall + direct gather + tree scatter with 1-5 ranks", "[world]") {
  collectiveWorlds(0, {1, 2, 3, 4, 5}, true);
}
TEST_CASE("ring allgather and reduce-scatter + pairwise alltoall + direct gather + tree scatter with 6-17 ranks", "[world]") {
  collectiveWorlds(0, {6, 9, 13, 17}, true);
}
TEST_CASE("recursive doubling allgather + recursive halving reduce-scatter + bruck alltoall + tree gather + direct scatter with 1-5 ranks", "[world]") {
  collectiveWorlds(1, {1, 2, 3, 4, 5}, true);
}
TEST_CASE("recursive doubling allgather + recursive halving reduce-scatter + bruck alltoall + tree gather + direct scatter with 6-17 ranks", "[world]") {
  collectiveWorlds(1, {7, 8, 12, 16}, true);
}
TEST_CASE("bruck allgather + direct reduce-scatter + bruck alltoall + tree gather and scatter with 1-5 ranks", "[world]") {
  collectiveWorlds(2, {1, 2, 3, 4, 5}, true);
}
TEST_CASE("bruck allgather + direct reduce-scatter + bruck alltoall + tree gather and scatter with 6-17 ranks", "[world]") {
  collectiveWorlds(2, {6, 11, 16, 17}, true);
}

TEST_CASE("over ucx, zero copy: every algorithm family of the moving collectives, 2-4 ranks", "[world][ucx]") {
  if (!braid::testing::transportAvailable("ucx")) {
    WARN("skipped: no ucx transport plugin in this build");
    return;
  }
  for (int variant : {0, 1, 2}) {
    for (int n : {2, 3, 4}) {
      WorldOptions o;
      o.nranks = n;
      o.nchannels = 2;
      o.transport = "ucx";
      o.slotBytes = 64 * 1024;
      o.nslots = 4;
      o.timeoutSec = 60;
      o.algo = algoSpec(variant);
      std::vector<Case> cases;
      const size_t block = ((size_t{1} << 20) + 3) / static_cast<size_t>(n);
      for (bool ip : {false, true}) {
        for (Collective coll : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll,
                                Collective::kGather, Collective::kScatter})
          cases.push_back({coll, block, DataType::kFloat32, ReduceOp::kSum, ip, n - 1, 0});
        cases.push_back({Collective::kAllGatherV, block, DataType::kUint8, ReduceOp::kSum, ip, 0, 1});
        cases.push_back({Collective::kReduceScatterV, block, DataType::kInt32, ReduceOp::kMax, ip, 0, 2});
        cases.push_back({Collective::kAllToAllV, block, DataType::kInt32, ReduceOp::kSum, ip, 0, 1});
      }
      INFO("nranks " << n << " BRAID_ALGO " << o.algo);
      CHECK(runCases(o, cases) == "");
    }
  }
}

TEST_CASE("ring collectives with tiny slots and shallow FIFOs do not deadlock", "[world]") {
  // 4 KiB slots, 2 per FIFO: every step of a 1M-element call runs in many rounds.
  for (int n : {2, 3, 5, 8}) {
    WorldOptions o;
    o.nranks = n;
    o.nchannels = 2;
    o.slotBytes = 4096;
    o.nslots = 2;
    o.timeoutSec = 20;
    o.algo = algoSpec(0);
    std::vector<Case> cases;
    const size_t big = (size_t{1} << 20) + 3;
    for (DataType dt : {DataType::kFloat32, DataType::kInt8}) {
      cases.push_back({Collective::kAllGather, big / static_cast<size_t>(n), dt, ReduceOp::kSum, false, 0, 0});
      cases.push_back({Collective::kReduceScatter, big / static_cast<size_t>(n), dt, ReduceOp::kSum, true, 0, 0});
      cases.push_back({Collective::kAllGatherV, big / static_cast<size_t>(n), dt, ReduceOp::kSum, true, 0, 1});
      cases.push_back({Collective::kReduceScatterV, big / static_cast<size_t>(n), dt, ReduceOp::kMax, false, 0, 2});
      cases.push_back({Collective::kReduceScatter, 1023, dt, ReduceOp::kMin, false, 0, 0});
    }
    cases.push_back({Collective::kAllGather, big, DataType::kFloat32, ReduceOp::kSum, true, 0, 0});
    INFO("nranks " << n);
    CHECK(runCases(o, cases) == "");
  }
}

TEST_CASE("dissemination barrier - no rank leaves before every rank has entered", "[world]") {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17}) {
    WorldOptions o;
    o.nranks = n;
    o.timeoutSec = 20;
    o.algo = "barrier:dissemination";
    constexpr int kIters = 12;
    std::atomic<int> entered{0};
    Errors errors;
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const int r = comm.rank();
      for (int it = 0; it < kIters; ++it) {
        // One rank, a different one each time, arrives late.
        if (r == it % n) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        entered.fetch_add(1);
        algorithms::Request req;
        req.coll = Collective::kBarrier;
        Status s = comm.run(req, nullptr, nullptr);
        if (!s.isOk()) {
          errors.note("rank " + std::to_string(r) + ": " + s.toString());
          return;
        }
        int seen = entered.load();
        if (seen < n * (it + 1))
          errors.note("rank " + std::to_string(r) + " left barrier " + std::to_string(it) + " when only " +
                      std::to_string(seen - n * it) + " of " + std::to_string(n) + " had entered");
      }
    });
    INFO("nranks " << n);
    REQUIRE(init.isOk());
    CHECK(errors.first == "");
  }
}

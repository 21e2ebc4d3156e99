// Runs under braidrun: a random program of braid calls, the same on every rank, checking
// every result against values computed here. Each step picks a collective (or a group of
// sends and receives, or a group of several collectives), a type, an op, a count, a root and
// in-place or not at random from one seed; the buffers carry guard bytes on both sides and
// the gaps that v-collectives leave must stay untouched, so a write out of bounds is caught
// as well as a wrong value.
//
//   braidrun -np 4 mp_random SEED STEPS [MAX_COUNT]
//
// Prints "mp_random seed S: N steps ok rank R", or the first wrong element of each failing
// step; exits non-zero if any step failed. Every rank makes the same calls whatever its
// checks find, so one wrong step does not desynchronise the next.
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.h"

namespace {

// Per thread: MP_RANDOM_THREADS runs the halves' program on a thread of its own.
thread_local int rank = -1, nranks = 0;
thread_local std::string where;  // the step being checked, for messages
std::atomic<int> failures{0};
std::atomic<int> wrong{0};         // failures that are wrong data, not errors returned
thread_local int myFailures = 0;   // this thread's, errors included
thread_local bool checking = false;  // inside a data check: a failure is wrong data
// MP_RANDOM_KILL=STEP[:RANK]: RANK dies by SIGKILL at STEP (MP_RANDOM_FAULT=stop: stops by
// SIGSTOP, a stalled peer, instead); each survivor ends its program at its first error.
int killStep = -1, victim = 1;
int faultSignal = SIGKILL;

long monoMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}
bool nonblocking = false;  // MP_RANDOM_NONBLOCKING: calls return braidInProgress; checks wait
bool verbose = false;      // MP_RANDOM_VERBOSE: each step before it runs

// splitmix64: one stream every rank draws the program from, and a hash for the data.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  bool chance(int percent) { return below(100) < percent; }
};

uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  Rng r{a * 0x100000001b3ull ^ b * 0x9e3779b1ull ^ c * 0x85ebca77ull ^ d};
  return r.next();
}

struct Type {
  braidDataType_t dt;
  const char* name;
  size_t size;
  bool isFloat;
  bool isSigned;
};
const Type kTypes[] = {
    {braidInt8, "int8", 1, false, true},          {braidUint8, "uint8", 1, false, false},
    {braidInt16, "int16", 2, false, true},        {braidUint16, "uint16", 2, false, false},
    {braidInt32, "int32", 4, false, true},        {braidUint32, "uint32", 4, false, false},
    {braidInt64, "int64", 8, false, true},        {braidUint64, "uint64", 8, false, false},
    {braidFloat16, "float16", 2, true, true},     {braidBFloat16, "bfloat16", 2, true, true},
    {braidFloat32, "float32", 4, true, true},     {braidFloat64, "float64", 8, true, true},
    {braidFloat8e4m3, "float8e4m3", 1, true, true}, {braidFloat8e5m2, "float8e5m2", 1, true, true},
};
constexpr int kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
bool isFp8(const Type& t) { return t.dt == braidFloat8e4m3 || t.dt == braidFloat8e5m2; }
const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg", "band", "bor", "bxor"};

// Small integers are exact in every type used here, so a reduction's result is exact too
// (avg of floats aside, compared with a tolerance).
uint16_t toHalf(double v) {  // v: an integer or power of two well inside half's range
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = std::fabs(v);
  int e = 0;
  double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 15;
  uint16_t mant = static_cast<uint16_t>(std::lround((m * 2 - 1) * 1024));
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}
// OCP 8-bit floats: `mbits` mantissa bits and exponent bias `bias`; v must be exact in them.
uint8_t toFp8(double v, int mbits, int bias) {
  if (v == 0) return 0;
  uint8_t sign = v < 0 ? 0x80 : 0;
  int e = 0;
  double m = std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + bias;
  int mant = static_cast<int>(std::lround((m * 2 - 1) * (1 << mbits)));
  if (exp <= 0) {  // subnormal
    mant = static_cast<int>(std::lround(std::fabs(v) / std::ldexp(1.0, 1 - bias - mbits)));
    exp = 0;
  }
  return static_cast<uint8_t>(sign | (exp << mbits) | mant);
}
double fromFp8(uint8_t b, int mbits, int bias) {
  int exp = (b & 0x7f) >> mbits, mant = b & ((1 << mbits) - 1);
  double v = exp == 0 ? std::ldexp(mant, 1 - bias - mbits) : std::ldexp((1 << mbits) + mant, exp - bias - mbits);
  return (b & 0x80) ? -v : v;
}
double fromHalf(uint16_t h) {
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  if (exp == 31) v = mant ? NAN : INFINITY;
  return (h & 0x8000) ? -v : v;
}
uint16_t toBf16(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
double fromBf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Stores v (an integer, or a float for float types) as element i of p; integer types wrap.
void store(const Type& t, void* p, size_t i, double v) {
  char* at = static_cast<char*>(p) + i * t.size;
  switch (t.dt) {
    case braidFloat16: { uint16_t h = toHalf(v); std::memcpy(at, &h, 2); return; }
    case braidBFloat16: { uint16_t h = toBf16(v); std::memcpy(at, &h, 2); return; }
    case braidFloat32: { float f = static_cast<float>(v); std::memcpy(at, &f, 4); return; }
    case braidFloat64: std::memcpy(at, &v, 8); return;
    case braidFloat8e4m3: *reinterpret_cast<uint8_t*>(at) = toFp8(v, 3, 7); return;
    case braidFloat8e5m2: *reinterpret_cast<uint8_t*>(at) = toFp8(v, 2, 15); return;
    default: {
      uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(v));
      std::memcpy(at, &u, t.size);  // little endian: the low bytes
    }
  }
}
double load(const Type& t, const void* p, size_t i) {
  const char* at = static_cast<const char*>(p) + i * t.size;
  switch (t.dt) {
    case braidFloat16: { uint16_t h; std::memcpy(&h, at, 2); return fromHalf(h); }
    case braidBFloat16: { uint16_t h; std::memcpy(&h, at, 2); return fromBf16(h); }
    case braidFloat32: { float f; std::memcpy(&f, at, 4); return f; }
    case braidFloat64: { double d; std::memcpy(&d, at, 8); return d; }
    case braidFloat8e4m3: return fromFp8(static_cast<uint8_t>(*at), 3, 7);
    case braidFloat8e5m2: return fromFp8(static_cast<uint8_t>(*at), 2, 15);
    default: {
      uint64_t u = 0;
      std::memcpy(&u, at, t.size);
      if (t.isSigned && t.size < 8) {
        int shift = 64 - 8 * static_cast<int>(t.size);
        return static_cast<double>(static_cast<int64_t>(u << shift) >> shift);
      }
      return t.isSigned ? static_cast<double>(static_cast<int64_t>(u)) : static_cast<double>(u);
    }
  }
}
// The value an integer type holds after wrapping (what a sum or product leaves).
double wrap(const Type& t, double v) {
  if (t.isFloat) return v;
  char tmp[8];
  store(t, tmp, 0, v);
  return load(t, tmp, 0);
}

// Element i of rank r's input for a step: small enough that no op overflows a float type.
double inputValue(const Type& t, int op, int r, uint64_t step, size_t i) {
  uint64_t h = mix(step, static_cast<uint64_t>(r), i, 7);
  if (op == braidProd) {
    static const int kSigned[] = {1, 2, -1, 1};
    static const int kUnsigned[] = {1, 2, 3, 1};
    return t.isSigned ? kSigned[h % 4] : kUnsigned[h % 4];
  }
  int span = t.size == 1 ? 100 : 16;
  if (t.dt == braidFloat16 || t.dt == braidBFloat16) span = 9;
  // Every partial sum of up to 8 ranks stays an integer the type holds exactly.
  if (t.dt == braidFloat8e4m3) span = 5;
  if (t.dt == braidFloat8e5m2) span = 3;
  double v = static_cast<double>(h % static_cast<uint64_t>(span));
  return t.isSigned ? v - span / 2 : v;
}

// A pre-multiplied sum's scalar on rank r: exact products, small enough not to overflow.
double preMulScalar(const Type& t, uint64_t step, int r) {
  uint64_t h = mix(step, static_cast<uint64_t>(r), 5, 9);
  if (!t.isFloat) return t.isSigned ? static_cast<double>(static_cast<int>(h % 4) - 1) : static_cast<double>(h % 3 + 1);
  static const double kScalars[] = {1, 2, 0.5, -1};
  return isFp8(t) ? (h % 2 ? 1 : -1) : kScalars[h % 4];
}

double reduceValues(const Type& t, int op, const std::vector<double>& vs) {
  double acc = vs[0];
  for (size_t k = 1; k < vs.size(); ++k) {
    double v = vs[k];
    switch (op) {
      case braidSum:
      case braidAvg: acc = acc + v; break;
      case braidProd: acc = acc * v; break;
      case braidMax: acc = v > acc ? v : acc; break;
      case braidMin: acc = v < acc ? v : acc; break;
      default: {
        int64_t a = static_cast<int64_t>(acc), b = static_cast<int64_t>(v);
        acc = static_cast<double>(op == braidBitAnd ? (a & b) : op == braidBitOr ? (a | b) : (a ^ b));
      }
    }
  }
  acc = wrap(t, acc);
  if (op == braidAvg) {
    if (t.isFloat) return acc / static_cast<double>(vs.size());
    return static_cast<double>(static_cast<int64_t>(acc) / static_cast<int64_t>(vs.size()));
  }
  return acc;
}

// A buffer with guard bytes on both sides; `fill` is the byte its body starts as.
constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xa5, kUntouched = 0x5a;
struct Buffer {
  std::vector<unsigned char> bytes;
  size_t body = 0;
  Buffer(size_t bodyBytes, unsigned char fill) : bytes(bodyBytes + 2 * kGuard, kGuardByte), body(bodyBytes) {
    std::memset(bytes.data() + kGuard, fill, bodyBytes);
  }
  void* data() { return bytes.data() + kGuard; }
  const void* data() const { return bytes.data() + kGuard; }
  bool guardsIntact() const {
    for (size_t k = 0; k < kGuard; ++k)
      if (bytes[k] != kGuardByte || bytes[kGuard + body + k] != kGuardByte) return false;
    return true;
  }
};

void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char* fmt, ...) {
  ++failures;
  ++myFailures;
  if (checking) ++wrong;
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "rank %d %s: %s\n", rank, where.c_str(), what);  // one write, whole
}

bool close(const Type& t, int op, double got, double want) {
  if (got == want) return true;
  if (op != braidAvg || !t.isFloat) return false;
  double tol = (isFp8(t) ? 0.13 : t.size == 2 ? 1e-2 : t.size == 4 ? 1e-6 : 1e-12) * (std::fabs(want) + 1);
  return std::fabs(got - want) <= tol;
}

// Checks elements [first, first+count) of buf against want(i); stops at the first wrong one.
template <typename Want>
bool expectRange(const char* what, const Type& t, int op, const void* buf, size_t first, size_t count, Want want) {
  for (size_t i = first; i < first + count; ++i) {
    double g = load(t, buf, i), w = want(i);
    if (!close(t, op, g, w)) {
      fail("%s: element %zu is %g, expected %g", what, i, g, w);
      return false;
    }
  }
  return true;
}
// Checks that bytes [from, to) of a buffer still hold kUntouched.
bool expectUntouched(const char* what, const Buffer& b, size_t from, size_t to) {
  const unsigned char* p = static_cast<const unsigned char*>(b.data());
  for (size_t k = from; k < to; ++k)
    if (p[k] != kUntouched) {
      fail("%s: byte %zu outside every block was written (0x%02x)", what, k, p[k]);
      return false;
    }
  return true;
}
void expectGuards(const char* what, const Buffer& b) {
  if (!b.guardsIntact()) fail("%s: a write landed outside the buffer", what);
}

// One collective of a step, with everything it needs to be called and checked.
struct Coll {
  int kind = 0;
  const Type* t = nullptr;
  int op = braidSum;
  size_t count = 0;
  int root = 0;
  bool inPlace = false;
  uint64_t step = 0;
  int me = 0, n = 0;   // rank and size in the communicator it ran on
  braidComm_t comm = nullptr;
  bool preMul = false;       // a sum with each rank's input scaled by preMulScalar(rank)
  braidRedOp_t redOp = braidSum;  // the op passed (a pre-multiplied sum's own)
  std::string where;   // its step, for messages
  std::vector<size_t> counts, displs;  // v-collectives: per rank (alltoallv: this rank's sends)
  std::vector<size_t> rcounts, rdispls;  // alltoallv: this rank's receives
  Buffer* send = nullptr;
  Buffer* recv = nullptr;
  std::vector<unsigned char> sent;  // the send buffer as passed: a collective must not write it
  bool failed = false;  // its call returned an error: its buffers mean nothing
};
enum Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kGather, kScatter,
            kAllGatherV, kReduceScatterV, kAllToAllV, kNumKinds };
const char* const kKindNames[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall",
                                  "gather", "scatter", "allgatherv", "reducescatterv", "alltoallv"};

size_t drawCount(Rng& g, size_t maxCount) {
  static const size_t kEdges[] = {0, 1, 2, 3, 7, 8, 63, 64, 65, 1023, 1024, 4097};
  switch (g.below(4)) {
    case 0: return kEdges[g.below(12)];
    case 1: return static_cast<size_t>(g.below(2000));
    case 2: return static_cast<size_t>(g.next() % (maxCount / 16 + 1));
    default: return static_cast<size_t>(g.next() % (maxCount + 1));
  }
}

// alltoallv's count from rank i to rank j: every rank can work out every rank's.
size_t a2avCount(uint64_t step, int i, int j, size_t base) {
  return base == 0 ? 0 : mix(step, static_cast<uint64_t>(i), static_cast<uint64_t>(j), 3) % (base + 1);
}

// Draws one collective (the same on every rank) and fills its buffers for this rank.
Coll draw(Rng& g, uint64_t step, size_t maxCount, braidComm_t comm) {
  Coll c;
  c.step = step;
  c.me = rank;
  c.n = nranks;
  c.comm = comm;
  c.kind = g.below(kNumKinds);
  c.t = &kTypes[g.below(kNumTypes)];
  bool reduces = c.kind == kAllReduce || c.kind == kReduce || c.kind == kReduceScatter || c.kind == kReduceScatterV;
  if (reduces) {
    c.op = g.below(8);
    if (c.t->isFloat && c.op >= braidBitAnd) c.op = g.below(5);
    c.preMul = c.op == braidSum && g.chance(30);
  }
  size_t perRank = drawCount(g, maxCount) / (c.kind == kAllReduce || c.kind == kBroadcast || c.kind == kReduce
                                                 ? 1 : static_cast<size_t>(nranks));
  c.count = perRank;
  c.root = g.below(nranks);
  c.inPlace = g.chance(40) && c.kind != kAllGatherV && c.kind != kReduceScatterV && c.kind != kAllToAllV &&
              c.kind != kGather && c.kind != kScatter;
  const Type& t = *c.t;
  const size_t n = static_cast<size_t>(nranks);
  auto in = [&](int r, size_t i) { return inputValue(t, c.op, r, step, i); };
  size_t sendElems = 0, recvElems = 0;
  switch (c.kind) {
    case kAllReduce: case kBroadcast: case kReduce: sendElems = recvElems = c.count; break;
    case kAllGather: sendElems = c.count; recvElems = n * c.count; break;
    case kReduceScatter: sendElems = n * c.count; recvElems = c.count; break;
    case kAllToAll: sendElems = recvElems = n * c.count; break;
    case kGather: sendElems = c.count; recvElems = n * c.count; break;
    case kScatter: sendElems = n * c.count; recvElems = c.count; break;
    case kAllGatherV: case kReduceScatterV: {
      // Per-rank counts with gaps between the blocks (allgatherv) or packed (reducescatterv).
      size_t at = 0;
      for (size_t r = 0; r < n; ++r) {
        size_t cnt = g.chance(15) ? 0 : static_cast<size_t>(g.next() % (c.count * 2 + 2));
        size_t gap = c.kind == kAllGatherV ? static_cast<size_t>(g.below(5)) : 0;
        at += gap;
        c.counts.push_back(cnt);
        c.displs.push_back(at);
        at += cnt;
      }
      // allgatherv: blocks in a shuffled order, so displacements need not increase.
      if (c.kind == kAllGatherV && g.chance(50) && n > 1) {
        std::vector<size_t> order(n);
        for (size_t r = 0; r < n; ++r) order[r] = n - 1 - r;
        size_t pos = 0;
        for (size_t r : order) {
          pos += static_cast<size_t>(g.below(3));
          c.displs[r] = pos;
          pos += c.counts[r];
        }
        at = pos;
      }
      size_t total = at + static_cast<size_t>(g.below(3));
      if (c.kind == kAllGatherV) { sendElems = c.counts[static_cast<size_t>(rank)]; recvElems = total; }
      else { sendElems = total; recvElems = c.counts[static_cast<size_t>(rank)]; }
      break;
    }
    case kAllToAllV: {
      size_t base = c.count;
      size_t at = 0;
      for (size_t j = 0; j < n; ++j) {
        at += static_cast<size_t>(g.below(3)) * (static_cast<size_t>(rank) % 2);
        c.counts.push_back(a2avCount(step, rank, static_cast<int>(j), base));
        c.displs.push_back(at);
        at += c.counts.back();
      }
      sendElems = at;
      at = 0;
      for (size_t i = 0; i < n; ++i) {
        at += static_cast<size_t>(rank) % 3;
        c.rcounts.push_back(a2avCount(step, static_cast<int>(i), rank, base));
        c.rdispls.push_back(at);
        at += c.rcounts.back();
      }
      recvElems = at + 1;
      break;
    }
  }
  if (c.inPlace) {
    size_t elems = sendElems > recvElems ? sendElems : recvElems;
    c.recv = new Buffer(elems * t.size, kUntouched);
    c.send = nullptr;
    // The input goes where the collective reads it in place.
    size_t off = (c.kind == kAllGather) ? static_cast<size_t>(rank) * c.count : 0;
    for (size_t i = 0; i < sendElems; ++i) store(t, c.recv->data(), off + i, in(rank, i));
  } else {
    c.send = new Buffer(sendElems * t.size, kUntouched);
    c.recv = new Buffer(recvElems * t.size, kUntouched);
    for (size_t i = 0; i < sendElems; ++i) store(t, c.send->data(), i, in(rank, i));
  }
  c.redOp = static_cast<braidRedOp_t>(c.op);
  if (c.preMul) {
    char scalar[8];
    store(t, scalar, 0, preMulScalar(t, step, rank));
    if (braidRedOpCreatePreMulSum(&c.redOp, scalar, t.dt, comm) != braidSuccess) {
      fail("braidRedOpCreatePreMulSum: %s", braidGetLastError(comm));
      c.redOp = braidSum;
      c.preMul = false;  // every rank sums plainly then; this rank has failed already
    }
  }
  return c;
}

const void* sendPtr(Coll& c) {
  if (!c.inPlace) return c.send->data();
  char* base = static_cast<char*>(c.recv->data());
  if (c.kind == kAllGather) return base + static_cast<size_t>(rank) * c.count * c.t->size;
  return base;
}
void* recvPtr(Coll& c) {
  char* base = static_cast<char*>(c.recv->data());
  if (c.inPlace && c.kind == kReduceScatter) return base + static_cast<size_t>(rank) * c.count * c.t->size;
  return base;
}

braidResult_t call(Coll& c, braidComm_t comm) {
  const void* s = sendPtr(c);
  void* r = recvPtr(c);
  const braidDataType_t dt = c.t->dt;
  const braidRedOp_t op = c.redOp;
  switch (c.kind) {
    case kAllReduce: return braidAllReduce(s, r, c.count, dt, op, comm, nullptr);
    case kBroadcast: return braidBroadcast(s, r, c.count, dt, c.root, comm, nullptr);
    case kReduce: return braidReduce(s, r, c.count, dt, op, c.root, comm, nullptr);
    case kAllGather: return braidAllGather(s, r, c.count, dt, comm, nullptr);
    case kReduceScatter: return braidReduceScatter(s, r, c.count, dt, op, comm, nullptr);
    case kAllToAll: return braidAllToAll(s, r, c.count, dt, comm, nullptr);
    case kGather: return braidGather(s, r, c.count, dt, c.root, comm, nullptr);
    case kScatter: return braidScatter(s, r, c.count, dt, c.root, comm, nullptr);
    case kAllGatherV:
      return braidAllGatherV(s, c.counts[static_cast<size_t>(rank)], r, c.counts.data(), c.displs.data(), dt, comm,
                             nullptr);
    case kReduceScatterV: return braidReduceScatterV(s, r, c.counts.data(), dt, op, comm, nullptr);
    case kAllToAllV:
      return braidAllToAllV(s, c.counts.data(), c.displs.data(), r, c.rcounts.data(), c.rdispls.data(), dt, comm,
                            nullptr);
  }
  return braidInternalError;
}

void check(Coll& c) {
  if (c.failed) return;
  rank = c.me;
  nranks = c.n;
  where = c.where;
  struct Checking {
    Checking() { checking = true; }
    ~Checking() { checking = false; }
  } scope;
  const Type& t = *c.t;
  const size_t n = static_cast<size_t>(nranks);
  const int op = c.op;
  auto in = [&](int r, size_t i) { return inputValue(t, op, r, c.step, i); };
  auto reduced = [&](size_t i) {
    std::vector<double> vs;
    for (int r = 0; r < nranks; ++r) vs.push_back(c.preMul ? wrap(t, in(r, i) * preMulScalar(t, c.step, r)) : in(r, i));
    return reduceValues(t, op, vs);
  };
  const void* out = c.recv->data();
  const size_t cnt = c.count;
  bool ok = true;
  switch (c.kind) {
    case kAllReduce: ok = expectRange("result", t, op, out, 0, cnt, reduced); break;
    case kBroadcast: ok = expectRange("result", t, op, out, 0, cnt, [&](size_t i) { return in(c.root, i); }); break;
    case kReduce:
      if (rank == c.root) ok = expectRange("result", t, op, out, 0, cnt, reduced);
      else if (!c.inPlace) ok = expectUntouched("a non-root's receive buffer", *c.recv, 0, c.recv->body);
      break;
    case kAllGather:
      ok = expectRange("result", t, op, out, 0, n * cnt, [&](size_t i) { return in(static_cast<int>(i / (cnt ? cnt : 1)), i % (cnt ? cnt : 1)); });
      break;
    case kReduceScatter:
      ok = expectRange("result", t, op, recvPtr(c), 0, cnt,
                       [&](size_t i) { return reduced(static_cast<size_t>(rank) * cnt + i); });
      break;
    case kAllToAll:
      // Block i of mine is block `rank` of rank i's input.
      ok = expectRange("result", t, op, out, 0, n * cnt, [&](size_t k) {
        size_t i = k / (cnt ? cnt : 1), e = k % (cnt ? cnt : 1);
        return in(static_cast<int>(i), static_cast<size_t>(rank) * cnt + e);
      });
      break;
    case kGather:
      if (rank == c.root)
        ok = expectRange("result", t, op, out, 0, n * cnt,
                         [&](size_t k) { return in(static_cast<int>(k / (cnt ? cnt : 1)), k % (cnt ? cnt : 1)); });
      else
        ok = expectUntouched("a non-root's receive buffer", *c.recv, 0, c.recv->body);
      break;
    case kScatter:
      ok = expectRange("result", t, op, out, 0, cnt, [&](size_t i) { return in(c.root, static_cast<size_t>(rank) * cnt + i); });
      break;
    case kAllGatherV: {
      std::vector<char> covered(c.recv->body / t.size, 0);
      for (size_t r = 0; r < n && ok; ++r) {
        ok = expectRange("result", t, op, out, c.displs[r], c.counts[r],
                         [&](size_t i) { return in(static_cast<int>(r), i - c.displs[r]); });
        for (size_t i = 0; i < c.counts[r]; ++i) covered[c.displs[r] + i] = 1;
      }
      for (size_t i = 0; i < covered.size() && ok; ++i)
        if (!covered[i]) ok = expectUntouched("a gap", *c.recv, i * t.size, (i + 1) * t.size);
      break;
    }
    case kReduceScatterV: {
      size_t first = c.displs[static_cast<size_t>(rank)];
      ok = expectRange("result", t, op, out, 0, c.counts[static_cast<size_t>(rank)],
                       [&](size_t i) { return reduced(first + i); });
      break;
    }
    case kAllToAllV: {
      std::vector<char> covered(c.recv->body / t.size, 0);
      for (size_t i = 0; i < n && ok; ++i) {
        // Inputs of alltoallv are indexed by (destination, element); see fillAllToAllV.
        ok = expectRange("result", t, op, out, c.rdispls[i], c.rcounts[i], [&](size_t k) {
          return inputValue(t, op, static_cast<int>(i), c.step * 131 + static_cast<uint64_t>(rank), k - c.rdispls[i]);
        });
        for (size_t k = 0; k < c.rcounts[i]; ++k) covered[c.rdispls[i] + k] = 1;
      }
      for (size_t i = 0; i < covered.size() && ok; ++i)
        if (!covered[i]) ok = expectUntouched("a gap", *c.recv, i * t.size, (i + 1) * t.size);
      break;
    }
  }
  (void)ok;
  if (c.send && !c.sent.empty() && std::memcmp(c.send->data(), c.sent.data(), c.sent.size()) != 0)
    fail("the send buffer was written");
  if (c.send) expectGuards("send buffer", *c.send);
  expectGuards("receive buffer", *c.recv);
}

// alltoallv's input is indexed by destination so that receivers can compute it.
void fillAllToAllV(Coll& c) {
  for (size_t j = 0; j < static_cast<size_t>(nranks); ++j)
    for (size_t k = 0; k < c.counts[j]; ++k)
      store(*c.t, c.send->data(), c.displs[j] + k,
            inputValue(*c.t, c.op, rank, c.step * 131 + static_cast<uint64_t>(j), k));
}

void release(Coll& c) {
  if (c.preMul && braidRedOpDestroy(c.redOp, c.comm) != braidSuccess)
    fail("braidRedOpDestroy: %s", braidGetLastError(c.comm));
  c.preMul = false;
  delete c.send;
  delete c.recv;
  c.send = c.recv = nullptr;
}

std::string describe(const Coll& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s %s %s count %zu root %d%s", kKindNames[c.kind], c.t->name,
                c.preMul ? "premulsum" : kOpNames[c.op],
                c.count, c.root, c.inPlace ? " in place" : "");
  return buf;
}

// True for a call's result that means it was taken: done, or running in the background.
bool taken(braidResult_t r) { return r == braidSuccess || (nonblocking && r == braidInProgress); }

// Waits until nothing is running on comm in the background; reports its error if any and
// returns false then.
bool settle(braidComm_t comm) {
  if (!nonblocking || !comm) return true;
  braidResult_t r = braidInProgress;
  while (braidCommGetAsyncError(comm, &r) == braidSuccess && r == braidInProgress) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, nullptr);
  }
  if (r == braidSuccess) return true;
  fail("in the background: %s: %s", braidGetErrorString(r), braidGetLastError(comm));
  return false;
}

// A group of sends and receives: a random list of messages, posted by each rank in list
// order (its receives first or its sends first, at random), with self-messages allowed.
void p2pStep(Rng& g, uint64_t step, size_t maxCount, braidComm_t comm) {
  struct Msg { int from, to; size_t count; };
  std::vector<Msg> msgs;
  int nmsg = g.below(3 * nranks + 1);
  size_t cap = maxCount / 4 + 1;
  for (int k = 0; k < nmsg; ++k) {
    Msg m{g.below(nranks), g.below(nranks), 0};
    m.count = g.chance(50) ? static_cast<size_t>(g.below(300)) : static_cast<size_t>(g.next() % cap);
    msgs.push_back(m);
  }
  const Type& t = kTypes[g.below(kNumTypes)];
  bool recvsFirst = g.chance(50);
  char desc[120];
  std::snprintf(desc, sizeof desc, "step %" PRIu64 " group of %d sends and receives, %s", step, nmsg, t.name);
  where = desc;
  std::vector<Buffer*> sends(msgs.size(), nullptr), recvs(msgs.size(), nullptr);
  for (size_t k = 0; k < msgs.size(); ++k) {
    if (msgs[k].from == rank) {
      sends[k] = new Buffer(msgs[k].count * t.size, kUntouched);
      for (size_t i = 0; i < msgs[k].count; ++i) store(t, sends[k]->data(), i, inputValue(t, braidSum, rank, step * 977 + k, i));
    }
    if (msgs[k].to == rank) recvs[k] = new Buffer(msgs[k].count * t.size, kUntouched);
  }
  braidResult_t rc = braidGroupStart();
  for (int pass = 0; pass < 2 && rc == braidSuccess; ++pass) {
    bool postRecvs = (pass == 0) == recvsFirst;
    for (size_t k = 0; k < msgs.size(); ++k) {
      braidResult_t r = braidSuccess;
      if (postRecvs && recvs[k]) r = braidRecv(recvs[k]->data(), msgs[k].count, t.dt, msgs[k].from, comm, nullptr);
      if (!postRecvs && sends[k]) r = braidSend(sends[k]->data(), msgs[k].count, t.dt, msgs[k].to, comm, nullptr);
      if (r != braidSuccess) fail("posting message %zu: %s", k, braidGetLastError(comm));
    }
  }
  rc = braidGroupEnd();
  bool failed = !taken(rc);
  if (failed) fail("braidGroupEnd: %s: %s", braidGetErrorString(rc), braidGetLastError(comm));
  if (!settle(comm)) failed = true;
  checking = !failed;
  for (size_t k = 0; k < msgs.size(); ++k) {
    if (failed) {  // the buffers mean nothing
      delete sends[k];
      delete recvs[k];
      continue;
    }
    if (recvs[k]) {
      const Msg& m = msgs[k];
      expectRange("message", t, braidSum, recvs[k]->data(), 0, m.count,
                  [&](size_t i) { return inputValue(t, braidSum, m.from, step * 977 + k, i); });
      expectGuards("message buffer", *recvs[k]);
    }
    if (sends[k]) {
      expectRange("a send buffer after its send", t, braidSum, sends[k]->data(), 0, msgs[k].count,
                  [&](size_t i) { return inputValue(t, braidSum, rank, step * 977 + k, i); });
      expectGuards("send buffer", *sends[k]);
    }
    delete sends[k];
    delete recvs[k];
  }
  checking = false;
}

// A communicator a program may run steps on, with this process's place in it.
struct Member {
  braidComm_t comm = nullptr;
  int rank = 0, n = 0;
};
Member memberOf(braidComm_t comm) {
  Member m;
  m.comm = comm;
  if (comm) {
    braidCommUserRank(comm, &m.rank);
    braidCommCount(comm, &m.n);
  }
  return m;
}

// Runs `steps` steps drawn from `seed` (the same on every member of `main`): mostly on
// `main`, some on `other` (the same ranks in another order), and, where `sub` is given, some
// on it with a program of its own (every member of `sub` draws the same one from `subSeed`).
void runSteps(uint64_t seed, int steps, size_t maxCount, Member main, Member other, Member sub, uint64_t subSeed,
              uint64_t patienceSeed, int worldRank) {
  // In non-blocking mode collectives may stay in flight for a few steps before their
  // results are checked; `pending` holds them, and a per-rank stream decides when.
  std::vector<Coll> pending;
  Rng patience{patienceSeed};
  auto settleAll = [&]() {
    const int r = rank, n = nranks;  // check() switches to each collective's communicator
    bool settled = true;
    for (const Member* m : {&main, &other, &sub}) settled = settle(m->comm) && settled;
    for (Coll& c : pending) {
      if (!settled) c.failed = true;  // which of them failed cannot be told
      check(c);
      release(c);
    }
    pending.clear();
    rank = r;
    nranks = n;
  };
  Rng g{seed};
  for (int s = 0; s < steps; ++s) {
    const uint64_t step = static_cast<uint64_t>(s);
    if (killStep >= 0 && myFailures > 0) break;  // a peer is gone: this program ends here
    if (s == killStep && worldRank == victim) {
      std::printf("FAULT rank=%d step=%d mono_ms=%ld\n", worldRank, s, monoMs());
      std::fflush(stdout);
      raise(faultSignal);
    }
    const int which = g.below(10);
    Member on = main;
    Rng local = g;
    Rng* pg = &g;
    if (which == 8 && other.comm) on = other;
    if (which == 9 && sub.comm) {
      on = sub;
      local = Rng{subSeed ^ (step << 20)};
      pg = &local;
    }
    braidComm_t comm = on.comm;
    rank = on.rank;
    nranks = on.n;
    int what = pg->below(10);
    if (what == 0) {
      settleAll();
      p2pStep(*pg, step, maxCount, comm);
    } else if (what == 1) {
      settleAll();
      where = "step " + std::to_string(s) + " barrier";
      if (!taken(braidBarrier(comm))) fail("%s", braidGetLastError(comm));
      settle(comm);
    } else {
      // One collective, or several inside a group.
      int k = what == 2 ? 2 + pg->below(3) : 1;
      std::vector<Coll> colls;
      for (int j = 0; j < k; ++j) colls.push_back(draw(*pg, step * 8 + static_cast<uint64_t>(j), maxCount, comm));
      where = "step " + std::to_string(s) + (k > 1 ? " group:" : ":");
      for (Coll& c : colls) {
        where += " [" + describe(c) + "]";
        if (c.kind == kAllToAllV) fillAllToAllV(c);
        if (c.send) c.sent.assign(static_cast<unsigned char*>(c.send->data()),
                                  static_cast<unsigned char*>(c.send->data()) + c.send->body);
      }
      if (verbose) std::fprintf(stderr, "rank %d %s\n", rank, where.c_str());
      if (k > 1) braidGroupStart();
      bool failed = false;
      for (Coll& c : colls) {
        braidResult_t r = call(c, comm);
        if (!taken(r)) {
          fail("%s: %s: %s", describe(c).c_str(), braidGetErrorString(r), braidGetLastError(comm));
          c.failed = true;
          failed = true;
        }
      }
      if (k > 1) {
        braidResult_t r = braidGroupEnd();
        if (!taken(r)) {
          fail("braidGroupEnd: %s: %s", braidGetErrorString(r), braidGetLastError(comm));
          failed = true;
        }
      }
      if (k > 1 && failed)
        for (Coll& c : colls) c.failed = true;
      for (Coll& c : colls) {
        c.where = "step " + std::to_string(s) + ": checking [" + describe(c) + "]";
        pending.push_back(c);
      }
      if (!nonblocking || patience.chance(40)) settleAll();
    }
  }
  settleAll();
}

// Splits `world` into a copy in reverse order and halves, runs the program of `seed` on them
// (the halves' on a thread of its own with `threads`), then destroys the splits, adding the
// time that took to *destroyMs. `killer` is this rank's number in the world the program's
// fault refers to, or -1. False when the splits could not be made.
bool runProgram(braidComm_t world, uint64_t seed, int steps, size_t maxCount, bool threads, int killer,
                long* destroyMs) {
  braidCommUserRank(world, &rank);
  braidCommCount(world, &nranks);
  const int worldRank = rank;
  braidComm_t reversed = nullptr, half = nullptr;
  if (!taken(braidCommSplit(world, 0, nranks - rank, &reversed)) ||
      !taken(braidCommSplit(world, rank % 2, rank, &half))) {
    std::fprintf(stderr, "rank %d split failed: %s\n", rank, braidGetLastError(world));
    return false;
  }
  if (!settle(reversed) || !settle(half)) return false;
  const uint64_t halfSeed = seed ^ (0x1234567ull * static_cast<uint64_t>(worldRank % 2 + 1));
  const uint64_t patienceSeed = seed * 31 + static_cast<uint64_t>(worldRank);
  if (threads) {
    std::thread side([&] {
      runSteps(halfSeed, steps / 2, maxCount, memberOf(half), Member{}, Member{}, 0, patienceSeed + 1, -1);
    });
    runSteps(seed, steps, maxCount, memberOf(world), memberOf(reversed), Member{}, 0, patienceSeed, killer);
    side.join();
  } else {
    runSteps(seed, steps, maxCount, memberOf(world), memberOf(reversed), memberOf(half), halfSeed, patienceSeed,
             killer);
  }
  rank = worldRank;
  const long t0 = monoMs();
  braidCommDestroy(half);
  braidCommDestroy(reversed);
  *destroyMs += monoMs() - t0;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: mp_random SEED STEPS [MAX_COUNT]\n");
    return 2;
  }
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const int steps = std::atoi(argv[2]);
  const size_t maxCount = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 300000;
  verbose = std::getenv("MP_RANDOM_VERBOSE") != nullptr;
  nonblocking = std::getenv("MP_RANDOM_NONBLOCKING") != nullptr;
  const bool threads = std::getenv("MP_RANDOM_THREADS") != nullptr;
  // MP_RANDOM_RECOVER=1 (with MP_RANDOM_KILL): the survivors agree on who failed, shrink the
  // world, and run a new program on what is left.
  const bool recover = std::getenv("MP_RANDOM_RECOVER") != nullptr;
  if (const char* k = std::getenv("MP_RANDOM_KILL")) {
    killStep = std::atoi(k);
    if (const char* colon = std::strchr(k, ':')) victim = std::atoi(colon + 1);
    const char* f = std::getenv("MP_RANDOM_FAULT");
    if (f && std::strcmp(f, "stop") == 0) faultSignal = SIGSTOP;
  }
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.blocking = nonblocking ? 0 : 1;
  braidComm_t world = nullptr;
  if (!taken(braidCommInitFromEnvConfig(&world, &config))) {
    std::fprintf(stderr, "init failed: %s\n", braidGetLastError(nullptr));
    return 1;
  }
  if (!settle(world)) return 1;
  int worldRank = 0;
  braidCommUserRank(world, &worldRank);
  long destroyMs = 0;
  if (!runProgram(world, seed, steps, maxCount, threads, worldRank, &destroyMs)) return 1;
  const long stopped = monoMs();
  if (killStep >= 0 && recover) {
    // Every survivor, whether its program met the failure or not, agrees on who failed.
    rank = worldRank;
    where = "recovery";
    int flag = 1;
    braidResult_t r = braidCommAgree(world, &flag);
    if (r != braidSuccess) {
      fail("braidCommAgree: %s: %s", braidGetErrorString(r), braidGetLastError(world));
      return 1;
    }
    int failed[64];
    int nfailed = 0;
    braidCommGetFailedRanks(world, failed, 64, &nfailed);
    if (nfailed != 1 || failed[0] != victim) fail("agreement counted %d failed ranks, the first %d", nfailed, failed[0]);
    braidComm_t next = nullptr;
    r = braidCommShrink(world, failed, nfailed < 64 ? nfailed : 64, &next, BRAID_SHRINK_DEFAULT);
    if (!taken(r) || !settle(next)) {
      fail("braidCommShrink: %s: %s", braidGetErrorString(r), braidGetLastError(world));
      return 1;
    }
    braidCommDestroy(world);
    const int before = failures.load();
    myFailures = 0;
    killStep = -1;
    if (!runProgram(next, seed ^ 0x5eedull, steps, maxCount, threads, -1, &destroyMs)) return 1;
    int newRank = 0, newN = 0;
    braidCommUserRank(next, &newRank);
    braidCommCount(next, &newN);
    braidCommDestroy(next);
    const bool clean = failures.load() == before && wrong.load() == 0;
    std::printf("RECOVERED rank=%d as rank %d of %d: %s, wrong=%d\n", worldRank, newRank, newN,
                clean ? "every step ok" : "FAILED", wrong.load());
    return clean ? 0 : 1;
  }
  const long t0 = monoMs();
  braidCommDestroy(world);
  destroyMs += monoMs() - t0;
  if (killStep >= 0 && failures > 0) {
    // A survivor: it stopped at the error; nothing that returned success may be wrong.
    std::printf("STOPPED rank=%d wrong=%d mono_ms=%ld destroy_ms=%ld\n", worldRank, wrong.load(), stopped,
                destroyMs);
    return wrong ? 2 : 1;
  }
  if (failures == 0) std::printf("mp_random seed %" PRIu64 ": %d steps ok rank %d\n", seed, steps, worldRank);
  return failures ? 1 : 0;
}

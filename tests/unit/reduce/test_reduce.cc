// Unit tests for the CPU reduce kernels (src/reduce).
//
// Every kernel result is compared, element by element and bit for bit, with a reference
// written here in plain scalar code that shares nothing with the code under test:
//  - integers are combined in 64-bit arithmetic and truncated, which is what wrap-around
//    means;
//  - floats are decoded with ldexp(), combined in double and rounded to float after every
//    step for the types that compute in fp32 (fp32, fp16, bf16). For + * / on two floats
//    that double rounding equals one IEEE fp32 operation (53 >= 2 * 24 + 2), so the
//    reference follows the kernels' defined semantics exactly instead of within a tolerance;
//  - fp16/bf16 results are rounded by searching a table of every finite value for the
//    nearest one (ties to even), not by bit manipulation like the kernels.
// NaNs compare by NaN-ness only: which operand's payload survives is the hardware's choice.
//
// Each kernel test runs at every SIMD level this CPU supports and says which ones it skipped.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define BRAID_TEST_X86 1
#endif

#include "common/types.h"
#include "reduce/reduce.h"
#include "reduce/reduce_testing.h"
#include "support/catch.h"
#include "support/fp8_reference.h"

namespace rd = braid::reduce;
using braid::DataType;
using braid::ReduceOp;
using braid::testing::fp8RefDecode;
using braid::testing::fp8RefEncode;

namespace {

const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,
                              DataType::kUint32,  DataType::kInt64,    DataType::kUint64,
                              DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                              DataType::kFloat64, DataType::kInt16,    DataType::kUint16,
                              DataType::kFloat8E4M3, DataType::kFloat8E5M2};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                            ReduceOp::kAvg};
// Bitwise ops are valid for these only; they get test cases of their own.
const DataType kIntTypes[] = {DataType::kInt8,  DataType::kUint8, DataType::kInt32,
                              DataType::kUint32, DataType::kInt64, DataType::kUint64,
                              DataType::kInt16,  DataType::kUint16};
const ReduceOp kBitwiseOps[] = {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};

// ---- SIMD levels ------------------------------------------------------------------------

// The levels this CPU can run. Levels it cannot run are reported once per test case.
std::vector<const char*> supportedLevels() {
  std::vector<const char*> out;
  for (const char* level : {"scalar", "avx2", "avx512"}) {
    if (rd::testing::setSimdLevelForTest(level)) {
      out.push_back(level);
    } else {
      WARN("SIMD level " << level << " not supported by this CPU or build: skipped");
    }
  }
  REQUIRE(rd::testing::setSimdLevelForTest(nullptr));
  return out;
}

// Forces a level for one scope and restores the automatic choice afterwards, also when an
// assertion leaves the scope early.
class LevelScope {
 public:
  explicit LevelScope(const char* level) { REQUIRE(rd::testing::setSimdLevelForTest(level)); }
  ~LevelScope() { (void)rd::testing::setSimdLevelForTest(nullptr); }
  LevelScope(const LevelScope&) = delete;
  LevelScope& operator=(const LevelScope&) = delete;
};

// ---- reference fp16 / bf16 ----------------------------------------------------------------

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double refHalfToDouble(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 0x1f) {
    v = m != 0 ? kNan : kInf;
  } else if (e == 0) {
    v = std::ldexp(m, -24);
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return (h & 0x8000) ? -v : v;
}

double refBf16ToDouble(uint16_t b) {
  const int e = (b >> 7) & 0xff;
  const int m = b & 0x7f;
  double v;
  if (e == 0xff) {
    v = m != 0 ? kNan : kInf;
  } else if (e == 0) {
    v = std::ldexp(m, -133);
  } else {
    v = std::ldexp(128 + m, e - 134);
  }
  return (b & 0x8000) ? -v : v;
}

bool halfIsNan(uint16_t h) { return (h & 0x7fff) > 0x7c00; }
bool bf16IsNan(uint16_t b) { return (b & 0x7fff) > 0x7f80; }

// All positive finite values of a 16-bit format in bit order (which is value order); the
// encoding of infinity is the table's size.
struct Format16 {
  std::vector<double> values;
  double beyondMax;  // the value one step above the largest finite one (2^16 or 2^128)
};

const Format16& halfFormat() {
  static const Format16 f = [] {
    Format16 t;
    for (uint32_t h = 0; h < 0x7c00; ++h) t.values.push_back(refHalfToDouble(static_cast<uint16_t>(h)));
    t.beyondMax = 65536.0;
    return t;
  }();
  return f;
}

const Format16& bf16Format() {
  static const Format16 f = [] {
    Format16 t;
    for (uint32_t b = 0; b < 0x7f80; ++b) t.values.push_back(refBf16ToDouble(static_cast<uint16_t>(b)));
    t.beyondMax = std::ldexp(1.0, 128);
    return t;
  }();
  return f;
}

// Nearest value of `fmt` to `x`, ties to the even encoding; overflow goes to infinity. NaN
// gives 0x7fff (callers compare NaN-ness only).
uint16_t refRound(const Format16& fmt, double x) {
  if (std::isnan(x)) return 0x7fff;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const size_t infBits = fmt.values.size();
  if (a >= fmt.beyondMax) return static_cast<uint16_t>(sign | infBits);
  // Largest value <= a.
  const size_t lo = static_cast<size_t>(
      std::upper_bound(fmt.values.begin(), fmt.values.end(), a) - fmt.values.begin() - 1);
  const double loV = fmt.values[lo];
  const double hiV = lo + 1 < infBits ? fmt.values[lo + 1] : fmt.beyondMax;
  const double dLo = a - loV;
  const double dHi = hiV - a;
  size_t pick;
  if (dLo < dHi) {
    pick = lo;
  } else if (dHi < dLo) {
    pick = lo + 1;
  } else {
    pick = (lo % 2 == 0) ? lo : lo + 1;
  }
  return static_cast<uint16_t>(sign | pick);
}

uint16_t refRoundHalf(double x) { return refRound(halfFormat(), x); }
uint16_t refRoundBf16(double x) { return refRound(bf16Format(), x); }

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if defined(BRAID_TEST_X86)
// The hardware conversions, for comparison where the CPU has them.
__attribute__((target("f16c"))) uint16_t hwFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}
__attribute__((target("f16c"))) float hwHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }
// CPUID leaf 1, ECX bit 29, as the library asks it (clang before 15 has no "f16c" for
// __builtin_cpu_supports).
bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}
#endif

// Floats worth converting to fp16: every half value, every midpoint between neighbours
// and the floats just either side of it, both signs; random bit patterns; specials.
std::vector<float> halfConversionInputs() {
  std::vector<float> in;
  const Format16& fmt = halfFormat();
  for (size_t i = 0; i < fmt.values.size(); ++i) {
    const double v = fmt.values[i];
    const double w = i + 1 < fmt.values.size() ? fmt.values[i + 1] : fmt.beyondMax;
    const float mid = static_cast<float>((v + w) / 2);  // 12 significant bits: exact
    for (float f : {static_cast<float>(v), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      in.push_back(f);
      in.push_back(-f);
    }
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 1 << 20; ++i) in.push_back(floatOf(rng()));
  for (uint32_t u : {0x00000001u, 0x007fffffu, 0x00800000u, 0x33000000u, 0x33000001u,
                     0x32ffffffu, 0x387fffffu, 0x38800000u, 0x477fe000u, 0x477fefffu,
                     0x477ff000u, 0x477fffffu, 0x47800000u, 0x7f7fffffu, 0x7f800000u,
                     0x7f800001u, 0x7f802000u, 0x7fa00000u, 0x7fc00000u, 0x7fffffffu}) {
    in.push_back(floatOf(u));
    in.push_back(floatOf(u | 0x80000000u));
  }
  return in;
}

// ---- test buffers -------------------------------------------------------------------------

constexpr unsigned char kGuard = 0xA5;

// A buffer of `bytes` at a chosen misalignment from a 64-byte boundary, surrounded by guard
// bytes that a kernel must not touch.
class TestBuf {
 public:
  TestBuf(size_t bytes, size_t misalign) : storage_(bytes + 256, kGuard), bytes_(bytes) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data());
    const size_t pad = (64 - base % 64) % 64;
    data_ = storage_.data() + pad + 64 + misalign;
  }
  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool guardsIntact() const {
    auto intact = [](const unsigned char* p, const unsigned char* end) {
      for (; p < end; ++p) {
        if (*p != kGuard) return false;
      }
      return true;
    };
    return intact(storage_.data(), data_) &&
           intact(data_ + bytes_, storage_.data() + storage_.size());
  }

 private:
  std::vector<unsigned char> storage_;
  unsigned char* data_;
  size_t bytes_;
};

// Random test data: integers are uniform bit patterns (so sums and products overflow);
// floats are mostly moderate values with full-precision mantissas, plus uniform bit
// patterns (huge, tiny, subnormal, inf, NaN) and a sprinkle of named specials.
void fillRandom(DataType dt, unsigned char* p, size_t count, std::mt19937_64& rng) {
  const size_t es = braid::dataTypeSize(dt);
  for (size_t i = 0; i < count; ++i) {
    uint64_t r = rng();
    const unsigned kind = static_cast<unsigned>(rng() % 100);
    uint64_t bits = r;
    const uint64_t sign = (r >> 63) & 1;
    switch (dt) {
      case DataType::kFloat16: {
        if (kind < 70) bits = (sign << 15) | ((7 + r % 17) << 10) | ((r >> 8) & 0x3ff);
        else if (kind >= 95) {
          const uint16_t sp[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x03ff, 0x0400, 0x7bff};
          bits = sp[r % 10];
        }
        break;
      }
      case DataType::kBFloat16: {
        if (kind < 70) bits = (sign << 15) | ((119 + r % 17) << 7) | ((r >> 8) & 0x7f);
        else if (kind >= 95) {
          const uint16_t sp[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0001, 0x007f, 0x0080, 0x7f7f};
          bits = sp[r % 10];
        }
        break;
      }
      case DataType::kFloat32: {
        if (kind < 70) bits = (sign << 31) | ((119 + r % 17) << 23) | ((r >> 8) & 0x7fffff);
        else if (kind >= 95) {
          const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                 0x7f800001u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu};
          bits = sp[r % 10];
        }
        break;
      }
      case DataType::kFloat64: {
        if (kind < 70) bits = (sign << 63) | ((1015 + r % 17) << 52) | ((r >> 8) & 0xfffffffffffffull);
        else if (kind >= 95) {
          const uint64_t sp[] = {0, 1ull << 63, 0x7ff0000000000000ull, 0xfff0000000000000ull,
                                 0x7ff8000000000000ull, 0x7ff0000000000001ull, 1, 0x000fffffffffffffull,
                                 0x0010000000000000ull, 0x7fefffffffffffffull};
          bits = sp[r % 10];
        }
        break;
      }
      default:
        break;
    }
    std::memcpy(p + i * es, &bits, es);  // little-endian: the low bytes
  }
}

// ---- reference reduction --------------------------------------------------------------------

template <class T>
T loadAt(const unsigned char* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void refIntElement(ReduceOp op, const std::vector<const unsigned char*>& srcs, size_t i,
                   unsigned char* out) {
  using Wide = std::conditional_t<std::is_signed<T>::value, int64_t, uint64_t>;
  using U = std::make_unsigned_t<T>;
  if (braid::isBitwiseOp(op)) {
    // Bit by bit, on the zero-extended bit patterns.
    uint64_t acc = static_cast<U>(loadAt<T>(srcs[0], i));
    for (size_t s = 1; s < srcs.size(); ++s) {
      const uint64_t x = static_cast<U>(loadAt<T>(srcs[s], i));
      acc = op == ReduceOp::kBand ? (acc & x) : op == ReduceOp::kBor ? (acc | x) : (acc ^ x);
    }
    const U r = static_cast<U>(acc);
    std::memcpy(out, &r, sizeof(T));
    return;
  }
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) {
    Wide acc = loadAt<T>(srcs[0], i);
    for (size_t s = 1; s < srcs.size(); ++s) {
      const Wide x = loadAt<T>(srcs[s], i);
      acc = op == ReduceOp::kMax ? (acc > x ? acc : x) : (acc < x ? acc : x);
    }
    const T r = static_cast<T>(acc);
    std::memcpy(out, &r, sizeof(T));
    return;
  }
  // Sum and product modulo 2^64, then keep the low bits: wrap-around by definition.
  uint64_t acc = static_cast<uint64_t>(loadAt<T>(srcs[0], i));
  for (size_t s = 1; s < srcs.size(); ++s) {
    const uint64_t x = static_cast<uint64_t>(loadAt<T>(srcs[s], i));
    acc = op == ReduceOp::kProd ? acc * x : acc + x;
  }
  const U r = static_cast<U>(acc);
  std::memcpy(out, &r, sizeof(T));
}

double decodeFloat(DataType dt, const unsigned char* p, size_t i) {
  switch (dt) {
    case DataType::kFloat16: return refHalfToDouble(loadAt<uint16_t>(p, i));
    case DataType::kBFloat16: return refBf16ToDouble(loadAt<uint16_t>(p, i));
    case DataType::kFloat32: return loadAt<float>(p, i);
    case DataType::kFloat8E4M3: return fp8RefDecode(p[i], true);
    case DataType::kFloat8E5M2: return fp8RefDecode(p[i], false);
    default: return loadAt<double>(p, i);
  }
}

void encodeFloat(DataType dt, double v, unsigned char* out) {
  switch (dt) {
    case DataType::kFloat16: {
      const uint16_t h = refRoundHalf(v);
      std::memcpy(out, &h, 2);
      break;
    }
    case DataType::kBFloat16: {
      const uint16_t b = refRoundBf16(v);
      std::memcpy(out, &b, 2);
      break;
    }
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(out, &f, 4);
      break;
    }
    case DataType::kFloat8E4M3: *out = fp8RefEncode(v, true); break;
    case DataType::kFloat8E5M2: *out = fp8RefEncode(v, false); break;
    default:
      std::memcpy(out, &v, 8);
      break;
  }
}

void refFloatElement(DataType dt, ReduceOp op, const std::vector<const unsigned char*>& srcs,
                     size_t i, unsigned char* out) {
  const size_t es = braid::dataTypeSize(dt);
  if (srcs.size() == 1) {
    // One source is a copy of the bits (the contract), not a conversion: E5M2's infinity
    // stays infinity instead of saturating.
    std::memcpy(out, srcs[0] + i * es, es);
    return;
  }
  const bool fp32Compute = dt != DataType::kFloat64;
  double acc = decodeFloat(dt, srcs[0], i);
  for (size_t s = 1; s < srcs.size(); ++s) {
    const double x = decodeFloat(dt, srcs[s], i);
    switch (op) {
      case ReduceOp::kProd: acc = acc * x; break;
      case ReduceOp::kMax: acc = acc > x ? acc : x; break;
      case ReduceOp::kMin: acc = acc < x ? acc : x; break;
      default: acc = acc + x; break;  // kSum, kAvg
    }
    if (fp32Compute) acc = static_cast<float>(acc);
  }
  encodeFloat(dt, acc, out);
}

void refElement(DataType dt, ReduceOp op, const std::vector<const unsigned char*>& srcs, size_t i,
                unsigned char* out) {
  switch (dt) {
    case DataType::kInt8: refIntElement<int8_t>(op, srcs, i, out); break;
    case DataType::kUint8: refIntElement<uint8_t>(op, srcs, i, out); break;
    case DataType::kInt32: refIntElement<int32_t>(op, srcs, i, out); break;
    case DataType::kUint32: refIntElement<uint32_t>(op, srcs, i, out); break;
    case DataType::kInt64: refIntElement<int64_t>(op, srcs, i, out); break;
    case DataType::kUint64: refIntElement<uint64_t>(op, srcs, i, out); break;
    case DataType::kInt16: refIntElement<int16_t>(op, srcs, i, out); break;
    case DataType::kUint16: refIntElement<uint16_t>(op, srcs, i, out); break;
    default: refFloatElement(dt, op, srcs, i, out); break;
  }
}

bool isNanElement(DataType dt, const unsigned char* p) {
  switch (dt) {
    case DataType::kFloat16: return halfIsNan(loadAt<uint16_t>(p, 0));
    case DataType::kBFloat16: return bf16IsNan(loadAt<uint16_t>(p, 0));
    case DataType::kFloat32: return std::isnan(loadAt<float>(p, 0));
    case DataType::kFloat64: return std::isnan(loadAt<double>(p, 0));
    case DataType::kFloat8E4M3: return std::isnan(fp8RefDecode(*p, true));
    case DataType::kFloat8E5M2: return std::isnan(fp8RefDecode(*p, false));
    default: return false;
  }
}

std::string hexBytes(const unsigned char* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = n; i-- > 0;) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

// Compares `count` elements of `got` with `want`; returns "" or a description of the first
// mismatch.
std::string compareElements(DataType dt, const unsigned char* got, const unsigned char* want,
                            size_t count) {
  const size_t es = braid::dataTypeSize(dt);
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* g = got + i * es;
    const unsigned char* w = want + i * es;
    if (std::memcmp(g, w, es) == 0) continue;
    if (isNanElement(dt, g) && isNanElement(dt, w)) continue;
    std::ostringstream os;
    os << "element " << i << ": got " << hexBytes(g, es) << ", want " << hexBytes(w, es);
    return os.str();
  }
  return "";
}

std::string caseName(const char* level, DataType dt, ReduceOp op, size_t count) {
  std::ostringstream os;
  os << level << " " << braid::dataTypeName(dt) << " " << braid::reduceOpName(op) << " count "
     << count;
  return os.str();
}

// Runs reduceN (or reduce2 when `useReduce2`, which needs nsrc == 2) on random data and checks
// every element and the guard bytes. `alias` >= 0 makes dst the buffer of source `alias`;
// `dupSources` makes every odd source the same buffer as source 0.
void checkReduce(const char* level, DataType dt, ReduceOp op, int nsrc, size_t count, int alias,
                 bool misaligned, bool dupSources, bool useReduce2, std::mt19937_64& rng) {
  const size_t es = braid::dataTypeSize(dt);
  const size_t bytes = count * es;
  std::vector<TestBuf> bufs;
  bufs.reserve(nsrc + 1);
  for (int s = 0; s <= nsrc; ++s) {
    // Misaligned: distinct odd byte offsets, so no two pointers share an alignment.
    bufs.emplace_back(bytes, misaligned ? static_cast<size_t>(2 * s + 1) : 0);
  }
  std::vector<const unsigned char*> srcs(nsrc);
  for (int s = 0; s < nsrc; ++s) {
    fillRandom(dt, bufs[s].data(), count, rng);
    srcs[s] = (dupSources && s % 2 == 1) ? bufs[0].data() : bufs[s].data();
  }
  TestBuf& dstBuf = alias >= 0 ? bufs[dupSources && alias % 2 == 1 ? 0 : alias] : bufs[nsrc];
  std::vector<unsigned char> want(bytes);
  for (size_t i = 0; i < count; ++i) refElement(dt, op, srcs, i, want.data() + i * es);

  if (useReduce2) {
    rd::reduce2(dt, op, dstBuf.data(), srcs[0], srcs[1], count);
  } else {
    std::vector<const void*> ptrs(srcs.begin(), srcs.end());
    rd::reduceN(dt, op, dstBuf.data(), ptrs.data(), nsrc, count);
  }

  const std::string err = compareElements(dt, dstBuf.data(), want.data(), count);
  INFO(caseName(level, dt, op, count) << (useReduce2 ? " reduce2" : " reduceN") << " nsrc " << nsrc
       << " alias " << alias << (misaligned ? " misaligned" : "") << (dupSources ? " dup" : "")
       << ": " << err);
  CHECK(err.empty());
  bool guards = true;
  for (const TestBuf& b : bufs) guards = guards && b.guardsIntact();
  CHECK(guards);
}

}  // namespace

// ---- conversions ----------------------------------------------------------------------------

TEST_CASE("halfToFloat is exact for all 65536 halves and round-trips", "[reduce][convert]") {
#if defined(BRAID_TEST_X86)
  const bool f16c = cpuHasF16c();
  if (!f16c) WARN("no F16C on this CPU: not comparing with the hardware conversion");
#endif
  int bad = 0;
  for (uint32_t h32 = 0; h32 < 0x10000; ++h32) {
    const uint16_t h = static_cast<uint16_t>(h32);
    const float f = rd::halfToFloat(h);
    uint32_t want;
    if (halfIsNan(h)) {
      // Quiet NaN, sign and payload kept: what vcvtph2ps produces.
      want = (static_cast<uint32_t>(h & 0x8000) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13);
    } else {
      want = bitsOf(static_cast<float>(refHalfToDouble(h)));
    }
    const uint16_t back = rd::floatToHalf(f);
    const uint16_t wantBack = halfIsNan(h) ? static_cast<uint16_t>(h | 0x0200) : h;
    bool ok = bitsOf(f) == want && back == wantBack;
#if defined(BRAID_TEST_X86)
    if (f16c) ok = ok && bitsOf(hwHalfToFloat(h)) == want;
#endif
    if (!ok && bad++ < 5) {
      INFO("half 0x" << std::hex << h << " -> 0x" << bitsOf(f) << " want 0x" << want
           << ", back 0x" << back);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("floatToHalf rounds to nearest even and matches F16C", "[reduce][convert]") {
#if defined(BRAID_TEST_X86)
  const bool f16c = cpuHasF16c();
#endif
  int bad = 0;
  for (float f : halfConversionInputs()) {
    const uint16_t got = rd::floatToHalf(f);
    const uint32_t u = bitsOf(f);
    uint16_t want;
    if (std::isnan(f)) {
      want = static_cast<uint16_t>(((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff));
    } else {
      want = refRoundHalf(f);
    }
    bool ok = got == want;
#if defined(BRAID_TEST_X86)
    if (f16c) ok = ok && hwFloatToHalf(f) == want;
#endif
    if (!ok && bad++ < 5) {
      INFO("float 0x" << std::hex << u << " -> 0x" << got << " want 0x" << want);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("bfloat16 conversions are exact and round to nearest even", "[reduce][convert]") {
  int bad = 0;
  for (uint32_t b32 = 0; b32 < 0x10000; ++b32) {
    const uint16_t b = static_cast<uint16_t>(b32);
    const float f = rd::bfloat16ToFloat(b);
    bool ok = bitsOf(f) == (b32 << 16);  // widening is exact, NaN payloads included
    if (!bf16IsNan(b)) {
      ok = ok && static_cast<double>(f) == refBf16ToDouble(b) &&
           std::signbit(f) == ((b & 0x8000) != 0) && rd::floatToBfloat16(f) == b;
    } else {
      ok = ok && rd::floatToBfloat16(f) == (b | 0x40);
    }
    if (!ok && bad++ < 5) {
      INFO("bf16 0x" << std::hex << b);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);

  // Every midpoint between neighbours and the floats either side of it, plus random floats.
  std::vector<float> in;
  const Format16& fmt = bf16Format();
  for (size_t i = 0; i < fmt.values.size(); ++i) {
    const double v = fmt.values[i];
    const double w = i + 1 < fmt.values.size() ? fmt.values[i + 1] : fmt.beyondMax;
    const float mid = static_cast<float>((v + w) / 2);
    for (float f : {static_cast<float>(v), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      in.push_back(f);
      in.push_back(-f);
    }
  }
  std::mt19937 rng(777);
  for (int i = 0; i < 1 << 20; ++i) in.push_back(floatOf(rng()));
  for (uint32_t u : {0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x7f800000u, 0x7f800001u,
                     0x7f810000u, 0x7fc00000u, 0x7fffffffu, 0x00000001u, 0x00008000u}) {
    in.push_back(floatOf(u));
    in.push_back(floatOf(u | 0x80000000u));
  }
  bad = 0;
  for (float f : in) {
    const uint16_t got = rd::floatToBfloat16(f);
    const uint32_t u = bitsOf(f);
    const uint16_t want =
        std::isnan(f) ? static_cast<uint16_t>((u >> 16) | 0x40) : refRoundBf16(f);
    if (got != want && bad++ < 5) {
      INFO("float 0x" << std::hex << u << " -> 0x" << got << " want 0x" << want);
      CHECK(got == want);
    }
  }
  CHECK(bad == 0);
}

// ---- dispatch ----------------------------------------------------------------------------------

TEST_CASE("SIMD level dispatch and BRAID_SIMD capping", "[reduce][dispatch]") {
  const std::vector<const char*> levels = supportedLevels();
  REQUIRE(!levels.empty());
  const std::string best = levels.back();
  const std::string chosen = rd::simdLevel();
  CHECK((chosen == "scalar" || chosen == "avx2" || chosen == "avx512"));
  for (const char* level : levels) {
    LevelScope scope(level);
    CHECK(std::string(rd::simdLevel()) == level);
  }
  CHECK(std::string(rd::simdLevel()) == chosen);  // the scope restored the automatic choice
  CHECK_FALSE(rd::testing::setSimdLevelForTest("sse9"));
  CHECK(std::string(rd::simdLevel()) == chosen);

  CHECK(std::string(rd::testing::chooseSimdLevelForTest(nullptr)) == best);
  CHECK(std::string(rd::testing::chooseSimdLevelForTest("")) == best);
  CHECK(std::string(rd::testing::chooseSimdLevelForTest("bogus")) == best);
  CHECK(std::string(rd::testing::chooseSimdLevelForTest("scalar")) == "scalar");
  CHECK(std::string(rd::testing::chooseSimdLevelForTest("avx512")) == best);
  const bool hasAvx2 = std::find_if(levels.begin(), levels.end(), [](const char* l) {
                         return std::string(l) == "avx2";
                       }) != levels.end();
  CHECK(std::string(rd::testing::chooseSimdLevelForTest("avx2")) == (hasAvx2 ? "avx2" : "scalar"));
}

TEST_CASE("simdLevel honours BRAID_SIMD", "[reduce][dispatch]") {
  // CMakeLists.txt also runs this case with BRAID_SIMD=scalar in the environment, so the real
  // getenv path is exercised, not just chooseSimdLevelForTest.
  const char* env = std::getenv("BRAID_SIMD");
  INFO("BRAID_SIMD=" << (env ? env : "(unset)"));
  CHECK(std::string(rd::simdLevel()) == rd::testing::chooseSimdLevelForTest(env));
  if (env != nullptr && std::string(env) == "scalar") CHECK(std::string(rd::simdLevel()) == "scalar");
}

// ---- reductions against the reference -----------------------------------------------------------

TEST_CASE("reduce2 matches the reference for every type, op, length and level", "[reduce]") {
  const size_t kCounts[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65,
                            127, 128, 129, 255, 257, 1003, 4099};
  std::mt19937_64 rng(1);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (size_t count : kCounts) {
          for (int alias : {-1, 0, 1}) {
            for (bool misaligned : {false, true}) {
              checkReduce(level, dt, op, 2, count, alias, misaligned, false, true, rng);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("reduceN matches the reference for 1 to 8 sources", "[reduce]") {
  const size_t kCounts[] = {0, 1, 7, 31, 64, 65, 1003};
  std::mt19937_64 rng(2);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (int nsrc = 1; nsrc <= 8; ++nsrc) {
          for (size_t count : kCounts) {
            for (int alias : {-1, 0, nsrc / 2, nsrc - 1}) {
              for (bool misaligned : {false, true}) {
                checkReduce(level, dt, op, nsrc, count, alias, misaligned, false, false, rng);
              }
            }
            if (nsrc >= 2) checkReduce(level, dt, op, nsrc, count, 1, true, true, false, rng);
          }
        }
      }
    }
  }
}

TEST_CASE("fp16 and bf16 reductions round once per call", "[reduce]") {
  // 1 + 2^-11 + 2^-11 in fp16: each partial sum is a tie that rounds down to 1.0, but the
  // exact total 1 + 2^-10 is representable. Likewise 1 + 2^-8 + 2^-8 in bf16.
  struct Case {
    DataType dt;
    uint16_t one, halfUlp, once, perStep;
  };
  const Case cases[] = {{DataType::kFloat16, 0x3c00, 0x1000, 0x3c01, 0x3c00},
                        {DataType::kBFloat16, 0x3f80, 0x3b80, 0x3f81, 0x3f80}};
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (const Case& c : cases) {
      for (size_t count : {size_t{1}, size_t{9}, size_t{1003}}) {
        std::vector<uint16_t> a(count, c.one), b(count, c.halfUlp), dst(count), step(count);
        for (int nsrc = 3; nsrc <= 8; ++nsrc) {
          // Sources: 1, then two half-ulps, then zeros.
          std::vector<uint16_t> zero(count, 0);
          std::vector<const void*> srcs = {a.data(), b.data(), b.data()};
          while (static_cast<int>(srcs.size()) < nsrc) srcs.push_back(zero.data());
          rd::reduceN(c.dt, ReduceOp::kSum, dst.data(), srcs.data(), nsrc, count);
          INFO(level << " " << braid::dataTypeName(c.dt) << " nsrc " << nsrc << " count " << count);
          CHECK(std::all_of(dst.begin(), dst.end(), [&](uint16_t v) { return v == c.once; }));
        }
        // Two calls round twice, which is what the single call must not do.
        rd::reduce2(c.dt, ReduceOp::kSum, step.data(), a.data(), b.data(), count);
        rd::reduce2(c.dt, ReduceOp::kSum, step.data(), step.data(), b.data(), count);
        CHECK(std::all_of(step.begin(), step.end(), [&](uint16_t v) { return v == c.perStep; }));
      }
    }
  }
}

TEST_CASE("fp16 and bf16 kernels widen and narrow every value bit-exactly", "[reduce]") {
  // max(x, x) widens both operands and narrows the result, so it must give back x for every
  // non-NaN value, and for a NaN the same quiet NaN as the scalar conversions (F16C rules for
  // fp16: quiet bit set, payload kept; bf16: quiet bit set).
  std::vector<uint16_t> all(0x10000);
  for (uint32_t v = 0; v < 0x10000; ++v) all[v] = static_cast<uint16_t>(v);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
      std::vector<uint16_t> got(all.size());
      rd::reduce2(dt, ReduceOp::kMax, got.data(), all.data(), all.data(), all.size());
      int bad = 0;
      for (uint32_t v = 0; v < 0x10000; ++v) {
        const uint16_t h = all[v];
        uint16_t want = h;
        if (dt == DataType::kFloat16 && halfIsNan(h)) want = h | 0x0200;
        if (dt == DataType::kBFloat16 && bf16IsNan(h)) want = h | 0x0040;
        if (got[v] != want && bad++ < 5) {
          INFO(level << " " << braid::dataTypeName(dt) << " 0x" << std::hex << h << " -> 0x"
               << got[v] << " want 0x" << want);
          CHECK(got[v] == want);
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("fp16 and bf16 kernels round every tie to even", "[reduce]") {
  // For every finite value x, x + (half an ulp of x, with x's sign) is exactly a tie between
  // x and its neighbour away from zero, and x - (half an ulp) a tie toward zero; x + a
  // quarter ulp must round back to x. Runs the kernels' vector narrowing on all of them.
  struct Fmt {
    DataType dt;
    int mantBits;
    uint16_t expMask;
  };
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (const Fmt& f : {Fmt{DataType::kFloat16, 10, 0x7c00}, Fmt{DataType::kBFloat16, 7, 0x7f80}}) {
      std::vector<uint16_t> x, d;
      for (uint32_t v = 0; v < 0x10000; ++v) {
        const uint16_t h = static_cast<uint16_t>(v);
        if ((h & f.expMask) == f.expMask) continue;  // inf, NaN
        const int e = (h & f.expMask) >> f.mantBits;
        const uint16_t sign = h & 0x8000;
        // ulp of x is 2^(max(e,1) - bias - mantBits); half and quarter of it are 1 and 2
        // exponent steps lower, representable when that exponent field stays >= 1.
        for (int down : {1, 2}) {
          const int de = (e < 1 ? 1 : e) - f.mantBits - down;
          if (de < 1) continue;
          const uint16_t delta = static_cast<uint16_t>(de << f.mantBits);
          x.push_back(h);
          d.push_back(static_cast<uint16_t>(sign | delta));
          x.push_back(h);
          d.push_back(static_cast<uint16_t>((sign ^ 0x8000) | delta));
        }
      }
      std::vector<uint16_t> got(x.size()), want(x.size());
      rd::reduce2(f.dt, ReduceOp::kSum, got.data(), x.data(), d.data(), x.size());
      std::vector<const unsigned char*> srcs = {reinterpret_cast<const unsigned char*>(x.data()),
                                                reinterpret_cast<const unsigned char*>(d.data())};
      for (size_t i = 0; i < x.size(); ++i) {
        refElement(f.dt, ReduceOp::kSum, srcs, i, reinterpret_cast<unsigned char*>(&want[i]));
      }
      const std::string err =
          compareElements(f.dt, reinterpret_cast<const unsigned char*>(got.data()),
                          reinterpret_cast<const unsigned char*>(want.data()), x.size());
      INFO(level << " " << braid::dataTypeName(f.dt) << " " << x.size() << " cases: " << err);
      CHECK(err.empty());
    }
  }
}

TEST_CASE("fp8 scalar conversions: every code decodes exactly, every float rounds as the OCP reference",
          "[reduce][convert]") {
  for (bool e4m3 : {true, false}) {
    auto dec = [&](uint8_t x) { return e4m3 ? rd::fp8e4m3ToFloat(x) : rd::fp8e5m2ToFloat(x); };
    auto enc = [&](float f) { return e4m3 ? rd::floatToFp8e4m3(f) : rd::floatToFp8e5m2(f); };
    for (int c = 0; c < 256; ++c) {
      const double want = fp8RefDecode(static_cast<uint8_t>(c), e4m3);
      const float got = dec(static_cast<uint8_t>(c));
      INFO((e4m3 ? "e4m3" : "e5m2") << " code " << c);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
        REQUIRE(std::signbit(got) == ((c & 0x80) != 0));
      } else {
        REQUIRE(static_cast<double>(got) == want);
        if (!std::isinf(want)) REQUIRE(enc(got) == c);  // round trip
      }
    }
    // Every midpoint between neighbouring codes and the floats either side of it, both signs;
    // random bit patterns; specials.
    std::vector<float> in;
    const int maxCode = e4m3 ? 0x7e : 0x7b;
    for (int c = 0; c < maxCode; ++c) {
      const double mid = (fp8RefDecode(static_cast<uint8_t>(c), e4m3) + fp8RefDecode(static_cast<uint8_t>(c + 1), e4m3)) / 2;
      const float m = static_cast<float>(mid);  // exact: a few significant bits
      for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, std::numeric_limits<float>::infinity())}) {
        in.push_back(f);
        in.push_back(-f);
      }
    }
    std::mt19937 rng(99);
    for (int i = 0; i < 200000; ++i) in.push_back(floatOf(rng()));
    for (float f : {0.0f, -0.0f, 448.0f, 464.0f, 465.0f, 480.0f, 57344.0f, 61440.0f, 1e9f,
                    static_cast<float>(kInf), static_cast<float>(-kInf), std::nanf("")}) {
      in.push_back(f);
      in.push_back(-f);
    }
    int bad = 0;
    for (float f : in) {
      const uint8_t got = enc(f), want = fp8RefEncode(f, e4m3);
      const bool ok = std::isnan(f) ? std::isnan(fp8RefDecode(got, e4m3)) : got == want;
      if (!ok && bad++ < 5) {
        INFO((e4m3 ? "e4m3" : "e5m2") << " " << f << " -> 0x" << std::hex << int(got) << " want 0x" << int(want));
        CHECK(ok);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("fp8 kernels widen and narrow every code, and round every float as the scalar conversion",
          "[reduce]") {
  // max(x, x) widens and narrows every code (NaNs stay NaN, E5M2's infinities saturate to
  // the largest finite value, as every fp8 store does); the sum of every pair of codes
  // narrows floats the kernels computed, and must round as the scalar conversion does
  // (itself checked against the OCP reference above).
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  std::vector<uint8_t> a, b;
  for (int x = 0; x < 256; ++x)
    for (int y = 0; y < 256; ++y) {
      a.push_back(static_cast<uint8_t>(x));
      b.push_back(static_cast<uint8_t>(y));
    }
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : {DataType::kFloat8E4M3, DataType::kFloat8E5M2}) {
      const bool e4m3 = dt == DataType::kFloat8E4M3;
      std::vector<uint8_t> got(256);
      rd::reduce2(dt, ReduceOp::kMax, got.data(), codes.data(), codes.data(), codes.size());
      for (int c = 0; c < 256; ++c) {
        INFO(level << " " << braid::dataTypeName(dt) << " code " << c);
        const double v = fp8RefDecode(static_cast<uint8_t>(c), e4m3);
        if (std::isnan(v)) CHECK(std::isnan(fp8RefDecode(got[c], e4m3)));
        else if (std::isinf(v)) CHECK(int(got[c]) == ((c & 0x80) | 0x7b));
        else CHECK(int(got[c]) == c);
      }
      std::vector<uint8_t> sum(a.size());
      rd::reduce2(dt, ReduceOp::kSum, sum.data(), a.data(), b.data(), a.size());
      int bad = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const float fa = e4m3 ? rd::fp8e4m3ToFloat(a[i]) : rd::fp8e5m2ToFloat(a[i]);
        const float fb = e4m3 ? rd::fp8e4m3ToFloat(b[i]) : rd::fp8e5m2ToFloat(b[i]);
        const float s = fa + fb;
        const uint8_t want = e4m3 ? rd::floatToFp8e4m3(s) : rd::floatToFp8e5m2(s);
        const bool ok = std::isnan(s) ? std::isnan(fp8RefDecode(sum[i], e4m3)) : sum[i] == want;
        if (!ok && bad++ < 5) {
          INFO(level << " " << braid::dataTypeName(dt) << " 0x" << std::hex << int(a[i]) << " + 0x" << int(b[i])
                     << " -> 0x" << int(sum[i]) << " want 0x" << int(want));
          CHECK(ok);
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("integer sum and product wrap around", "[reduce]") {
  const size_t kCount = 1003;  // vector body and ragged tail
  auto check = [&](DataType dt, ReduceOp op, auto a, auto b, auto want) {
    using T = decltype(a);
    std::vector<T> va(kCount, a), vb(kCount, b), dst(kCount);
    rd::reduce2(dt, op, dst.data(), va.data(), vb.data(), kCount);
    INFO(rd::simdLevel() << " " << braid::dataTypeName(dt) << " " << braid::reduceOpName(op));
    CHECK(std::all_of(dst.begin(), dst.end(), [&](T v) { return v == static_cast<T>(want); }));
  };
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    check(DataType::kInt8, ReduceOp::kSum, int8_t{127}, int8_t{1}, int8_t{-128});
    check(DataType::kInt8, ReduceOp::kProd, int8_t{-128}, int8_t{-1}, int8_t{-128});
    check(DataType::kInt8, ReduceOp::kProd, int8_t{16}, int8_t{16}, int8_t{0});
    check(DataType::kUint8, ReduceOp::kSum, uint8_t{255}, uint8_t{1}, uint8_t{0});
    check(DataType::kUint8, ReduceOp::kProd, uint8_t{200}, uint8_t{2}, uint8_t{144});
    check(DataType::kInt32, ReduceOp::kSum, INT32_MAX, int32_t{1}, INT32_MIN);
    check(DataType::kInt32, ReduceOp::kProd, INT32_MIN, int32_t{-1}, INT32_MIN);
    check(DataType::kInt32, ReduceOp::kAvg, INT32_MIN, int32_t{-1}, INT32_MAX);
    check(DataType::kUint32, ReduceOp::kSum, UINT32_MAX, uint32_t{2}, uint32_t{1});
    check(DataType::kUint32, ReduceOp::kProd, uint32_t{0x10000}, uint32_t{0x10001}, uint32_t{0x10000});
    check(DataType::kInt64, ReduceOp::kSum, INT64_MAX, int64_t{1}, INT64_MIN);
    check(DataType::kInt64, ReduceOp::kProd, INT64_MIN, int64_t{-1}, INT64_MIN);
    check(DataType::kInt64, ReduceOp::kProd, int64_t{0x100000001}, int64_t{0x100000001},
          int64_t{0x200000001});
    check(DataType::kUint64, ReduceOp::kSum, UINT64_MAX, uint64_t{1}, uint64_t{0});
    check(DataType::kUint64, ReduceOp::kProd, uint64_t{1} << 63, uint64_t{2}, uint64_t{0});
    // Signed max/min must order as signed, unsigned as unsigned.
    check(DataType::kInt8, ReduceOp::kMax, int8_t{-1}, int8_t{1}, int8_t{1});
    check(DataType::kUint8, ReduceOp::kMax, uint8_t{255}, uint8_t{1}, uint8_t{255});
    check(DataType::kInt64, ReduceOp::kMin, INT64_MIN, INT64_MAX, INT64_MIN);
    check(DataType::kUint64, ReduceOp::kMin, UINT64_MAX, uint64_t{1}, uint64_t{1});

    // Eight sources of INT32_MAX: 8 * (2^31 - 1) mod 2^32 = -8.
    std::vector<int32_t> m(kCount, INT32_MAX), dst(kCount);
    std::vector<const void*> srcs(8, m.data());
    rd::reduceN(DataType::kInt32, ReduceOp::kSum, dst.data(), srcs.data(), 8, kCount);
    CHECK(std::all_of(dst.begin(), dst.end(), [](int32_t v) { return v == -8; }));
  }
}

TEST_CASE("float max and min follow a > b ? a : b with NaN", "[reduce]") {
  // Documented in reduce.h: a NaN in the later operand wins, one in the earlier is dropped.
  const size_t kCount = 37;
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    {
      std::vector<float> one(kCount, 1.0f), nan(kCount, std::nanf("")), dst(kCount);
      rd::reduce2(DataType::kFloat32, ReduceOp::kMax, dst.data(), one.data(), nan.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](float v) { return std::isnan(v); }));
      rd::reduce2(DataType::kFloat32, ReduceOp::kMax, dst.data(), nan.data(), one.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](float v) { return v == 1.0f; }));
      rd::reduce2(DataType::kFloat32, ReduceOp::kMin, dst.data(), one.data(), nan.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](float v) { return std::isnan(v); }));
      rd::reduce2(DataType::kFloat32, ReduceOp::kMin, dst.data(), nan.data(), one.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](float v) { return v == 1.0f; }));
    }
    {
      std::vector<uint16_t> one(kCount, 0x3c00), nan(kCount, 0x7e00), dst(kCount);
      rd::reduce2(DataType::kFloat16, ReduceOp::kMax, dst.data(), one.data(), nan.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](uint16_t v) { return halfIsNan(v); }));
      rd::reduce2(DataType::kFloat16, ReduceOp::kMax, dst.data(), nan.data(), one.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](uint16_t v) { return v == 0x3c00; }));
    }
    {
      std::vector<uint16_t> one(kCount, 0x3f80), nan(kCount, 0x7fc0), dst(kCount);
      rd::reduce2(DataType::kBFloat16, ReduceOp::kMin, dst.data(), one.data(), nan.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](uint16_t v) { return bf16IsNan(v); }));
      rd::reduce2(DataType::kBFloat16, ReduceOp::kMin, dst.data(), nan.data(), one.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](uint16_t v) { return v == 0x3f80; }));
    }
    {
      std::vector<double> one(kCount, 1.0), nan(kCount, kNan), dst(kCount);
      rd::reduce2(DataType::kFloat64, ReduceOp::kMax, dst.data(), one.data(), nan.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](double v) { return std::isnan(v); }));
      rd::reduce2(DataType::kFloat64, ReduceOp::kMax, dst.data(), nan.data(), one.data(), kCount);
      CHECK(std::all_of(dst.begin(), dst.end(), [](double v) { return v == 1.0; }));
    }
  }
}

// ---- divide ---------------------------------------------------------------------------------------

namespace {

// dst / divisor as the contract defines it, computed independently.
void refDivideElement(DataType dt, const unsigned char* in, size_t i, int divisor,
                      unsigned char* out) {
  switch (dt) {
    case DataType::kInt8: { const int8_t r = static_cast<int8_t>(loadAt<int8_t>(in, i) / divisor); std::memcpy(out, &r, 1); break; }
    case DataType::kUint8: { const uint8_t r = static_cast<uint8_t>(loadAt<uint8_t>(in, i) / static_cast<unsigned>(divisor)); std::memcpy(out, &r, 1); break; }
    case DataType::kInt32: { const int32_t r = static_cast<int32_t>(loadAt<int32_t>(in, i) / static_cast<int64_t>(divisor)); std::memcpy(out, &r, 4); break; }
    case DataType::kUint32: { const uint32_t r = static_cast<uint32_t>(loadAt<uint32_t>(in, i) / static_cast<uint64_t>(divisor)); std::memcpy(out, &r, 4); break; }
    case DataType::kInt64: { const int64_t r = loadAt<int64_t>(in, i) / static_cast<int64_t>(divisor); std::memcpy(out, &r, 8); break; }
    case DataType::kUint64: { const uint64_t r = loadAt<uint64_t>(in, i) / static_cast<uint64_t>(divisor); std::memcpy(out, &r, 8); break; }
    case DataType::kInt16: { const int16_t r = static_cast<int16_t>(loadAt<int16_t>(in, i) / divisor); std::memcpy(out, &r, 2); break; }
    case DataType::kUint16: { const uint16_t r = static_cast<uint16_t>(loadAt<uint16_t>(in, i) / static_cast<unsigned>(divisor)); std::memcpy(out, &r, 2); break; }
    default: {
      // One double division rounded to fp32 is the correctly rounded fp32 quotient.
      double q = decodeFloat(dt, in, i) / divisor;
      if (dt != DataType::kFloat64) q = static_cast<float>(q);
      encodeFloat(dt, q, out);
      break;
    }
  }
}

}  // namespace

TEST_CASE("divideInPlace matches the reference for ints and floats", "[reduce]") {
  const size_t kCounts[] = {0, 1, 7, 31, 64, 1003};
  std::mt19937_64 rng(3);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : kAllTypes) {
      const size_t es = braid::dataTypeSize(dt);
      for (int divisor : {1, 2, 3, 7, 8, 255, 256, 1000}) {
        for (size_t count : kCounts) {
          for (bool misaligned : {false, true}) {
            TestBuf buf(count * es, misaligned ? 3 : 0);
            fillRandom(dt, buf.data(), count, rng);
            std::vector<unsigned char> want(count * es);
            for (size_t i = 0; i < count; ++i) {
              if (divisor == 1) {
                std::memcpy(want.data() + i * es, buf.data() + i * es, es);  // untouched
              } else {
                refDivideElement(dt, buf.data(), i, divisor, want.data() + i * es);
              }
            }
            rd::divideInPlace(dt, buf.data(), count, divisor);
            const std::string err = compareElements(dt, buf.data(), want.data(), count);
            INFO(level << " " << braid::dataTypeName(dt) << " / " << divisor << " count " << count
                 << ": " << err);
            CHECK(err.empty());
            CHECK(buf.guardsIntact());
          }
        }
      }
    }
    // Truncation toward zero, and no narrowing of the divisor to the element type.
    std::vector<int8_t> i8 = {-7, 7, -128, 127};
    rd::divideInPlace(DataType::kInt8, i8.data(), i8.size(), 2);
    CHECK(i8 == std::vector<int8_t>{-3, 3, -64, 63});
    std::vector<uint8_t> u8 = {255, 200, 0};
    rd::divideInPlace(DataType::kUint8, u8.data(), u8.size(), 300);
    CHECK(u8 == std::vector<uint8_t>{0, 0, 0});
    std::vector<int64_t> i64 = {INT64_MIN, -1, INT64_MAX};
    rd::divideInPlace(DataType::kInt64, i64.data(), i64.size(), 7);
    CHECK(i64 == std::vector<int64_t>{INT64_MIN / 7, 0, INT64_MAX / 7});
    std::vector<uint16_t> h = {0x4200, 0x3c00};  // 3.0, 1.0 in fp16
    rd::divideInPlace(DataType::kFloat16, h.data(), h.size(), 3);
    CHECK(h == std::vector<uint16_t>{0x3c00, 0x3555});  // 1.0, 0.333251953125
  }
}

// ---- copy -----------------------------------------------------------------------------------------

TEST_CASE("copy is exact below and above the streaming threshold", "[reduce]") {
  const size_t kSizes[] = {0, 1, 15, 64, 255, 256, 4097, (1u << 20) - 1, 1u << 20,
                           (1u << 20) + 4099, (3u << 20) + 77};
  std::mt19937_64 rng(4);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (size_t bytes : kSizes) {
      for (size_t srcOff : {0, 1, 13}) {
        for (size_t dstOff : {0, 5, 32}) {
          TestBuf src(bytes, srcOff), dst(bytes, dstOff);
          fillRandom(DataType::kUint8, src.data(), bytes, rng);
          rd::copy(dst.data(), src.data(), bytes);
          INFO(level << " bytes " << bytes << " src+" << srcOff << " dst+" << dstOff);
          CHECK(std::memcmp(dst.data(), src.data(), bytes) == 0);
          CHECK(dst.guardsIntact());
        }
      }
    }
    TestBuf same(4096, 0);
    fillRandom(DataType::kUint8, same.data(), 4096, rng);
    std::vector<unsigned char> before(same.data(), same.data() + 4096);
    rd::copy(same.data(), same.data(), 4096);
    CHECK(std::memcmp(same.data(), before.data(), 4096) == 0);
  }
}

// ---- bitwise ops ----------------------------------------------------------------------------------

TEST_CASE("bitwise and, or, xor match the reference for every integer type", "[reduce][bitwise]") {
  // Covers an empty call, tails alone, one vector of every width (64 bytes is a full
  // AVX-512 register of int8, 8 of int64), and unrolled bodies with ragged ends.
  const size_t kCounts[] = {0, 1, 7, 63, 64, 65, 1000, 4099};
  std::mt19937_64 rng(5);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : kIntTypes) {
      for (ReduceOp op : kBitwiseOps) {
        for (size_t count : kCounts) {
          for (int alias : {-1, 0, 1}) {
            for (bool misaligned : {false, true}) {
              checkReduce(level, dt, op, 2, count, alias, misaligned, false, true, rng);
            }
          }
          for (int nsrc = 1; nsrc <= 5; ++nsrc) {
            for (int alias : {-1, 0, nsrc - 1}) {
              for (bool misaligned : {false, true}) {
                checkReduce(level, dt, op, nsrc, count, alias, misaligned, false, false, rng);
              }
            }
            // The same buffer passed as several sources: x & x = x | x = x, x ^ x = 0.
            if (nsrc >= 2) checkReduce(level, dt, op, nsrc, count, 1, true, true, false, rng);
          }
        }
      }
    }
  }
}

TEST_CASE("bitwise ops on known bit patterns", "[reduce][bitwise]") {
  // Uniform random data makes a 5-way AND almost all zeros; these pin the identities and
  // the sign bit down explicitly, through the vector body and the tail.
  const size_t kCount = 1000;
  auto check = [&](DataType dt, ReduceOp op, auto a, auto b, auto c, auto want) {
    using T = decltype(a);
    std::vector<T> va(kCount, a), vb(kCount, b), vc(kCount, c), dst(kCount);
    const void* srcs[3] = {va.data(), vb.data(), vc.data()};
    rd::reduceN(dt, op, dst.data(), srcs, 3, kCount);
    INFO(rd::simdLevel() << " " << braid::dataTypeName(dt) << " " << braid::reduceOpName(op));
    CHECK(std::all_of(dst.begin(), dst.end(), [&](T v) { return v == static_cast<T>(want); }));
  };
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    check(DataType::kInt8, ReduceOp::kBand, int8_t{-1}, int8_t{-128}, int8_t{-64}, int8_t{-128});
    check(DataType::kInt8, ReduceOp::kBor, int8_t{1}, int8_t{-128}, int8_t{6}, int8_t{-121});
    check(DataType::kInt8, ReduceOp::kBxor, int8_t{-1}, int8_t{0x0f}, int8_t{1}, int8_t{-15});
    check(DataType::kUint8, ReduceOp::kBand, uint8_t{0xf0}, uint8_t{0x3c}, uint8_t{0xff}, uint8_t{0x30});
    check(DataType::kUint8, ReduceOp::kBor, uint8_t{0x01}, uint8_t{0x80}, uint8_t{0x10}, uint8_t{0x91});
    check(DataType::kUint8, ReduceOp::kBxor, uint8_t{0xff}, uint8_t{0xff}, uint8_t{0xa5}, uint8_t{0xa5});
    check(DataType::kInt32, ReduceOp::kBand, int32_t{-1}, INT32_MIN, int32_t{-2}, INT32_MIN);
    check(DataType::kInt32, ReduceOp::kBor, INT32_MIN, int32_t{0x1234}, int32_t{0x10000},
          static_cast<int32_t>(0x80011234u));
    check(DataType::kUint32, ReduceOp::kBxor, 0xdeadbeefu, 0xffffffffu, 0x0u, 0x21524110u);
    check(DataType::kInt64, ReduceOp::kBand, int64_t{-1}, INT64_MIN, int64_t{-1}, INT64_MIN);
    check(DataType::kInt64, ReduceOp::kBxor, int64_t{-1}, int64_t{1}, int64_t{0x100000000},
          int64_t{-0x100000002});
    check(DataType::kUint64, ReduceOp::kBor, uint64_t{1} << 63, uint64_t{1} << 32, uint64_t{1},
          (uint64_t{1} << 63) | (uint64_t{1} << 32) | 1);
    check(DataType::kUint64, ReduceOp::kBand, ~uint64_t{0}, 0xf0f0f0f0f0f0f0f0ull,
          0xff00ff00ff00ff00ull, 0xf000f000f000f000ull);
  }
}

TEST_CASE("bitwise ops on float types combine the bits and stay in bounds", "[reduce][bitwise]") {
  // The API rejects these combinations; the kernel table must still hold something safe for
  // them: the documented behaviour is the op on the bits as unsigned integers of the width.
  const DataType kFloatTypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                  DataType::kFloat64, DataType::kFloat8E4M3, DataType::kFloat8E5M2};
  std::mt19937_64 rng(6);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : kFloatTypes) {
      const size_t es = braid::dataTypeSize(dt);
      for (ReduceOp op : kBitwiseOps) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{65}, size_t{1000}}) {
          for (int nsrc : {2, 3}) {
            std::vector<TestBuf> bufs;
            bufs.reserve(nsrc + 1);
            for (int s = 0; s <= nsrc; ++s) bufs.emplace_back(count * es, static_cast<size_t>(s));
            std::vector<const void*> srcs;
            for (int s = 0; s < nsrc; ++s) {
              fillRandom(DataType::kUint64, bufs[s].data(), count * es / 8, rng);
              fillRandom(DataType::kUint8, bufs[s].data() + count * es / 8 * 8, count * es % 8, rng);
              srcs.push_back(bufs[s].data());
            }
            std::vector<unsigned char> want(count * es);
            for (size_t b = 0; b < count * es; ++b) {
              unsigned acc = bufs[0].data()[b];
              for (int s = 1; s < nsrc; ++s) {
                const unsigned x = bufs[s].data()[b];
                acc = op == ReduceOp::kBand ? (acc & x) : op == ReduceOp::kBor ? (acc | x) : (acc ^ x);
              }
              want[b] = static_cast<unsigned char>(acc);
            }
            unsigned char* dst = bufs[nsrc].data();
            if (nsrc == 2) {
              rd::reduce2(dt, op, dst, srcs[0], srcs[1], count);
            } else {
              rd::reduceN(dt, op, dst, srcs.data(), nsrc, count);
            }
            INFO(caseName(level, dt, op, count) << " nsrc " << nsrc);
            CHECK((want.empty() || std::memcmp(dst, want.data(), want.size()) == 0));
            bool guards = true;
            for (const TestBuf& b : bufs) guards = guards && b.guardsIntact();
            CHECK(guards);
          }
        }
      }
    }
  }
}

// ---- scale ----------------------------------------------------------------------------------------

namespace {

// `s` as integer type T, as scale() documents it, computed with trunc() and exact powers of
// two rather than the kernels' comparisons.
template <class T>
T refScalarToInt(double s) {
  if (std::isnan(s)) return 0;
  const double t = std::trunc(s);
  const int bits = static_cast<int>(8 * sizeof(T));
  const double lo = std::is_signed<T>::value ? -std::ldexp(1.0, bits - 1) : 0.0;
  const double hiPlus1 = std::is_signed<T>::value ? std::ldexp(1.0, bits - 1) : std::ldexp(1.0, bits);
  if (t < lo) return std::numeric_limits<T>::min();
  if (t >= hiPlus1) return std::numeric_limits<T>::max();
  return static_cast<T>(t);
}

template <class T>
void refScaleInt(const unsigned char* in, size_t i, double s, unsigned char* out) {
  // Product modulo 2^64, low bits kept: wrap-around by definition.
  const uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(loadAt<T>(in, i)));
  const uint64_t m = static_cast<uint64_t>(static_cast<int64_t>(refScalarToInt<T>(s)));
  const auto r = static_cast<std::make_unsigned_t<T>>(x * m);
  std::memcpy(out, &r, sizeof(T));
}

void refScaleElement(DataType dt, const unsigned char* in, size_t i, double s, unsigned char* out) {
  switch (dt) {
    case DataType::kInt8: refScaleInt<int8_t>(in, i, s, out); break;
    case DataType::kUint8: refScaleInt<uint8_t>(in, i, s, out); break;
    case DataType::kInt32: refScaleInt<int32_t>(in, i, s, out); break;
    case DataType::kUint32: refScaleInt<uint32_t>(in, i, s, out); break;
    case DataType::kInt64: refScaleInt<int64_t>(in, i, s, out); break;
    case DataType::kUint64: refScaleInt<uint64_t>(in, i, s, out); break;
    case DataType::kInt16: refScaleInt<int16_t>(in, i, s, out); break;
    case DataType::kUint16: refScaleInt<uint16_t>(in, i, s, out); break;
    case DataType::kFloat64: encodeFloat(dt, decodeFloat(dt, in, i) * s, out); break;
    default: {
      // An fp32 (or narrower) value times a float has at most 48 significant bits, so the
      // double product is exact and rounding it to float is the fp32 multiply; fp16/bf16
      // then round that once more, from fp32, as the kernel's store does.
      const double p = decodeFloat(dt, in, i) * static_cast<double>(static_cast<float>(s));
      encodeFloat(dt, static_cast<float>(p), out);
      break;
    }
  }
}

}  // namespace

TEST_CASE("scale matches the reference for every type, scalar and length", "[reduce][scale]") {
  const size_t kCounts[] = {0, 1, 7, 63, 64, 65, 1000, 4099};
  const double kScalars[] = {1.0, 0.5, -2.0, 2.9, -2.9, 1.0 / 3, 0.1, 0.0, 1e-3, 255.5, 300.0,
                             -1.5, 65504.0, 1e10, 1e30, 1e300, -1e300, kInf, -kInf, kNan};
  std::mt19937_64 rng(7);
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    for (DataType dt : kAllTypes) {
      const size_t es = braid::dataTypeSize(dt);
      for (double scalar : kScalars) {
        for (size_t count : kCounts) {
          for (int mode = 0; mode < 3; ++mode) {  // out of place, misaligned, in place
            TestBuf src(count * es, mode == 1 ? 3 : 0), dstBuf(count * es, mode == 1 ? 6 : 0);
            fillRandom(dt, src.data(), count, rng);
            std::vector<unsigned char> want(count * es);
            for (size_t i = 0; i < count; ++i) refScaleElement(dt, src.data(), i, scalar, want.data() + i * es);
            unsigned char* dst = mode == 2 ? src.data() : dstBuf.data();
            rd::scale(dt, dst, src.data(), scalar, count);
            const std::string err = compareElements(dt, dst, want.data(), count);
            INFO(level << " " << braid::dataTypeName(dt) << " * " << scalar << " count " << count
                 << (mode == 1 ? " misaligned" : mode == 2 ? " in place" : "") << ": " << err);
            CHECK(err.empty());
            CHECK(src.guardsIntact());
            CHECK(dstBuf.guardsIntact());
          }
        }
      }
    }
  }
}

TEST_CASE("scale rounding and integer conversion, by example", "[reduce][scale]") {
  const size_t kCount = 1000;
  for (const char* level : supportedLevels()) {
    LevelScope scope(level);
    INFO(level);
    // fp16: 1 * (1 + 2^-11) is exactly a tie, to even 1.0; (1 + 2^-10)(1 + 2^-11) is just
    // above the tie between 1 + 2^-10 and 1 + 2^-9 (the 2^-21 term survives in fp32), so up.
    {
      std::vector<uint16_t> h(kCount);
      for (size_t i = 0; i < kCount; ++i) h[i] = i % 2 ? 0x3c01 : 0x3c00;
      rd::scale(DataType::kFloat16, h.data(), h.data(), 1.0 + std::ldexp(1.0, -11), kCount);
      for (size_t i = 0; i < kCount; ++i) CHECK(h[i] == (i % 2 ? 0x3c02 : 0x3c00));
      std::vector<uint16_t> big(kCount, 0x7bff), out(kCount);  // 65504 * 2 overflows to inf
      rd::scale(DataType::kFloat16, out.data(), big.data(), 2.0, kCount);
      CHECK(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == 0x7c00; }));
    }
    // bf16: 1 * (1 + 2^-8) ties to 1.0; (1 + 2^-7)(1 + 2^-8) rounds up to 1 + 2^-6.
    {
      std::vector<uint16_t> b(kCount);
      for (size_t i = 0; i < kCount; ++i) b[i] = i % 2 ? 0x3f81 : 0x3f80;
      rd::scale(DataType::kBFloat16, b.data(), b.data(), 1.0 + std::ldexp(1.0, -8), kCount);
      for (size_t i = 0; i < kCount; ++i) CHECK(b[i] == (i % 2 ? 0x3f82 : 0x3f80));
    }
    // float32 multiplies by (float)scalar, not by the double. With s = 1 + 2^-24 + 2^-40,
    // (float)s = 1 + 2^-23 and 3 * (1 + 2^-23) = 3 + 1.5 ulp, a tie that goes to even
    // 3 + 2 ulp (0x40400002); rounding the exact 3 * s = 3 + 0.75 ulp + tiny would give
    // 0x40400001 instead.
    {
      std::vector<float> f(kCount, 3.0f);
      rd::scale(DataType::kFloat32, f.data(), f.data(),
                1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -40), kCount);
      CHECK(std::all_of(f.begin(), f.end(), [](float v) { return bitsOf(v) == 0x40400002u; }));
      std::vector<double> d(kCount, 3.0);
      rd::scale(DataType::kFloat64, d.data(), d.data(), 1.0 / 3, kCount);
      CHECK(std::all_of(d.begin(), d.end(), [](double v) { return v == 3.0 * (1.0 / 3); }));
    }
    // Integers: truncation toward zero, then a wrapping multiply; saturation out of range.
    {
      std::vector<int8_t> i8 = {-7, 100, 1, -128};
      std::vector<int8_t> o8(i8.size());
      rd::scale(DataType::kInt8, o8.data(), i8.data(), 2.9, i8.size());
      CHECK(o8 == std::vector<int8_t>{-14, -56, 2, 0});
      rd::scale(DataType::kInt8, o8.data(), i8.data(), -2.9, i8.size());
      CHECK(o8 == std::vector<int8_t>{14, 56, -2, 0});
      rd::scale(DataType::kInt8, o8.data(), i8.data(), 1000.0, i8.size());  // x * 127
      CHECK(o8 == std::vector<int8_t>{static_cast<int8_t>(-889), static_cast<int8_t>(12700), 127,
                                      -128});
      std::vector<uint8_t> u8 = {1, 2, 255};
      rd::scale(DataType::kUint8, u8.data(), u8.data(), -1.5, u8.size());  // clamps to 0
      CHECK(u8 == std::vector<uint8_t>{0, 0, 0});
      std::vector<int64_t> i64 = {3, -3, INT64_MAX};
      rd::scale(DataType::kInt64, i64.data(), i64.data(), 0.99, i64.size());
      CHECK(i64 == std::vector<int64_t>{0, 0, 0});
      std::vector<uint64_t> u64 = {1, 2};
      rd::scale(DataType::kUint64, u64.data(), u64.data(), 1e30, u64.size());
      CHECK(u64 == std::vector<uint64_t>{UINT64_MAX, UINT64_MAX - 1});
      std::vector<int32_t> i32(kCount, 5);
      rd::scale(DataType::kInt32, i32.data(), i32.data(), kNan, kCount);
      CHECK(std::all_of(i32.begin(), i32.end(), [](int32_t v) { return v == 0; }));
    }
  }
}

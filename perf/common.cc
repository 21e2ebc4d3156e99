#include "common.h"

#include <getopt.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <ctime>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_buffers.h"

namespace braid::perf {

// ---- data types --------------------------------------------------------------------------

namespace {

// -d all runs these, in nccl-tests' order.
constexpr braidDataType_t kAllTypes[] = {braidInt8,       braidUint8,      braidInt32,   braidUint32,  braidInt64,
                                         braidUint64,     braidFloat16,    braidFloat32, braidFloat64, braidBFloat16,
                                         braidFloat8e4m3, braidFloat8e5m2, braidInt16,   braidUint16};
constexpr braidRedOp_t kAllOps[] = {braidSum, braidProd, braidMax, braidMin, braidAvg};

struct TypeAlias {
  const char* name;
  braidDataType_t dt;
};
// nccl-tests' names first, then the spellings PyTorch and NumPy users reach for.
constexpr TypeAlias kTypeAliases[] = {
    {"int8", braidInt8},         {"uint8", braidUint8},     {"int32", braidInt32},     {"uint32", braidUint32},
    {"int64", braidInt64},       {"uint64", braidUint64},   {"half", braidFloat16},    {"float", braidFloat32},
    {"double", braidFloat64},    {"bfloat16", braidBFloat16}, {"float16", braidFloat16}, {"fp16", braidFloat16},
    {"bf16", braidBFloat16},     {"float32", braidFloat32}, {"fp32", braidFloat32},    {"float64", braidFloat64},
    {"fp64", braidFloat64},      {"int", braidInt32},       {"char", braidInt8},
    {"f8e4m3", braidFloat8e4m3}, {"f8e5m2", braidFloat8e5m2}, {"int16", braidInt16}, {"uint16", braidUint16},
    {"float8_e4m3fn", braidFloat8e4m3}, {"float8_e5m2", braidFloat8e5m2}, {"fp8_e4m3", braidFloat8e4m3},
    {"fp8_e5m2", braidFloat8e5m2}, {"short", braidInt16},
};

}  // namespace

size_t dataTypeSize(braidDataType_t dt) {
  switch (dt) {
    case braidInt8:
    case braidUint8:
    case braidFloat8e4m3:
    case braidFloat8e5m2: return 1;
    case braidInt16:
    case braidUint16:
    case braidFloat16:
    case braidBFloat16: return 2;
    case braidInt32:
    case braidUint32:
    case braidFloat32: return 4;
    case braidInt64:
    case braidUint64:
    case braidFloat64: return 8;
  }
  return 1;
}

const char* dataTypeName(braidDataType_t dt) {
  switch (dt) {
    case braidInt8: return "int8";
    case braidUint8: return "uint8";
    case braidInt32: return "int32";
    case braidUint32: return "uint32";
    case braidInt64: return "int64";
    case braidUint64: return "uint64";
    case braidFloat16: return "half";
    case braidBFloat16: return "bfloat16";
    case braidFloat32: return "float";
    case braidFloat64: return "double";
    case braidFloat8e4m3: return "f8e4m3";
    case braidFloat8e5m2: return "f8e5m2";
    case braidInt16: return "int16";
    case braidUint16: return "uint16";
  }
  return "?";
}

const char* redOpName(braidRedOp_t op) {
  switch (op) {
    case braidSum: return "sum";
    case braidProd: return "prod";
    case braidMax: return "max";
    case braidMin: return "min";
    case braidAvg: return "avg";
    case braidBitAnd: return "band";
    case braidBitOr: return "bor";
    case braidBitXor: return "bxor";
    default: return "?";  // premultiplied-sum ops, made at run time, are not offered (parseOp)
  }
}

bool isSignedType(braidDataType_t dt) {
  return dt != braidUint8 && dt != braidUint16 && dt != braidUint32 && dt != braidUint64;
}

double valueLimit(braidDataType_t dt) {
  switch (dt) {
    case braidInt8: return 127;
    case braidUint8: return 254;
    case braidInt32: return 2147483647.0;
    case braidUint32: return 4294967294.0;
    // 64-bit integers: the reference computes in double, exact up to 2^53.
    case braidInt64:
    case braidUint64: return 9007199254740992.0;
    case braidFloat16: return 2048;  // 11-bit significand
    case braidBFloat16: return 256;  // 8-bit significand
    case braidFloat32: return 16777216.0;
    case braidFloat64: return 9007199254740992.0;
    case braidFloat8e4m3: return 16;  // 4-bit significand
    case braidFloat8e5m2: return 8;   // 3-bit significand
    case braidInt16: return 32767;
    case braidUint16: return 65534;
  }
  return 0;
}

void fillSentinel(braidDataType_t dt, void* buf, size_t count) {
  switch (dt) {
    case braidInt8: fillElements(dt, buf, count, [](size_t) { return -128.0; }); return;
    case braidInt32: fillElements(dt, buf, count, [](size_t) { return -2147483648.0; }); return;
    case braidInt64: fillElements(dt, buf, count, [](size_t) { return -9223372036854775808.0; }); return;
    case braidInt16: fillElements(dt, buf, count, [](size_t) { return -32768.0; }); return;
    // All-ones bytes: the unsigned maximum, and a NaN for every float type.
    default: std::memset(buf, 0xff, count * dataTypeSize(dt)); return;
  }
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf or NaN, payload kept
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise into a float (which has the range to hold it exactly).
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t absBits = bits & 0x7fffffffu;
  if (absBits >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (absBits > 0x7f800000u ? 0x200u | ((absBits >> 13) & 0x3ffu) : 0));
  }
  if (absBits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  const int exp = static_cast<int>(absBits >> 23) - 127;
  if (exp >= -14) {
    // Normal half: drop 13 bits, rounding to nearest even; a carry into the exponent is the
    // correct result.
    uint32_t m = absBits - (112u << 23);
    uint32_t rounded = (m + 0x0fffu + ((m >> 13) & 1u)) >> 13;
    return static_cast<uint16_t>(sign | rounded);
  }
  if (exp < -25) return sign;  // below half the smallest subnormal
  // Subnormal half: shift the full significand into place, rounding to nearest even.
  uint32_t m = (absBits & 0x7fffffu) | 0x800000u;
  int shift = -exp - 1;  // 14..24
  uint32_t half = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t mid = 1u << (shift - 1);
  if (rem > mid || (rem == mid && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

double fp8ToDouble(uint8_t x, bool e4m3) {
  const int mantBits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (x & 0x7f) >> mantBits, m = x & ((1 << mantBits) - 1);
  const int maxExp = e4m3 ? 15 : 31;
  double v;
  if (e4m3 && e == maxExp && m == 7) v = std::nan("");
  else if (!e4m3 && e == maxExp) v = m ? std::nan("") : HUGE_VAL;
  else if (e == 0) v = std::ldexp(m, 1 - bias - mantBits);
  else v = std::ldexp((1 << mantBits) + m, e - bias - mantBits);
  return (x & 0x80) ? -v : v;
}

uint8_t exactToFp8(double v, bool e4m3) {
  const int mantBits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  int e = 0;
  (void)std::frexp(a, &e);
  e -= 1;  // a = 1.m * 2^e
  if (e < 1 - bias) return static_cast<uint8_t>(sign | static_cast<int>(std::ldexp(a, bias - 1 + mantBits)));
  const int m = static_cast<int>(std::ldexp(a, mantBits - e)) - (1 << mantBits);
  return static_cast<uint8_t>(sign | ((e + bias) << mantBits) | m);
}

// ---- value schemes -----------------------------------------------------------------------

namespace {

// A well-mixed 64-bit hash of (rank, index): inputs look random to the library, so no
// pattern in them can hide a misplaced chunk, yet every rank can recompute anyone's input.
inline uint64_t mix(int rank, size_t index) {
  uint64_t x = static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull ^
               (static_cast<uint64_t>(rank) + 1) * 0xc2b2ae3d27d4eb4full;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return x;
}

}  // namespace

ReduceValues::ReduceValues(braidDataType_t dt, braidRedOp_t op, int nranks)
    : op_(op), nranks_(nranks < 1 ? 1 : nranks), signed_(isSignedType(dt)) {
  const long long limit = static_cast<long long>(valueLimit(dt));
  const long long n = nranks_;
  switch (op_) {
    case braidSum:
      // nranks values of at most sumMax_ add up to at most limit; with more ranks than the
      // limit allows even for 1s, fall back to one 1 per element (sumMax_ = -1).
      sumMax_ = limit / n >= 1 ? limit / n : -1;
      break;
    case braidAvg:
      // Each rank's value is at most sumMax_, and the last rank adds up to n - 1 to make the
      // sum a multiple of n: n * sumMax_ + n - 1 <= limit. -1: too many ranks, use zeros.
      sumMax_ = (limit - n + 1) / n >= 0 && limit >= n - 1 ? (limit - n + 1) / n : -1;
      break;
    case braidProd: {
      // At most k 2s per element, with 2^k <= limit; a rank holds a 2 where
      // (index + rank) % prodPeriod_ == 0, which happens for at most ceil(n / period) ranks.
      long long k = 0;
      while ((2LL << k) <= limit && k < 62) ++k;
      prodPeriod_ = std::max<long long>(3, (n + k - 1) / k);
      break;
    }
    case braidMax:
    case braidMin:
    default:  // (the others are not offered: parseOp)
      sumMax_ = limit;
      break;
  }
}

double ReduceValues::input(int rank, size_t index) const {
  const uint64_t h = mix(rank, index);
  switch (op_) {
    case braidSum:
      if (sumMax_ < 0) return index % static_cast<size_t>(nranks_) == static_cast<size_t>(rank) ? 1.0 : 0.0;
      return static_cast<double>(h % static_cast<uint64_t>(sumMax_ + 1));
    case braidAvg: {
      if (sumMax_ < 0) return 0.0;
      const uint64_t m = static_cast<uint64_t>(sumMax_ + 1);
      if (rank != nranks_ - 1) return static_cast<double>(h % m);
      uint64_t sum = 0;
      for (int r = 0; r < nranks_; ++r) sum += mix(r, index) % m;
      const uint64_t n = static_cast<uint64_t>(nranks_);
      return static_cast<double>(h % m + (n - sum % n) % n);
    }
    case braidProd:
      return (index + static_cast<size_t>(rank)) % static_cast<size_t>(prodPeriod_) == 0 ? 2.0 : 1.0;
    case braidMax:
    case braidMin: {
      const uint64_t r = static_cast<uint64_t>(sumMax_);
      if (!signed_) return static_cast<double>(h % (r + 1));
      return static_cast<double>(static_cast<long long>(h % (2 * r + 1)) - sumMax_);
    }
    default: break;  // not offered (parseOp)
  }
  return 0.0;
}

double ReduceValues::expected(size_t index) const {
  double acc = input(0, index);
  for (int r = 1; r < nranks_; ++r) {
    const double v = input(r, index);
    switch (op_) {
      case braidSum:
      case braidAvg: acc += v; break;
      case braidProd: acc *= v; break;
      case braidMax: acc = std::max(acc, v); break;
      case braidMin: acc = std::min(acc, v); break;
      default: break;  // not offered (parseOp)
    }
  }
  // The sum is a multiple of nranks by construction, so this division is exact.
  if (op_ == braidAvg) acc /= nranks_;
  return acc;
}

double rankValue(braidDataType_t dt, int rank, size_t index) {
  // 97 is prime and larger than any step between ranks we expect, so two ranks' values
  // differ at every index unless their ranks differ by a multiple of 97.
  if (dt == braidFloat8e4m3 || dt == braidFloat8e5m2) {
    // fp8 holds few integers exactly: -limit..limit (17 or 33 values), the same stepping.
    const size_t lim = static_cast<size_t>(valueLimit(dt));
    return static_cast<double>((index * 29 + static_cast<size_t>(rank) * 7 + 1) % (2 * lim + 1)) -
           static_cast<double>(lim);
  }
  const double v = static_cast<double>((index * 29 + static_cast<size_t>(rank) * 7 + 1) % 97);
  return isSignedType(dt) ? v - 48 : v;
}

// ---- options -----------------------------------------------------------------------------

// Before the communicator exists every rank parses the same argv and would print the same
// message; the launcher's rank variables (when present) let all but one stay quiet.
bool quietRank() {
  for (const char* var : {"BRAID_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v && *v) return std::strcmp(v, "0") != 0;
  }
  return false;
}

bool parseInt(const char* s, long long lo, long long hi, long long* out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// "8", "1.5K", "64M", "2G" (powers of 1024, as nccl-tests' parsesize).
bool parseSize(const char* s, size_t* out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno != 0 || end == s || !(v >= 0)) return false;
  double unit = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': unit = 1024.0; ++end; break;
    case 'm': case 'M': unit = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': unit = 1024.0 * 1024 * 1024; ++end; break;
    default: return false;
  }
  if (*end == 'B' || *end == 'b') ++end;  // tolerate "64MB"
  if (*end != '\0') return false;
  double bytes = v * unit;
  if (bytes > 9.0e18) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out;
}


namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct Options {
  size_t minBytes = 32u << 20;  // nccl-tests' defaults
  size_t maxBytes = 32u << 20;
  size_t stepBytes = 1u << 20;
  size_t stepFactor = 1;  // > 1 multiplies; otherwise stepBytes is added
  int iters = 20;
  int warmup = 5;
  int check = 1;  // number of checked operations per size and placement
  int average = 1;
  bool allOps = false;
  braidRedOp_t op = braidSum;
  bool allTypes = false;
  braidDataType_t dtype = braidFloat32;
  int root = 0;  // -1: every root in turn
  std::string jsonFile;
  std::string csvFile;
  size_t misalign = 0;  // --misalign: bytes past a page boundary where both buffers start
  bool device = false;  // -D 1: buffers in GPU memory
  // nccl-tests' remaining flags, with their meaning there.
  int blocking = 0;       // -z: 1 waits for each call and lines the ranks up; 2 only waits
  int aggIters = 1;       // -m: calls per timed iteration, issued as one group
  int runCycles = 1;      // -N: sweeps over the sizes, 0 = until stopped
  int graphLaunches = 0;  // -G: with -D 1, launches of the captured timed loop
  int localRegister = 0;  // -R: accepted; nothing to register (said in the header)
  int timeoutSec = 0;     // -T: a size that takes longer aborts the run; 0 = no limit
  bool cpuTime = false;   // -C 1: the time column is the time to issue the calls
  int threads = 1;        // -t: ranks per process, one thread and communicator each
};

void printUsage(const Tool& tool, FILE* out) {
  std::fprintf(out,
               "usage: braidrun -np N %s [options]\n"
               "  -b, --minbytes <size>      smallest message, bytes; K/M/G suffixes (default 32M)\n"
               "  -e, --maxbytes <size>      largest message (default 32M)\n"
               "  -f, --stepfactor <n>       multiply the size by n each step (n > 1)\n"
               "  -i, --stepbytes <size>     otherwise add this many bytes each step (default 1M)\n"
               "  -n, --iters <n>            timed iterations per size (default 20)\n"
               "  -w, --warmup_iters <n>     untimed iterations before each timing (default 5)\n"
               "  -c, --check <n>            check the result of n extra operations per size, 0 = off (default 1)\n",
               tool.name);
  if (tool.hasRedOp) std::fprintf(out, "  -o, --op <op>              sum|prod|max|min|avg|all (default sum)\n");
  std::fprintf(out,
               "  -d, --datatype <type>      int8|uint8|int16|uint16|int32|uint32|int64|uint64|half|float16|\n"
               "                             bfloat16|f8e4m3|f8e5m2|float|float32|double|float64|all (default float)\n");
  if (tool.hasRoot)
    std::fprintf(out, "  -r, --root <rank|all>      root rank, or all (-1) to run every root in turn (default 0)\n");
  else
    std::fprintf(out, "  -r, --root <rank|all>      accepted; %s has no root\n", tool.name);
  std::fprintf(out,
               "  -a, --average <0|1|2|3>    time reported: 0 = rank 0's, 1 = mean over ranks, 2 = min, 3 = max "
               "(default 1)\n"
               "  -z, --blocking <0|1|2>     1: wait for each call and line the ranks up after it; 2: wait only\n"
               "                             (default 0: wait once after the timed iterations)\n"
               "  -m, --agg_iters <n>        calls per timed iteration, issued as one braidGroupStart/End group\n"
               "                             (default 1); times are per call\n"
               "  -N, --run_cycles <n>       sweep the sizes n times, 0 = until stopped (default 1)\n"
               "  -T, --timeout <seconds>    a size (both placements and checks) that takes longer aborts the run\n"
               "                             with an error naming it (default 0: no limit)\n"
               "  -C, --report_cputime <0|1> 1: the time column is the time the calls took to issue (with -D 1,\n"
               "                             before waiting for the GPU); bandwidths stay from completion\n"
               "  -p, --parallel_init <0|1>  accepted; one rank per process, nothing to initialise in parallel\n"
               "  -G, --cudagraph <n>        with -D 1: the timed iterations are captured into a CUDA graph once,\n"
               "                             launched n times (and -c checks a captured call); without -D 1 the\n"
               "                             iterations run as ordinary calls (said in the header)\n"
               "  -R, --local_register <0|1|2>\n"
               "                             accepted; braid registers what it needs itself (said in the header)\n"
               "  -J, --json <file>          also write the results as JSON (rank 0)\n"
               "      --csv <file>           also write the results as CSV, a row per size (rank 0)\n"
               "      --misalign <bytes>     start both host buffers this many bytes past a page boundary\n"
               "                             (0-4095, default 0); malloc's large blocks start 16 bytes in\n"
               "  -D, --device <0|1>         1: buffers in GPU memory, one GPU per rank (local rank %% GPUs),\n"
               "                             calls on CUDA's default stream, or with -t > 1 on a stream of\n"
               "                             each rank's own (default 0: host memory)\n"
               "  -t, --nthreads <n>         ranks per process, each a thread with a communicator of its own:\n"
               "                             the job has processes x n ranks, rank = process rank x n + thread\n"
               "                             (default 1, at most 64)\n"
               "  -g, --ngpus 1              accepted for nccl-tests command lines; one GPU per rank\n"
               "  -h, --help                 this text\n");
  if (tool.extraHelp) std::fprintf(out, "%s", tool.extraHelp);
  std::fprintf(out,
               "Ranks come from the launcher's environment (braidrun, torchrun, mpirun, srun).\n"
               "Output: nccl-tests' table on rank 0; algbw = size / time, busbw = algbw * %s (GB = 1e9 B).\n",
               tool.busFactorText);
}

bool parseType(const char* s, Options* o) {
  if (std::strcmp(s, "all") == 0) {
    o->allTypes = true;
    return true;
  }
  for (const TypeAlias& a : kTypeAliases) {
    if (strcasecmp(s, a.name) == 0) {
      o->allTypes = false;
      o->dtype = a.dt;
      return true;
    }
  }
  return false;
}

bool parseOp(const char* s, Options* o) {
  if (std::strcmp(s, "all") == 0) {
    o->allOps = true;
    return true;
  }
  for (braidRedOp_t op : kAllOps) {
    if (strcasecmp(s, redOpName(op)) == 0) {
      o->allOps = false;
      o->op = op;
      return true;
    }
  }
  return false;
}

// --csv and --misalign have no one-letter form (nccl-tests has none to follow).
constexpr int kCsvFlag = 1000;
constexpr int kMisalignFlag = 1001;

// "-b (--minbytes)": messages name both spellings, since the user may have typed either.
std::string flagName(const option* longOpts, int c) {
  if (c == kCsvFlag) return "--csv";
  if (c == kMisalignFlag) return "--misalign";
  std::string s = std::string("-") + static_cast<char>(c);
  for (const option* lo = longOpts; lo->name; ++lo)
    if (lo->val == c) return s + " (--" + lo->name + ")";
  return s;
}

// Parses argv into *o. Returns -1 to go on, or the exit status (0 after -h, 2 on bad input).
int parseArgs(const Tool& tool, int argc, char** argv, Options* o) {
  static const option kLong[] = {
      {"minbytes", required_argument, nullptr, 'b'},     {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},    {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},        {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},        {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},     {"root", required_argument, nullptr, 'r'},
      {"average", required_argument, nullptr, 'a'},      {"json", required_argument, nullptr, 'J'},
      {"nthreads", required_argument, nullptr, 't'},     {"ngpus", required_argument, nullptr, 'g'},
      {"device", required_argument, nullptr, 'D'},       {"help", no_argument, nullptr, 'h'},
      {"blocking", required_argument, nullptr, 'z'},     {"agg_iters", required_argument, nullptr, 'm'},
      {"run_cycles", required_argument, nullptr, 'N'},   {"timeout", required_argument, nullptr, 'T'},
      {"report_cputime", required_argument, nullptr, 'C'}, {"parallel_init", required_argument, nullptr, 'p'},
      {"cudagraph", required_argument, nullptr, 'G'},   {"local_register", required_argument, nullptr, 'R'},
      {"csv", required_argument, nullptr, kCsvFlag},     {"misalign", required_argument, nullptr, kMisalignFlag},
      {nullptr, 0, nullptr, 0},
  };
  const bool quiet = quietRank();
  auto bad = [&](const char* flag, const char* value, const char* want) {
    if (!quiet) std::fprintf(stderr, "%s: invalid value '%s' for %s: expected %s\n", tool.name, value, flag, want);
    return kExitUsage;
  };
  bool stepBytesGiven = false;
  opterr = 0;  // we name the flag ourselves
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:i:f:n:w:c:o:d:r:a:J:t:g:D:z:m:N:T:C:p:G:R:h", kLong, nullptr)) != -1) {
    long long v = 0;
    const std::string flagText = flagName(kLong, c);
    const char* f = flagText.c_str();
    switch (c) {
      case 'b':
        if (!parseSize(optarg, &o->minBytes)) return bad(f, optarg, "a size in bytes such as 8, 64K, 16M or 1G");
        break;
      case 'e':
        if (!parseSize(optarg, &o->maxBytes)) return bad(f, optarg, "a size in bytes such as 8, 64K, 16M or 1G");
        break;
      case 'i':
        if (!parseSize(optarg, &o->stepBytes)) return bad(f, optarg, "a size in bytes such as 1M");
        stepBytesGiven = true;
        break;
      case 'f':
        if (!parseInt(optarg, 1, 1 << 20, &v)) return bad(f, optarg, "an integer factor >= 1");
        o->stepFactor = static_cast<size_t>(v);
        break;
      case 'n':
        if (!parseInt(optarg, 1, std::numeric_limits<int>::max(), &v)) return bad(f, optarg, "an integer >= 1");
        o->iters = static_cast<int>(v);
        break;
      case 'w':
        if (!parseInt(optarg, 0, std::numeric_limits<int>::max(), &v)) return bad(f, optarg, "an integer >= 0");
        o->warmup = static_cast<int>(v);
        break;
      case 'c':
        if (!parseInt(optarg, 0, 1000000, &v)) return bad(f, optarg, "0 (off) or the number of checks, e.g. 1");
        o->check = static_cast<int>(v);
        break;
      case 'o':
        if (!parseOp(optarg, o)) return bad(f, optarg, "sum, prod, max, min, avg or all");
        break;
      case 'd':
        if (!parseType(optarg, o))
          return bad(f, optarg,
                     "int8, uint8, int16, uint16, int32, uint32, int64, uint64, half, float16, bfloat16, f8e4m3, "
                     "f8e5m2, float, float32, double, float64 or all");
        break;
      case 'r':
        if (std::strcmp(optarg, "all") == 0) {
          o->root = -1;
        } else if (parseInt(optarg, -1, std::numeric_limits<int>::max(), &v)) {
          o->root = static_cast<int>(v);
        } else {
          return bad(f, optarg, "a rank >= 0, or all (-1)");
        }
        break;
      case 'a':
        if (!parseInt(optarg, 0, 3, &v)) return bad(f, optarg, "0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
        o->average = static_cast<int>(v);
        break;
      case 'J':
        if (!*optarg) return bad(f, optarg, "a file name");
        o->jsonFile = optarg;
        break;
      case 't':
        if (!parseInt(optarg, 1, 64, &v)) return bad(f, optarg, "a rank count per process from 1 to 64");
        o->threads = static_cast<int>(v);
        break;
      case 'g':
        // A rank drives one GPU: more GPUs per process come from -t, not from one thread.
        if (!parseInt(optarg, 1, 1, &v))
          return bad(f, optarg, "1 (one GPU per rank; -t N runs N ranks per process, braidrun -np N more processes)");
        break;
      case 'D':
        if (!parseInt(optarg, 0, 1, &v)) return bad(f, optarg, "0 (host memory) or 1 (GPU memory)");
        o->device = v == 1;
        break;
      case 'z':
        if (!parseInt(optarg, 0, 2, &v)) return bad(f, optarg, "0, 1 (wait and line up after each call) or 2 (wait)");
        o->blocking = static_cast<int>(v);
        break;
      case 'm':
        if (!parseInt(optarg, 1, 1 << 20, &v)) return bad(f, optarg, "an integer >= 1");
        o->aggIters = static_cast<int>(v);
        break;
      case 'N':
        if (!parseInt(optarg, 0, std::numeric_limits<int>::max(), &v))
          return bad(f, optarg, "an integer >= 0 (0: until stopped)");
        o->runCycles = static_cast<int>(v);
        break;
      case 'T':
        if (!parseInt(optarg, 0, 1000000, &v)) return bad(f, optarg, "seconds, an integer >= 0 (0: no limit)");
        o->timeoutSec = static_cast<int>(v);
        break;
      case 'C':
        if (!parseInt(optarg, 0, 1, &v)) return bad(f, optarg, "0 (latency) or 1 (CPU time)");
        o->cpuTime = v == 1;
        break;
      case 'p':
        if (!parseInt(optarg, 0, 1, &v)) return bad(f, optarg, "0 or 1");
        break;
      case 'G':
        if (!parseInt(optarg, 0, 1000000, &v)) return bad(f, optarg, "an integer >= 0");
        o->graphLaunches = static_cast<int>(v);
        break;
      case 'R':
        if (!parseInt(optarg, 0, 2, &v)) return bad(f, optarg, "0, 1 (local) or 2 (symmetric)");
        o->localRegister = static_cast<int>(v);
        break;
      case kCsvFlag:
        if (!*optarg) return bad(f, optarg, "a file name");
        o->csvFile = optarg;
        break;
      case kMisalignFlag:
        if (!parseInt(optarg, 0, 4095, &v)) return bad(f, optarg, "a byte offset from 0 to 4095");
        o->misalign = static_cast<size_t>(v);
        break;
      case 'h':
        if (!quiet) printUsage(tool, stdout);
        return kExitOk;
      case ':':
        if (!quiet) std::fprintf(stderr, "%s: option %s needs a value (see -h)\n", tool.name, argv[optind - 1]);
        return kExitUsage;
      default:  // '?'
        if (!quiet) {
          if (optopt)
            std::fprintf(stderr, "%s: unknown option '-%c' (see -h)\n", tool.name, optopt);
          else
            std::fprintf(stderr, "%s: unknown option '%s' (see -h)\n", tool.name, argv[optind - 1]);
        }
        return kExitUsage;
    }
  }
  if (optind < argc) {
    if (!quiet) std::fprintf(stderr, "%s: unexpected argument '%s' (see -h)\n", tool.name, argv[optind]);
    return kExitUsage;
  }
  if (o->minBytes > o->maxBytes) {
    if (!quiet)
      std::fprintf(stderr, "%s: -b (minbytes %zu) is larger than -e (maxbytes %zu)\n", tool.name, o->minBytes,
                   o->maxBytes);
    return kExitUsage;
  }
  if (o->stepFactor <= 1 && o->stepBytes == 0 && o->minBytes < o->maxBytes) {
    if (!quiet)
      std::fprintf(stderr, "%s: %s is 0 and -f is not > 1, so the size would never grow\n", tool.name,
                   stepBytesGiven ? "-i" : "the step");
    return kExitUsage;
  }
  return -1;
}

// ---- run state ---------------------------------------------------------------------------

struct Placement {
  double timeUs = 0;
  double cpuUs = 0;  // the time the calls took to issue (-C)
  double algBw = 0;
  double busBw = 0;
  long long wrong = -1;  // -1: not checked
};

struct Row {
  size_t bytes;
  size_t count;
  braidDataType_t dtype;
  const char* redop;
  int root;
  Placement outOfPlace, inPlace;
};

struct RankInfo {
  int pid;
  int gpu;  // -D 1: the GPU the rank's buffers are on; else -1
  std::string host;
};

class Watchdog;

struct Run {
  const Tool* tool = nullptr;
  Options opts;
  std::string commandLine;
  std::string date;
  braidComm_t comm = nullptr;
  int rank = 0;
  int nranks = 1;
  int version = 0;
  std::vector<RankInfo> ranks;
  std::vector<Row> rows;
  int failedChecks = 0;  // (row, placement) pairs with wrong elements: nccl-tests' "out of bounds"
  double busBwSum = 0;
  int busBwCount = 0;
  int gpu = -1;               // -D 1: this rank's GPU
  int localRank = 0;          // on its host, counting every thread's rank (-t): picks the GPU
  int processes = 1;          // processes of the job; ranks = processes x opts.threads
  // -D 1: the stream the calls go on (nullptr: CUDA's legacy default stream). With -G the
  // timed calls are captured on it; with -t > 1 each rank has one of its own, as ranks
  // that shared the legacy stream would queue each other's calls behind their waits.
  void* stream = nullptr;
  Watchdog* watchdog = nullptr;  // -T
};

std::string versionString(int code) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  return buf;
}

// JSON has no inf or NaN; a zero-time row (count 0 on a fast path) would otherwise produce one.
std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

void appendPlacement(std::string* out, const char* key, const Placement& p) {
  *out += std::string("\"") + key + "\": {\"time_us\": " + jsonNumber(p.timeUs) +
          ", \"cpu_time_us\": " + jsonNumber(p.cpuUs) + ", \"algbw\": " +
          jsonNumber(p.algBw) + ", \"busbw\": " + jsonNumber(p.busBw) +
          ", \"wrong\": " + (p.wrong < 0 ? std::string("null") : std::to_string(p.wrong)) + "}";
}

// Rank 0 writes the whole file at the end (or when a call fails, with "error" set), so a
// reader never sees a half-written row.
void writeJson(const Run& run, const std::string& error) {
  if (run.rank != 0 || run.opts.jsonFile.empty()) return;
  const Options& o = run.opts;
  std::string s = "{\n";
  s += "  \"tool\": \"" + jsonEscape(run.tool->name) + "\",\n";
  s += "  \"braid_version\": \"" + versionString(run.version) + "\",\n";
  s += "  \"nranks\": " + std::to_string(run.nranks) + ",\n";
  s += "  \"busbw_factor\": \"" + jsonEscape(run.tool->busFactorText) + "\",\n";
  s += "  \"command\": \"" + jsonEscape(run.commandLine) + "\",\n";
  s += "  \"date\": \"" + run.date + "\",\n";
  s += "  \"ranks\": [";
  for (size_t i = 0; i < run.ranks.size(); ++i)
    s += (i ? ", " : "") + std::string("{\"rank\": ") + std::to_string(i) +
         ", \"pid\": " + std::to_string(run.ranks[i].pid) + ", \"host\": \"" + jsonEscape(run.ranks[i].host) + "\"}";
  s += "],\n";
  s += "  \"params\": {\"minbytes\": " + std::to_string(o.minBytes) + ", \"maxbytes\": " + std::to_string(o.maxBytes) +
       ", \"stepbytes\": " + std::to_string(o.stepBytes) + ", \"stepfactor\": " + std::to_string(o.stepFactor) +
       ", \"iters\": " + std::to_string(o.iters) + ", \"warmup_iters\": " + std::to_string(o.warmup) +
       ", \"check\": " + std::to_string(o.check) + ", \"average\": " + std::to_string(o.average) +
       ", \"blocking\": " + std::to_string(o.blocking) + ", \"agg_iters\": " + std::to_string(o.aggIters) +
       ", \"run_cycles\": " + std::to_string(o.runCycles) + "},\n";
  s += "  \"results\": [";
  for (size_t i = 0; i < run.rows.size(); ++i) {
    const Row& r = run.rows[i];
    s += i ? ",\n    {" : "\n    {";
    s += "\"size\": " + std::to_string(r.bytes) + ", \"count\": " + std::to_string(r.count) + ", \"type\": \"" +
         dataTypeName(r.dtype) + "\", \"redop\": \"" + r.redop + "\", \"root\": " + std::to_string(r.root) + ", ";
    appendPlacement(&s, "out_of_place", r.outOfPlace);
    s += ", ";
    appendPlacement(&s, "in_place", r.inPlace);
    s += "}";
  }
  s += run.rows.empty() ? "],\n" : "\n  ],\n";
  s += "  \"out_of_bounds\": " + std::to_string(run.failedChecks) + ",\n";
  s += "  \"avg_busbw\": " + jsonNumber(run.busBwCount ? run.busBwSum / run.busBwCount : 0.0) + ",\n";
  s += "  \"error\": " + (error.empty() ? std::string("null") : "\"" + jsonEscape(error) + "\"") + "\n";
  s += "}\n";
  FILE* f = std::fopen(run.opts.jsonFile.c_str(), "w");
  if (!f || std::fwrite(s.data(), 1, s.size(), f) != s.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", run.tool->name, run.opts.jsonFile.c_str(), std::strerror(errno));
  }
}

// The rows of the JSON file as CSV, one line per size with both placements, the tool and
// the rank count on every line so that files of several runs concatenate.
void writeCsv(const Run& run) {
  if (run.rank != 0 || run.opts.csvFile.empty()) return;
  std::string s =
      "tool,nranks,size,count,type,redop,root,oop_time_us,oop_cpu_time_us,oop_algbw,oop_busbw,oop_wrong,"
      "ip_time_us,ip_cpu_time_us,ip_algbw,ip_busbw,ip_wrong\n";
  auto placement = [](const Placement& p) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%.6g,%.6g,%.6g,%.6g,", p.timeUs, p.cpuUs, p.algBw, p.busBw);
    return std::string(buf) + (p.wrong < 0 ? std::string("") : std::to_string(p.wrong));
  };
  for (const Row& r : run.rows) {
    s += std::string(run.tool->name) + "," + std::to_string(run.nranks) + "," + std::to_string(r.bytes) + "," +
         std::to_string(r.count) + "," + dataTypeName(r.dtype) + "," + r.redop + "," + std::to_string(r.root) + "," +
         placement(r.outOfPlace) + "," + placement(r.inPlace) + "\n";
  }
  FILE* f = std::fopen(run.opts.csvFile.c_str(), "w");
  if (!f || std::fwrite(s.data(), 1, s.size(), f) != s.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", run.tool->name, run.opts.csvFile.c_str(), std::strerror(errno));
  }
}

// Ends the process after a failure. Ranks that are threads (-t) end it with the others still
// running, so without exit()'s destructors of what they use; what was printed is flushed.
[[noreturn]] void exitFailed(const Run& run) {
  if (run.opts.threads > 1) {
    std::fflush(nullptr);
    std::_Exit(kExitFailed);
  }
  std::exit(kExitFailed);
}

// A failed braid call ends the run: the message names the rank and the call, the JSON keeps
// what was measured, and aborting the communicator makes the other ranks fail fast instead
// of waiting for this one.
[[noreturn]] void fail(Run& run, const char* call, braidResult_t result) {
  std::string msg = std::string(call) + " failed on rank " + std::to_string(run.rank) + ": " +
                    braidGetErrorString(result);
  const char* detail = braidGetLastError(run.comm);
  if (detail && *detail) msg += std::string(": ") + detail;
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s\n", run.tool->name, msg.c_str());
  writeJson(run, msg);
  writeCsv(run);
  if (run.comm) (void)braidCommAbort(run.comm);
  exitFailed(run);
}

void ok(Run& run, braidResult_t result, const char* call) {
  if (result != braidSuccess) fail(run, call, result);
}

// -T: a size that runs longer than the limit aborts the communicator (braidCommAbort is
// safe from any thread), so the call it hangs in returns and the run ends with an error that
// names the size, on this rank and, through the abort, on the others.
class Watchdog {
 public:
  Watchdog(braidComm_t comm, const char* tool, int rank, int seconds)
      : comm_(comm), tool_(tool), rank_(rank), limit_(seconds), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void arm(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_ = bytes;
    deadline_ = std::chrono::steady_clock::now() + limit_;
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      if (cv_.wait_until(lock, deadline_) != std::cv_status::timeout || !armed_ || stop_) continue;
      if (std::chrono::steady_clock::now() < deadline_) continue;
      armed_ = false;
      std::fprintf(stderr, "%s: rank %d: size %zu did not finish within -T %lld s; aborting the run\n", tool_, rank_,
                   bytes_, static_cast<long long>(limit_.count()));
      (void)braidCommAbort(comm_);
    }
  }

  braidComm_t comm_;
  const char* tool_;
  int rank_;
  std::chrono::seconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  size_t bytes_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;  // last: it starts once the members it reads exist
};

// Lines up the ranks before a timed loop, so that no rank's time includes waiting for a
// late peer to arrive.
void syncRanks(Run& run) {
  int32_t token = 0;
  ok(run, braidAllReduce(&token, &token, 1, braidInt32, braidSum, run.comm, nullptr), "braidAllReduce (sync)");
}

// Combines each rank's mean time as -a asks (nccl-tests' Allreduce(average)).
double combineTime(Run& run, double seconds) {
  if (run.opts.average == 0 || run.nranks == 1) return seconds;
  braidRedOp_t op = run.opts.average == 2 ? braidMin : run.opts.average == 3 ? braidMax : braidSum;
  ok(run, braidAllReduce(&seconds, &seconds, 1, braidFloat64, op, run.comm, nullptr), "braidAllReduce (time)");
  return run.opts.average == 1 ? seconds / run.nranks : seconds;
}

// "pid gpu host" of every rank, in rank order. The API has no allgather, so each rank writes its
// own slot of a zeroed buffer and a uint8 sum assembles them: every byte has one non-zero
// contributor, so the sum is exact.
void gatherRankInfo(Run& run) {
  constexpr size_t kSlot = 128;
  std::vector<uint8_t> slots(kSlot * static_cast<size_t>(run.nranks), 0);
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  std::snprintf(reinterpret_cast<char*>(&slots[kSlot * static_cast<size_t>(run.rank)]), kSlot - 1, "%d %d %s",
                static_cast<int>(getpid()), run.gpu, host);
  ok(run, braidAllReduce(slots.data(), slots.data(), slots.size(), braidUint8, braidSum, run.comm, nullptr),
     "braidAllReduce (rank info)");
  for (int r = 0; r < run.nranks; ++r) {
    char* slot = reinterpret_cast<char*>(&slots[kSlot * static_cast<size_t>(r)]);
    slot[kSlot - 1] = 0;
    RankInfo info{0, -1, ""};
    char* end = nullptr;
    info.pid = static_cast<int>(std::strtol(slot, &end, 10));
    info.gpu = static_cast<int>(std::strtol(end, &end, 10));
    if (*end == ' ') info.host = end + 1;
    run.ranks.push_back(info);
  }
}

struct Buffers {
  uint8_t* send = nullptr;  // sendBase + --misalign
  uint8_t* recv = nullptr;
  uint8_t* sendBase = nullptr;  // what allocTouched returned, for free()
  uint8_t* recvBase = nullptr;
  size_t sendBytes = 0;
  size_t recvBytes = 0;
  // -D 1: GPU mirrors of send and recv; the calls get these, filled from and checked
  // through the host buffers.
  uint8_t* dsend = nullptr;
  uint8_t* drecv = nullptr;
  // The device address of host pointer `p` (inside send or recv), or `p` itself.
  uint8_t* onDevice(uint8_t* p) const {
    if (!drecv) return p;
    if (p >= recv && p <= recv + recvBytes) return drecv + (p - recv);
    return dsend + (p - send);
  }
};

// -D 1: the stream a rank waits for and copies on: its own where ranks are threads (-t), so
// that neither waits for another rank's calls (which may wait for this rank); else none (the
// whole device, the legacy default stream), as one rank per process always has.
void* ownStream(const Run& run) { return run.opts.threads > 1 ? run.stream : nullptr; }

// -D 1: a failed CUDA call ends the run on this rank (the others then fail on their peer).
void deviceOk(Run& run, bool good, const char* what) {
  if (good) return;
  std::fprintf(stderr, "%s: rank %d: %s failed: %s\n", run.tool->name, run.rank, what,
               device::lastError().c_str());
  (void)braidCommAbort(run.comm);
  exitFailed(run);
}

// Page-aligned and touched once, so that page faults land here and not in the first timing.
uint8_t* allocTouched(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
  if (p) std::memset(p, 0, rounded);
  return p;
}

// Sets up one operation's arguments and pointers, and fills the buffers: sentinel in the
// receive buffer (so an element the library never writes is caught), then the input.
void prepare(const Run& run, const OpArgs& args, Buffers& buf, uint8_t** send, uint8_t** recv) {
  const size_t elt = dataTypeSize(args.dtype);
  const CollCounts& c = args.counts;
  const size_t rank = static_cast<size_t>(args.rank);
  if (args.inPlace) {
    *send = buf.recv + c.sendInPlaceOffset * rank * elt;
    *recv = buf.recv + c.recvInPlaceOffset * rank * elt;
    size_t span = std::max(c.sendInPlaceOffset * rank + c.sendCount, c.recvInPlaceOffset * rank + c.recvCount);
    fillSentinel(args.dtype, buf.recv, span);
  } else {
    *send = buf.send;
    *recv = buf.recv;
    fillSentinel(args.dtype, buf.recv, c.recvCount);
  }
  run.tool->initInput(args, *send);
  if (buf.drecv) {
    Run& r = const_cast<Run&>(run);
    deviceOk(r, device::toDevice(buf.dsend, buf.send, buf.sendBytes, ownStream(r)), "copying the input to the GPU");
    deviceOk(r, device::toDevice(buf.drecv, buf.recv, buf.recvBytes, ownStream(r)), "copying the input to the GPU");
  }
}

using Clock = std::chrono::steady_clock;

// Times one placement of one row, then checks it (-c) on freshly initialised buffers: in
// place, the timed loop feeds each result back in as the next input, so the buffer no longer
// holds anything a reference can predict (nccl-tests checks the same way).
// One iteration's calls: -m makes them one group, as nccl-tests aggregates them. A failed
// call ends the run (ok()).
void iterate(Run& run, const OpArgs& args, uint8_t* s, uint8_t* d) {
  const Tool& tool = *run.tool;
  const int agg = run.opts.aggIters;
  if (agg > 1) ok(run, braidGroupStart(), "braidGroupStart");
  for (int a = 0; a < agg; ++a) ok(run, tool.run(args, s, d, run.comm), tool.apiName);
  if (agg > 1) ok(run, braidGroupEnd(), "braidGroupEnd");
}

Placement measure(Run& run, const OpArgs& rowArgs, Buffers& buf, size_t rowBytes) {
  const Tool& tool = *run.tool;
  uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  prepare(run, rowArgs, buf, &send, &recv);
  // Device buffers: the calls are enqueued on the default stream (-G, -t > 1: the rank's own);
  // the clock stops after the device is done.
  const bool dev = buf.drecv != nullptr;
  const Options& o = run.opts;
  OpArgs args = rowArgs;
  if (dev) args.stream = run.stream;
  const bool graphs = dev && o.graphLaunches > 0 && run.stream != nullptr;
  uint8_t* s = buf.onDevice(send);
  uint8_t* d = buf.onDevice(recv);
  for (int i = 0; i < o.warmup; ++i) ok(run, tool.run(args, s, d, run.comm), tool.apiName);
  if (dev) deviceOk(run, device::synchronize(ownStream(run)), "waiting for the GPU");
  // -G: the timed loop, captured once (nothing runs yet), is launched o.graphLaunches times.
  void* graph = nullptr;
  if (graphs) {
    graph = device::capture(run.stream, [&] {
      for (int i = 0; i < o.iters; ++i) iterate(run, args, s, d);
      return true;
    });
    deviceOk(run, graph != nullptr, "capturing the timed iterations into a CUDA graph");
  }
  syncRanks(run);
  const auto t0 = Clock::now();
  if (graphs) {
    for (int g = 0; g < o.graphLaunches; ++g) deviceOk(run, device::launch(graph, run.stream), "cudaGraphLaunch");
  } else {
    for (int i = 0; i < o.iters; ++i) {
      iterate(run, args, s, d);
      // -z: wait for the iteration (host buffers: the call already has), and with 1 line
      // the ranks up, so no rank runs ahead into the next one.
      if (o.blocking > 0 && dev) deviceOk(run, device::synchronize(ownStream(run)), "waiting for the GPU");
      if (o.blocking == 1) syncRanks(run);
    }
  }
  const double calls = static_cast<double>(o.iters) * o.aggIters * (graphs ? o.graphLaunches : 1);
  const double issued = std::chrono::duration<double>(Clock::now() - t0).count() / calls;
  if (dev) deviceOk(run, device::synchronize(ownStream(run)), "waiting for the GPU");
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / calls;
  device::destroyGraph(graph);

  Placement p;
  const double t = combineTime(run, seconds);
  p.timeUs = t * 1e6;
  p.cpuUs = combineTime(run, issued) * 1e6;
  p.algBw = t > 0 ? static_cast<double>(rowBytes) / 1e9 / t : 0.0;
  p.busBw = p.algBw * tool.busFactor(run.nranks);

  if (run.opts.check > 0) {
    p.wrong = 0;
    for (int c = 0; c < run.opts.check && p.wrong == 0; ++c) {
      prepare(run, args, buf, &send, &recv);
      if (graphs) {
        // The checked call is a captured one, run by one launch of its graph.
        void* one = device::capture(run.stream, [&] {
          ok(run, tool.run(args, buf.onDevice(send), buf.onDevice(recv), run.comm), tool.apiName);
          return true;
        });
        deviceOk(run, one != nullptr && device::launch(one, run.stream), "running a captured call to check it");
        deviceOk(run, device::synchronize(ownStream(run)), "waiting for the GPU");
        device::destroyGraph(one);
      } else {
        ok(run, tool.run(args, buf.onDevice(send), buf.onDevice(recv), run.comm), tool.apiName);
      }
      if (dev) {
        deviceOk(run, device::synchronize(ownStream(run)), "waiting for the GPU");
        deviceOk(run, device::toHost(buf.recv, buf.drecv, buf.recvBytes, ownStream(run)), "copying the result from the GPU");
      }
      int64_t wrong = static_cast<int64_t>(tool.check(args, recv));
      ok(run, braidAllReduce(&wrong, &wrong, 1, braidInt64, braidSum, run.comm, nullptr), "braidAllReduce (#wrong)");
      p.wrong = wrong;
    }
    if (p.wrong > 0) ++run.failedChecks;
  }
  run.busBwSum += p.busBw;
  ++run.busBwCount;
  return p;
}

// nccl-tests' time column: as many decimals as fit in 7 characters.
std::string formatTime(double us) {
  char buf[32];
  if (us >= 10000.0)
    std::snprintf(buf, sizeof(buf), "%7.0f", us);
  else if (us >= 100.0)
    std::snprintf(buf, sizeof(buf), "%7.1f", us);
  else
    std::snprintf(buf, sizeof(buf), "%7.2f", us);
  return buf;
}

void printPlacement(const Placement& p, bool cpuTime) {
  char wrong[32];
  if (p.wrong < 0)
    std::snprintf(wrong, sizeof(wrong), "N/A");
  else
    std::snprintf(wrong, sizeof(wrong), "%lld", p.wrong);
  std::printf("  %7s  %6.2f  %6.2f  %5s", formatTime(cpuTime ? p.cpuUs : p.timeUs).c_str(), p.algBw, p.busBw, wrong);
}

void printHeader(const Run& run) {
  const Options& o = run.opts;
  std::printf("# braid version %s, %d rank%s", versionString(run.version).c_str(), run.nranks,
              run.nranks == 1 ? "" : "s");
  if (o.threads > 1)
    std::printf(" (%d process%s x %d threads, -t)", run.processes, run.processes == 1 ? "" : "es", o.threads);
  std::printf("\n");
  std::printf("# %s: minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d average: %d\n",
              run.tool->name, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
              o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check, o.average);
  if (o.blocking || o.aggIters > 1 || o.runCycles != 1 || o.timeoutSec || o.cpuTime)
    std::printf("# blocking: %d agg iters: %d run cycles: %d timeout: %d s cputime: %d\n", o.blocking, o.aggIters,
                o.runCycles, o.timeoutSec, o.cpuTime ? 1 : 0);
  if (o.graphLaunches > 0 && run.stream)
    std::printf("# -G %d: the timed iterations are captured into a CUDA graph once and launched %d times; -c checks "
                "a captured call\n", o.graphLaunches, o.graphLaunches);
  else if (o.graphLaunches > 0)
    std::printf("# -G %d: CUDA graphs capture calls on GPU buffers (-D 1) only; the iterations run as ordinary "
                "calls\n", o.graphLaunches);
  if (o.localRegister > 0)
    std::printf("# -R %d: nothing to register; braid registers the memory its transports need itself\n",
                o.localRegister);
  if (o.misalign) std::printf("# host buffers start %zu bytes past a page boundary (--misalign)\n", o.misalign);
  std::printf("#\n");
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    std::printf("#  Rank %2zu Pid %6d on %10s", r, run.ranks[r].pid, run.ranks[r].host.c_str());
    if (run.ranks[r].gpu >= 0) std::printf(" device %2d", run.ranks[r].gpu);
    std::printf("\n");
  }
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
              "", "", "");
  const char* timeName = o.cpuTime ? "cputime" : "time";
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
              "root", timeName, "algbw", "busbw", "#wrong", timeName, "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

// Sweeps the sizes for one (type, op, root), printing a row per size.
void sweep(Run& run, Buffers& buf, braidDataType_t dt, braidRedOp_t op, int root) {
  const Tool& tool = *run.tool;
  const Options& o = run.opts;
  const size_t elt = dataTypeSize(dt);
  size_t lastParam = std::numeric_limits<size_t>::max();
  for (size_t size = o.minBytes; size <= o.maxBytes;) {
    OpArgs args{dt, op, root, run.rank, run.nranks, false, tool.counts(size / elt, run.nranks)};
    const CollCounts& c = args.counts;
    // Sizes round down to whole elements; skip the empty and repeated counts that leaves,
    // except a count of 0 the user asked for with -b 0.
    const bool run0 = size == 0 && c.paramCount == 0;
    if ((c.paramCount > 0 || run0) && c.paramCount != lastParam) {
      lastParam = c.paramCount;
      Row row{std::max(c.sendCount, c.recvCount) * elt, c.paramCount, dt,
              tool.hasRedOp ? redOpName(op) : "none", tool.hasRoot ? root : -1, {}, {}};
      if (run.watchdog) run.watchdog->arm(row.bytes);
      row.outOfPlace = measure(run, args, buf, row.bytes);
      args.inPlace = true;
      row.inPlace = measure(run, args, buf, row.bytes);
      if (run.watchdog) run.watchdog->disarm();
      if (run.rank == 0) {
        std::printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, dataTypeName(dt), row.redop, row.root);
        printPlacement(row.outOfPlace, o.cpuTime);
        printPlacement(row.inPlace, o.cpuTime);
        std::printf("\n");
        std::fflush(stdout);
      }
      run.rows.push_back(row);
    }
    size_t next;
    if (o.stepFactor > 1) {
      if (size > o.maxBytes / o.stepFactor) break;
      next = size == 0 ? 1 : size * o.stepFactor;
    } else {
      if (o.stepBytes == 0 || size > o.maxBytes - o.stepBytes) break;
      next = size + o.stepBytes;
    }
    size = next;
  }
}

std::string joinCommandLine(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i) s += ' ';
    if (a.find_first_of(" \t'\"\\$`") == std::string::npos && !a.empty()) {
      s += a;
    } else {
      s += '\'';
      for (char ch : a) s += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      s += '\'';
    }
  }
  return s;
}

std::string isoDateUtc() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The launcher's local rank of this process (its rank without one): -D 1 picks its GPU from it.
int launcherLocalRank(int rank) {
  for (const char* var : {"BRAID_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = std::getenv(var);
    if (v && *v) return std::atoi(v);
  }
  return rank;
}

// One rank's run on its communicator (run.comm, joined): buffers, the sweeps, and on rank 0
// the table and the files. Returns the exit code; a failed call ends the process (fail()).
int runRank(Run& run) {
  const Tool& tool = *run.tool;
  const Options& o = run.opts;
  ok(run, braidCommUserRank(run.comm, &run.rank), "braidCommUserRank");
  ok(run, braidCommCount(run.comm, &run.nranks), "braidCommCount");

  if (tool.hasRoot && o.root >= run.nranks) {
    // Every rank sees the same root and rank count, so all exit here together.
    if (run.rank == 0)
      std::fprintf(stderr, "%s: invalid value %d for -r: the root must be below the rank count %d (or all)\n",
                   tool.name, o.root, run.nranks);
    (void)braidCommDestroy(run.comm);
    return kExitUsage;
  }

  std::vector<braidDataType_t> types;
  if (o.allTypes)
    types.assign(std::begin(kAllTypes), std::end(kAllTypes));
  else
    types.push_back(o.dtype);
  std::vector<braidRedOp_t> ops;
  if (tool.hasRedOp && o.allOps)
    ops.assign(std::begin(kAllOps), std::end(kAllOps));
  else
    ops.push_back(o.op);
  std::vector<int> roots;
  if (tool.hasRoot && o.root < 0) {
    for (int i = 0; i < run.nranks; ++i) roots.push_back(i);
  } else {
    roots.push_back(tool.hasRoot ? o.root : -1);
  }

  // Buffers for the largest message of any type in the run, shared by all rows.
  Buffers buf;
  for (braidDataType_t dt : types) {
    const size_t elt = dataTypeSize(dt);
    CollCounts c = tool.counts(o.maxBytes / elt, run.nranks);
    buf.sendBytes = std::max(buf.sendBytes, c.sendCount * elt);
    buf.recvBytes = std::max({buf.recvBytes, c.recvCount * elt, c.sendCount * elt});
  }
  buf.sendBase = allocTouched(buf.sendBytes + o.misalign);
  buf.recvBase = allocTouched(buf.recvBytes + o.misalign);
  buf.send = buf.sendBase ? buf.sendBase + o.misalign : nullptr;
  buf.recv = buf.recvBase ? buf.recvBase + o.misalign : nullptr;
  if (!buf.send || !buf.recv) {
    std::fprintf(stderr, "%s: rank %d: cannot allocate %zu + %zu bytes of buffers\n", tool.name, run.rank,
                 buf.sendBytes, buf.recvBytes);
    (void)braidCommAbort(run.comm);
    return kExitFailed;
  }

  if (o.device) {
    int& gpu = run.gpu;
    std::string why = device::init(run.localRank, &gpu);
    if (why.empty()) {
      buf.dsend = static_cast<uint8_t*>(device::alloc(buf.sendBytes));
      buf.drecv = static_cast<uint8_t*>(device::alloc(buf.recvBytes));
      if (!buf.dsend || !buf.drecv) why = "cudaMalloc of " + std::to_string(buf.sendBytes + buf.recvBytes) + " bytes: " + device::lastError();
    }
    if (!why.empty()) {
      std::fprintf(stderr, "%s: rank %d: -D 1 (GPU buffers): %s\n", tool.name, run.rank, why.c_str());
      (void)braidCommAbort(run.comm);
      return kExitFailed;
    }
    if ((o.graphLaunches > 0 || o.threads > 1) && !(run.stream = device::createStream())) {
      std::fprintf(stderr, "%s: rank %d: %s: cudaStreamCreate: %s\n", tool.name, run.rank,
                   o.graphLaunches > 0 ? "-G" : "-t", device::lastError().c_str());
      (void)braidCommAbort(run.comm);
      return kExitFailed;
    }
    if (run.rank == 0) std::printf("# Buffers in GPU memory (rank 0 on GPU %d)\n", gpu);
  }

  gatherRankInfo(run);
  if (run.rank == 0) printHeader(run);

  std::unique_ptr<Watchdog> watchdog;
  if (o.timeoutSec > 0) {
    watchdog = std::make_unique<Watchdog>(run.comm, tool.name, run.rank, o.timeoutSec);
    run.watchdog = watchdog.get();
  }
  // -N 0 runs until stopped.
  for (int cycle = 0; o.runCycles == 0 || cycle < o.runCycles; ++cycle)
    for (braidDataType_t dt : types)
      for (braidRedOp_t op : ops)
        for (int root : roots) sweep(run, buf, dt, op, root);
  watchdog.reset();
  run.watchdog = nullptr;

  if (run.rank == 0) {
    std::printf("# Out of bounds values : %d %s\n", run.failedChecks, run.failedChecks ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n", run.busBwCount ? run.busBwSum / run.busBwCount : 0.0);
    std::printf("#\n");
    std::fflush(stdout);
  }
  writeJson(run, "");
  writeCsv(run);
  std::free(buf.sendBase);
  std::free(buf.recvBase);
  device::release(buf.dsend);
  device::release(buf.drecv);
  device::destroyStream(run.stream);
  const braidResult_t r = braidCommDestroy(run.comm);
  if (r != braidSuccess) {
    std::fprintf(stderr, "%s: braidCommDestroy failed on rank %d: %s: %s\n", tool.name, run.rank,
                 braidGetErrorString(r), braidGetLastError(nullptr));
    return kExitFailed;
  }
  return run.failedChecks ? kExitFailed : kExitOk;
}

// -t N: the launcher's communicator (one rank per process) carries a unique id from its rank
// 0 to the others; each process then runs N threads, thread t joining the job's communicator
// of processes x N ranks as rank (process rank x N + t), as nccl-tests' threads do.
int runThreads(const Run& base, braidComm_t launcher) {
  const Tool& tool = *base.tool;
  const int threads = base.opts.threads;
  int prank = 0, nprocs = 1;
  if (braidCommUserRank(launcher, &prank) != braidSuccess || braidCommCount(launcher, &nprocs) != braidSuccess) {
    std::fprintf(stderr, "%s: the launcher's communicator: %s\n", tool.name, braidGetLastError(launcher));
    (void)braidCommAbort(launcher);
    return kExitFailed;
  }
  if (static_cast<long long>(nprocs) * threads > INT32_MAX) {
    if (prank == 0) std::fprintf(stderr, "%s: -t %d: %d processes x %d threads is too many ranks\n", tool.name, threads, nprocs, threads);
    (void)braidCommDestroy(launcher);
    return kExitUsage;
  }
  braidUniqueId id{};
  if (prank == 0) {
    const braidResult_t r = braidGetUniqueId(&id);
    if (r != braidSuccess) {
      // The others learn it from their broadcast, which the abort fails.
      std::fprintf(stderr, "%s: rank 0: braidGetUniqueId failed: %s: %s\n", tool.name, braidGetErrorString(r),
                   braidGetLastError(nullptr));
      (void)braidCommAbort(launcher);
      return kExitFailed;
    }
  }
  braidResult_t r = braidBroadcast(&id, &id, sizeof(id), braidUint8, 0, launcher, nullptr);
  if (r != braidSuccess) {
    std::fprintf(stderr, "%s: process %d: broadcasting the job's id (-t %d) failed: %s: %s\n", tool.name, prank,
                 threads, braidGetErrorString(r), braidGetLastError(launcher));
    (void)braidCommAbort(launcher);
    return kExitFailed;
  }
  const int localProcess = launcherLocalRank(prank);
  std::vector<int> codes(static_cast<size_t>(threads), kExitFailed);
  std::vector<std::thread> ranks;
  ranks.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    ranks.emplace_back([&, t] {
      Run run = base;
      run.processes = nprocs;
      run.localRank = localProcess * threads + t;
      const int rank = prank * threads + t;
      const braidResult_t j = braidCommInitRank(&run.comm, nprocs * threads, id, rank);
      if (j != braidSuccess) {
        std::fprintf(stderr, "%s: rank %d (process %d, thread %d): braidCommInitRank failed: %s: %s\n", tool.name,
                     rank, prank, t, braidGetErrorString(j), braidGetLastError(nullptr));
        exitFailed(run);
      }
      codes[static_cast<size_t>(t)] = runRank(run);
    });
  }
  for (auto& th : ranks) th.join();
  r = braidCommDestroy(launcher);
  if (r != braidSuccess)
    std::fprintf(stderr, "%s: braidCommDestroy of the launcher's communicator failed on process %d: %s\n",
                 tool.name, prank, braidGetErrorString(r));
  int code = r == braidSuccess ? kExitOk : kExitFailed;
  for (int c : codes) code = std::max(code, c);
  return code;
}

}  // namespace

int runTool(const Tool& tool, int argc, char** argv) {
  Run run;
  run.tool = &tool;
  int status = parseArgs(tool, argc, argv, &run.opts);
  if (status >= 0) return status;
  run.commandLine = joinCommandLine(argc, argv);
  run.date = isoDateUtc();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  if (braidGetVersion(&run.version) != braidSuccess) run.version = BRAID_VERSION_CODE;
  braidComm_t comm = nullptr;
  braidResult_t r = braidCommInitFromEnv(&comm);
  if (r != braidSuccess) {
    std::fprintf(stderr, "%s: braidCommInitFromEnv failed: %s: %s\n", tool.name, braidGetErrorString(r),
                 braidGetLastError(nullptr));
    return kExitFailed;
  }
  if (run.opts.threads > 1) return runThreads(run, comm);
  run.comm = comm;
  ok(run, braidCommUserRank(run.comm, &run.rank), "braidCommUserRank");
  ok(run, braidCommCount(run.comm, &run.processes), "braidCommCount");
  run.localRank = launcherLocalRank(run.rank);
  return runRank(run);
}

}  // namespace braid::perf

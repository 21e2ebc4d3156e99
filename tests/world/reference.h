#pragma once
// Test data and independent reference results for every dtype and op. Inputs are small
// integers (or powers of two for prod) so that sums and products are exact in every type,
// whatever order a reduction uses; the reference computes in double / 64-bit integers.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "common/types.h"
#include "reduce/reduce.h"

namespace braid::testing {

// ---- bitwise ops (integer types) --------------------------------------------------------
// Inputs are bit patterns of `bitwisePatternBits(dt)` bits: an index-dependent pattern
// shared by all ranks, with one (8-bit types) or two rank-dependent bits flipped at
// pseudo-random positions. So across any number of ranks the and keeps some of the shared
// bits, the or sets a few more, and the xor depends on every rank (dropping or doubling one
// changes it). Signed types read the pattern as two's complement of that width (the top
// bit makes negative values). 64-bit types use 52 bits so that every value, sign-extended,
// is exact in the double these helpers pass around.

inline bool isUnsignedType(DataType dt) {
  return dt == DataType::kUint8 || dt == DataType::kUint16 || dt == DataType::kUint32 || dt == DataType::kUint64;
}

inline bool isFp8(DataType dt) { return dt == DataType::kFloat8E4M3 || dt == DataType::kFloat8E5M2; }

inline int bitwisePatternBits(DataType dt) {
  switch (dataTypeSize(dt)) {
    case 1: return 8;
    case 2: return 16;
    case 4: return 32;
    default: return 52;
  }
}

inline uint64_t bitwiseMix(uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t bitwisePattern(DataType dt, int rank, size_t i) {
  const int bits = bitwisePatternBits(dt);
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t z = bitwiseMix(static_cast<uint64_t>(i));  // the same on every rank
  const uint64_t key = (static_cast<uint64_t>(i) << 20) ^ static_cast<uint64_t>(rank);
  const uint64_t h = bitwiseMix(key ^ 0x5bd1e995ull);
  z ^= uint64_t{1} << (h % static_cast<uint64_t>(bits));
  if (bits > 8) z ^= uint64_t{1} << ((h >> 32) % static_cast<uint64_t>(bits));
  return z & mask;
}

// A pattern as the value the type holds: sign-extended from the pattern width when signed.
inline double bitwisePatternValue(DataType dt, uint64_t p) {
  const int bits = bitwisePatternBits(dt);
  const bool isSigned = !isUnsignedType(dt);
  if (isSigned && ((p >> (bits - 1)) & 1)) {
    return static_cast<double>(static_cast<int64_t>(p) - (int64_t{1} << bits));
  }
  return static_cast<double>(p);
}

inline double inputValue(DataType dt, ReduceOp op, int rank, size_t i) {
  // The API rejects bitwise ops on float types; those fall through to the sum inputs.
  if (isBitwiseOp(op) && !isFloatType(dt)) return bitwisePatternValue(dt, bitwisePattern(dt, rank, i));
  if (op == ReduceOp::kProd) {
    // Mostly 1, sometimes 2 or (for signed/float types) -1: products stay small and exact.
    static const double kVals[] = {1, 2, 1, -1, 1, 1, 2};
    double v = kVals[(rank * 3 + i * 5) % 7];
    if (v < 0 && isUnsignedType(dt)) v = 1;
    return v;
  }
  // fp8 holds few integers exactly (E5M2: every one up to 8 only), and a ring rounds every
  // partial sum: -1..1 on the first 8 ranks and 0 on the others, so that every partial sum
  // stays exact whatever the rank count.
  if (isFp8(dt)) return rank < 8 ? static_cast<double>((rank * 7 + i * 3) % 3) - 1 : 0.0;
  double v = static_cast<double>((rank * 7 + i * 3) % 9);
  return isUnsignedType(dt) ? v : v - 4;
}

inline void storeValue(DataType dt, void* base, size_t i, double v) {
  switch (dt) {
    case DataType::kInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case DataType::kUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(static_cast<uint64_t>(static_cast<int64_t>(v))); break;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case DataType::kUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(static_cast<int64_t>(v)); break;
    case DataType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint64: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = reduce::floatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(base)[i] = reduce::floatToBfloat16(static_cast<float>(v)); break;
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
    case DataType::kFloat8E4M3: static_cast<uint8_t*>(base)[i] = reduce::floatToFp8e4m3(static_cast<float>(v)); break;
    case DataType::kFloat8E5M2: static_cast<uint8_t*>(base)[i] = reduce::floatToFp8e5m2(static_cast<float>(v)); break;
    case DataType::kInt16: static_cast<int16_t*>(base)[i] = static_cast<int16_t>(static_cast<int64_t>(v)); break;
    case DataType::kUint16: static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(static_cast<int64_t>(v)); break;
  }
}

inline double loadValue(DataType dt, const void* base, size_t i) {
  switch (dt) {
    case DataType::kInt8: return static_cast<const int8_t*>(base)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kUint32: return static_cast<const uint32_t*>(base)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case DataType::kFloat16: return reduce::halfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16: return reduce::bfloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
    case DataType::kFloat8E4M3: return reduce::fp8e4m3ToFloat(static_cast<const uint8_t*>(base)[i]);
    case DataType::kFloat8E5M2: return reduce::fp8e5m2ToFloat(static_cast<const uint8_t*>(base)[i]);
    case DataType::kInt16: return static_cast<const int16_t*>(base)[i];
    case DataType::kUint16: return static_cast<const uint16_t*>(base)[i];
  }
  return 0;
}

// The exact expected value of element i after allreduce over `nranks`, as the type holds it.
// Bitwise ops on float types have no expected value (the API rejects them): NaN, which
// matches() never accepts.
inline double expectedAllReduce(DataType dt, ReduceOp op, int nranks, size_t i) {
  if (isBitwiseOp(op)) {
    if (isFloatType(dt)) return std::nan("");
    // Combined on the patterns in 64-bit integers, independently of the double round trip.
    uint64_t bits = bitwisePattern(dt, 0, i);
    for (int r = 1; r < nranks; ++r) {
      const uint64_t p = bitwisePattern(dt, r, i);
      bits = op == ReduceOp::kBand ? (bits & p) : op == ReduceOp::kBor ? (bits | p) : (bits ^ p);
    }
    return bitwisePatternValue(dt, bits);
  }
  double acc = inputValue(dt, op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = inputValue(dt, op, r, i);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kBand: case ReduceOp::kBor: case ReduceOp::kBxor: break;  // returned above
    }
  }
  if (op == ReduceOp::kAvg) {
    if (isFloatType(dt)) return acc / nranks;
    return std::trunc(acc / nranks);
  }
  // Wrap integers the way the type does (only uint8 can overflow with these inputs).
  if (dt == DataType::kUint8) return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(acc)));
  if (dt == DataType::kInt8) return static_cast<double>(static_cast<int8_t>(static_cast<int64_t>(acc)));
  return acc;
}

// Expected results shared by the ranks of one in-process world. Case k's values are computed
// once, by the first rank that asks (the others wait for them), and freed when the last of
// the case's `users` ranks has released them: n ranks checking an allreduce then cost one
// reference computation of n inputs per element, not n of them.
class SharedExpected {
 public:
  explicit SharedExpected(size_t ncases) : slots_(ncases) {}

  // Case k's values, made by fill(std::vector<double>&) on the first call for k.
  template <typename Fill>
  const std::vector<double>& get(size_t k, Fill&& fill) {
    Slot& s = slots_.at(k);
    std::call_once(s.once, [&] { fill(s.values); });
    return s.values;
  }

  // This rank is done with case k; the `users`-th release frees its values.
  void release(size_t k, int users) {
    Slot& s = slots_.at(k);
    if (s.released.fetch_add(1) + 1 == users) std::vector<double>().swap(s.values);
  }

 private:
  struct Slot {
    std::once_flag once;
    std::atomic<int> released{0};
    std::vector<double> values;
  };
  std::deque<Slot> slots_;
};

// Elements [0, count) of `rank`'s input.
inline std::vector<double> inputRange(DataType dt, ReduceOp op, int rank, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = inputValue(dt, op, rank, i);
  return v;
}

// Elements [0, count) of an allreduce's result over `nranks`, as above.
inline std::vector<double> expectedAllReduceRange(DataType dt, ReduceOp op, int nranks, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = expectedAllReduce(dt, op, nranks, i);
  return v;
}

// Whether `got` matches `want` for this type: exact for integers; for floats within the
// type's rounding of the one final division (avg), exact otherwise.
inline bool matches(DataType dt, double got, double want) {
  if (!isFloatType(dt)) return got == want;
  // The final rounding: half an ulp relative, 2^-(mantissa bits + 1), with a little room.
  double tol = dt == DataType::kFloat64 ? 1e-12 : dt == DataType::kFloat32 ? 1e-6 : dt == DataType::kFloat16 ? 1e-3
             : dt == DataType::kBFloat16 ? 8e-3 : dt == DataType::kFloat8E4M3 ? 0.07 : 0.13;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

}  // namespace braid::testing

#pragma once
// Shared harness of the *_perf tools: nccl-tests' flags and table over braid's public C API.
//
// A tool is one small file that fills in a `Tool` (its name, how it sizes its buffers, its
// bus-bandwidth factor, how it initialises and checks data, how it runs one operation) and
// calls `runTool` from main. Everything else lives here: argument parsing, the sweep over
// sizes, data types, reduction ops and roots, timing, the cross-rank averaging of times and
// wrong-element counts, the table on rank 0 and the JSON file.
//
// The tools use nothing but include/braid/braid.h, so they double as an example of the API.
// The reference values they check against are computed here, independently of braid, with
// inputs chosen so that every partial result is exactly representable: a correct library
// gives bit-exact results whatever order it combines the ranks in.

#include <braid/braid.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace braid::perf {

// ---- data types --------------------------------------------------------------------------

// Bytes per element of `dt`.
size_t dataTypeSize(braidDataType_t dt);

// Name as nccl-tests prints it: "int8" ... "half", "float", "double", "bfloat16".
const char* dataTypeName(braidDataType_t dt);

// Name of `op` as nccl-tests prints it: "sum", "prod", "max", "min", "avg".
const char* redOpName(braidRedOp_t op);

// The largest magnitude the value schemes below may reach: every integer in [-M, M] (or
// [0, M] for unsigned types) is exact in `dt`, and M stays below the unsigned maximum, which
// fillSentinel uses.
double valueLimit(braidDataType_t dt);

bool isSignedType(braidDataType_t dt);

// Fills `count` elements with a value no scheme here produces (NaN for float types, the
// minimum of signed and the maximum of unsigned integers), so an element the library never
// writes shows up as wrong.
void fillSentinel(braidDataType_t dt, void* buf, size_t count);

// IEEE half and bfloat16 conversions, written here rather than borrowed from braid so that
// the reference does not share code with the library under test. Round to nearest even;
// infinities, NaNs and subnormals are handled.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);
// OCP fp8 (E4M3 when `e4m3`, else E5M2): decoding of any code; encoding of values the format
// holds exactly (what the schemes below produce), not a rounding conversion.
double fp8ToDouble(uint8_t x, bool e4m3);
uint8_t exactToFp8(double v, bool e4m3);

namespace detail {

// Element access in double. Every value the schemes produce is a small integer, exactly
// representable in double and in the element type, so the round trip is exact.
template <class T>
inline void store(void* p, double v) {
  T x = static_cast<T>(v);
  std::memcpy(p, &x, sizeof(T));
}
template <class T>
inline double load(const void* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return static_cast<double>(x);
}

template <class T, class Fn>
inline void fillAs(void* buf, size_t count, Fn& valueAt) {
  char* p = static_cast<char*>(buf);
  for (size_t i = 0; i < count; ++i) store<T>(p + i * sizeof(T), valueAt(i));
}
template <class Fn>
inline void fillHalf(void* buf, size_t count, Fn& valueAt, bool bf16) {
  char* p = static_cast<char*>(buf);
  for (size_t i = 0; i < count; ++i) {
    float f = static_cast<float>(valueAt(i));
    uint16_t h = bf16 ? floatToBfloat16(f) : floatToHalf(f);
    std::memcpy(p + i * 2, &h, 2);
  }
}

template <class T, class Fn>
inline size_t mismatchesAs(const void* buf, size_t count, Fn& expectedAt) {
  const char* p = static_cast<const char*>(buf);
  size_t wrong = 0;
  // `!=` in double also counts NaN results (never equal to an expected value) as wrong.
  for (size_t i = 0; i < count; ++i) wrong += load<T>(p + i * sizeof(T)) != expectedAt(i);
  return wrong;
}
template <class Fn>
inline size_t mismatchesHalf(const void* buf, size_t count, Fn& expectedAt, bool bf16) {
  const char* p = static_cast<const char*>(buf);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    double got = bf16 ? bfloat16ToFloat(h) : halfToFloat(h);
    wrong += got != expectedAt(i);
  }
  return wrong;
}

template <class Fn>
inline void fillFp8(void* buf, size_t count, Fn& valueAt, bool e4m3) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = exactToFp8(valueAt(i), e4m3);
}
template <class Fn>
inline size_t mismatchesFp8(const void* buf, size_t count, Fn& expectedAt, bool e4m3) {
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += fp8ToDouble(p[i], e4m3) != expectedAt(i);
  return wrong;
}

}  // namespace detail

// buf[i] = valueAt(i) for i < count, stored as `dt`. `valueAt(size_t) -> double` must return
// values exactly representable in `dt` (the schemes below do).
template <class Fn>
void fillElements(braidDataType_t dt, void* buf, size_t count, Fn&& valueAt) {
  switch (dt) {
    case braidInt8: detail::fillAs<int8_t>(buf, count, valueAt); break;
    case braidUint8: detail::fillAs<uint8_t>(buf, count, valueAt); break;
    case braidInt32: detail::fillAs<int32_t>(buf, count, valueAt); break;
    case braidUint32: detail::fillAs<uint32_t>(buf, count, valueAt); break;
    case braidInt64: detail::fillAs<int64_t>(buf, count, valueAt); break;
    case braidUint64: detail::fillAs<uint64_t>(buf, count, valueAt); break;
    case braidFloat16: detail::fillHalf(buf, count, valueAt, false); break;
    case braidBFloat16: detail::fillHalf(buf, count, valueAt, true); break;
    case braidFloat32: detail::fillAs<float>(buf, count, valueAt); break;
    case braidFloat64: detail::fillAs<double>(buf, count, valueAt); break;
    case braidFloat8e4m3: detail::fillFp8(buf, count, valueAt, true); break;
    case braidFloat8e5m2: detail::fillFp8(buf, count, valueAt, false); break;
    case braidInt16: detail::fillAs<int16_t>(buf, count, valueAt); break;
    case braidUint16: detail::fillAs<uint16_t>(buf, count, valueAt); break;
  }
}

// Number of i < count where buf[i] (read as `dt`) differs from expectedAt(i).
template <class Fn>
size_t countMismatches(braidDataType_t dt, const void* buf, size_t count, Fn&& expectedAt) {
  switch (dt) {
    case braidInt8: return detail::mismatchesAs<int8_t>(buf, count, expectedAt);
    case braidUint8: return detail::mismatchesAs<uint8_t>(buf, count, expectedAt);
    case braidInt32: return detail::mismatchesAs<int32_t>(buf, count, expectedAt);
    case braidUint32: return detail::mismatchesAs<uint32_t>(buf, count, expectedAt);
    case braidInt64: return detail::mismatchesAs<int64_t>(buf, count, expectedAt);
    case braidUint64: return detail::mismatchesAs<uint64_t>(buf, count, expectedAt);
    case braidFloat16: return detail::mismatchesHalf(buf, count, expectedAt, false);
    case braidBFloat16: return detail::mismatchesHalf(buf, count, expectedAt, true);
    case braidFloat32: return detail::mismatchesAs<float>(buf, count, expectedAt);
    case braidFloat64: return detail::mismatchesAs<double>(buf, count, expectedAt);
    case braidFloat8e4m3: return detail::mismatchesFp8(buf, count, expectedAt, true);
    case braidFloat8e5m2: return detail::mismatchesFp8(buf, count, expectedAt, false);
    case braidInt16: return detail::mismatchesAs<int16_t>(buf, count, expectedAt);
    case braidUint16: return detail::mismatchesAs<uint16_t>(buf, count, expectedAt);
  }
  return count;
}

// ---- value schemes -----------------------------------------------------------------------

// Inputs for reductions over `nranks` ranks whose every partial result, in any order of
// combination, is exact in the data type, so the expected value is exact too:
//  - sum: non-negative integers small enough that nranks of them stay within the type's
//    exact range (a one-hot 0/1 pattern when even 1 per rank would not fit);
//  - prod: 1s with a sparse sprinkling of 2s, at most log2(limit) of them per element;
//  - max/min: small signed integers (non-negative for unsigned types);
//  - avg: the sum is a multiple of nranks, so sum / nranks is exact whether the library
//    divides once at the end (integer avg truncates, which is then exact too).
// Element values depend on both rank and index, so a dropped, duplicated or misplaced
// contribution changes the result.
class ReduceValues {
 public:
  ReduceValues(braidDataType_t dt, braidRedOp_t op, int nranks);

  // What `rank` contributes at element `index`.
  double input(int rank, size_t index) const;

  // The reduction of input(r, index) over all ranks, folded here rank by rank.
  double expected(size_t index) const;

 private:
  braidRedOp_t op_;
  int nranks_;
  bool signed_;
  // sum/avg: largest per-rank value (-1: the one-hot or all-zero fallback); max/min: the
  // largest magnitude.
  long long sumMax_ = 0;
  long long prodPeriod_ = 3;  // prod: a rank holds a 2 where (index + rank) % period == 0
};

// A value that differs between ranks and along the index, exact in every data type (at
// most 48 in magnitude, negative ones only for signed types): data for broadcast, gather and
// the like, where the result is some rank's input moved, not combined.
double rankValue(braidDataType_t dt, int rank, size_t index);

// ---- command lines -----------------------------------------------------------------------

// Before a communicator exists every rank parses the same argv and would print the same
// message; true on the ranks other than 0 per the launcher's variables.
bool quietRank();
// v in [lo, hi], whole string.
bool parseInt(const char* s, long long lo, long long hi, long long* out);
// "8", "1.5K", "64M", "2G" (powers of 1024, as nccl-tests' parsesize).
bool parseSize(const char* s, size_t* out);
std::string jsonEscape(const std::string& s);

// ---- tools -------------------------------------------------------------------------------

// Element counts of one operation, as nccl-tests' getCollByteCount defines them.
struct CollCounts {
  size_t sendCount = 0;   // elements read from this rank's send buffer
  size_t recvCount = 0;   // elements written to this rank's receive buffer
  size_t paramCount = 0;  // the `count` argument of the call (the table's count column)
  // In place, the call uses sendbuff = recvbuff + sendInPlaceOffset * rank and
  // recvbuff = recvbuff + recvInPlaceOffset * rank (elements); both 0 for allreduce.
  size_t sendInPlaceOffset = 0;
  size_t recvInPlaceOffset = 0;
};

// Everything a tool's callbacks need to know about one operation.
struct OpArgs {
  braidDataType_t dtype;
  braidRedOp_t op;  // meaningful only for tools with a redop
  int root;         // meaningful only for tools with a root
  int rank;
  int nranks;
  bool inPlace;
  CollCounts counts;
  braidStream_t stream = nullptr;  // -D 1 -G: the tool's own stream; else the legacy default
};

// One benchmark. All callbacks are plain functions; none may call braid except `run`.
struct Tool {
  const char* name;     // executable name, e.g. "allreduce_perf"
  const char* apiName;  // the braid call it measures, for error messages
  bool hasRedOp;        // -o applies; otherwise the redop column reads "none"
  bool hasRoot;         // -r applies; otherwise the root column reads -1

  // Counts for a message of `count` elements (size / element size) across `nranks` ranks.
  CollCounts (*counts)(size_t count, int nranks);

  // busbw = algbw * busFactor(nranks): bytes each rank must move relative to the message,
  // so that busbw is comparable to link bandwidth whatever the rank count.
  double (*busFactor)(int nranks);
  const char* busFactorText;  // the same as a formula in n, e.g. "2(n-1)/n", for -h and JSON

  // Writes this rank's input into `sendbuff` (args.counts.sendCount elements). The harness
  // has already filled the receive buffer with a sentinel; in place, `sendbuff` lies inside it.
  void (*initInput)(const OpArgs& args, void* sendbuff);

  // Number of wrong elements among the args.counts.recvCount elements at `recvbuff`.
  size_t (*check)(const OpArgs& args, const void* recvbuff);

  // Runs the operation once, blocking until it completes on this rank.
  braidResult_t (*run)(const OpArgs& args, const void* sendbuff, void* recvbuff, braidComm_t comm);

  // Lines of the tool's own options for -h (its main takes them out of argv), or nullptr.
  const char* extraHelp = nullptr;
};

// The whole program: parses argv, creates the communicator from the launcher's environment,
// runs the sweep, prints the table on rank 0, writes JSON if asked. Returns the exit status:
// 0 on success, 1 if any element was wrong or a braid call failed, 2 for bad arguments.
int runTool(const Tool& tool, int argc, char** argv);

}  // namespace braid::perf

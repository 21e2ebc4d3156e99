// The CUDA reduce-copy kernels, run on the host through the CPU executor, against braid's
// CPU kernels (src/reduce) bit for bit, fp8 included (the CPU kernels' fp8 is checked
// against the OCP definitions in tests/unit/reduce). Every type x op is run over odd sizes, misaligned pointers (the
// same misalignment everywhere, different ones, byte offsets), 1..8 sources and one or two
// destinations, with guard bytes around every buffer. NaNs compare by NaN-ness only.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/types.h"
#include "cuda/host_kernels.h"
#include "reduce/reduce.h"
#include "support/catch.h"
#include "unit/cuda/cuda_test_util.h"

namespace bc = braid::cuda;
using bc::DeviceDataType;
using bc::ReduceCopyArgs;
using braid::DataType;
using braid::ReduceOp;
using namespace braid::cuda::test;

namespace {

// One variant of an operation: the op, and the pre/post steps a collective attaches to it.
struct OpCase {
  const char* name;
  ReduceOp op;
  bool preMul;
  double scalar;
  int divisor;
};

const OpCase kArithmeticCases[] = {
    {"sum", ReduceOp::kSum, false, 1.0, 1},
    {"prod", ReduceOp::kProd, false, 1.0, 1},
    {"max", ReduceOp::kMax, false, 1.0, 1},
    {"min", ReduceOp::kMin, false, 1.0, 1},
    {"avg(/3)", ReduceOp::kAvg, false, 1.0, 3},
    {"premulsum(0.37)", ReduceOp::kSum, true, 0.37, 1},
    {"premulsum(-2.9)", ReduceOp::kSum, true, -2.9, 1},
};
const OpCase kBitwiseCases[] = {
    {"band", ReduceOp::kBand, false, 1.0, 1},
    {"bor", ReduceOp::kBor, false, 1.0, 1},
    {"bxor", ReduceOp::kBxor, false, 1.0, 1},
};

const size_t kSizes[] = {0, 1, 7, 15, 16, 17, 100, 1003, 4099};

// Byte offsets (from a 64-byte boundary) of src0, src1.., dst0, dst1 in one layout.
struct Layout {
  const char* name;
  size_t src[bc::kMaxSources];
  size_t dst[bc::kMaxDestinations];
};
const Layout kLayouts[] = {
    {"aligned", {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0}},
    {"same misalignment (+8)", {8, 8, 8, 8, 8, 8, 8, 8}, {8, 8}},
    {"mixed element-aligned", {0, 8, 16, 24, 32, 40, 48, 56}, {24, 40}},
    {"byte offsets", {1, 3, 5, 7, 2, 6, 9, 11}, {5, 13}},
};

struct Shape {
  int nsrcs;
  int ndsts;
};
const Shape kShapes[] = {{1, 1}, {2, 1}, {2, 2}, {3, 2}, {8, 1}};

// The expected result for one reduce-copy, from braid's CPU kernels: scale the first
// source (reduce::scale), reduce (reduce::reduceN), divide (reduce::divideInPlace): the
// steps a collective runs on the CPU path.
std::vector<unsigned char> cpuReference(DataType dt, const OpCase& oc, const std::vector<const void*>& srcs,
                                        size_t count) {
  const size_t bytes = count * braid::dataTypeSize(dt);
  std::vector<unsigned char> out(std::max<size_t>(bytes, 1));
  std::vector<unsigned char> scaled(std::max<size_t>(bytes, 1));
  std::vector<const void*> in = srcs;
  if (oc.preMul) {
    braid::reduce::scale(dt, scaled.data(), srcs[0], oc.scalar, count);
    in[0] = scaled.data();
  }
  braid::reduce::reduceN(dt, oc.op, out.data(), in.data(), static_cast<int>(in.size()), count);
  if (oc.divisor > 1) braid::reduce::divideInPlace(dt, out.data(), count, oc.divisor);
  return out;
}

// Bitwise ops over raw bytes: the reference for every type (fp8 included).
std::vector<unsigned char> bitwiseReference(ReduceOp op, const std::vector<const void*>& srcs, size_t bytes) {
  std::vector<unsigned char> out(std::max<size_t>(bytes, 1));
  for (size_t i = 0; i < bytes; ++i) {
    unsigned char acc = static_cast<const unsigned char*>(srcs[0])[i];
    for (size_t s = 1; s < srcs.size(); ++s) {
      const unsigned char v = static_cast<const unsigned char*>(srcs[s])[i];
      acc = op == ReduceOp::kBand ? (acc & v) : op == ReduceOp::kBor ? (acc | v) : (acc ^ v);
    }
    out[i] = acc;
  }
  return out;
}

// Runs every size x layout x shape (and in-place) for one type and op case; returns the
// number of launches checked.
int checkAll(DeviceDataType t, const OpCase& oc, bool bitwise) {
  const size_t es = bc::deviceDataTypeSize(t);
  std::mt19937_64 rng(0x5eed ^ (static_cast<uint64_t>(t) << 8) ^ static_cast<uint64_t>(oc.op) ^
                      static_cast<uint64_t>(oc.divisor << 4));
  int launches = 0;
  // Every executor launch costs an OS thread wake-up per CUDA thread, so rather than the
  // full product, each (size, layout) pair runs two of the shapes, rotating so that every
  // shape meets every size and every layout, and each size runs once in place.
  int rotation = 0;
  constexpr int kNumShapes = sizeof(kShapes) / sizeof(kShapes[0]);
  constexpr int kNumLayouts = sizeof(kLayouts) / sizeof(kLayouts[0]);
  for (size_t count : kSizes) {
    for (int li = 0; li < kNumLayouts; ++li) {
      const Layout& lay = kLayouts[li];
      for (int pick = 0; pick < 2; ++pick) {
        const Shape& sh = kShapes[(rotation++) % kNumShapes];
        for (bool inPlace : {false, true}) {
          if (inPlace && (count == 0 || sh.nsrcs < 2 || li != static_cast<int>(count % kNumLayouts) || pick != 0)) {
            continue;
          }
          std::vector<GuardedBuffer> srcBufs, dstBufs;
          srcBufs.reserve(sh.nsrcs);
          dstBufs.reserve(sh.ndsts);
          for (int s = 0; s < sh.nsrcs; ++s) {
            srcBufs.emplace_back(count * es, lay.src[s]);
            fillRandom(srcBufs.back().data(), count, t, rng);
          }
          for (int d = 0; d < sh.ndsts; ++d) dstBufs.emplace_back(count * es, lay.dst[d]);

          ReduceCopyArgs a;
          std::vector<const void*> srcs;
          for (int s = 0; s < sh.nsrcs; ++s) {
            a.srcs[s] = srcBufs[s].data();
            srcs.push_back(srcBufs[s].data());
          }
          a.nsrcs = sh.nsrcs;
          for (int d = 0; d < sh.ndsts; ++d) a.dsts[d] = dstBufs[d].data();
          a.ndsts = sh.ndsts;
          a.count = count;
          a.preMul = oc.preMul ? 1 : 0;
          a.preMulScalar = oc.scalar;
          a.divisor = oc.divisor;

          std::vector<unsigned char> want;
          if (bitwise) {
            want = bitwiseReference(oc.op, srcs, count * es);
          } else {
            want = cpuReference(static_cast<DataType>(t), oc, srcs, count);
          }
          // In place: the last source is also the first destination (a slot reduced into
          // itself); its input was captured by the reference above.
          if (inPlace) a.dsts[0] = srcBufs[sh.nsrcs - 1].data();

          // Every third launch uses a fixed geometry of several blocks of three warps, so
          // the grid-stride and multi-block paths run at sizes where the automatic choice
          // is a single block.
          const bc::LaunchConfig multiBlock{3, 96};
          const bool forced = launches % 3 == 2;
          const braid::Status st = bc::sim::runReduceCopy(a, t, oc.op, forced ? &multiBlock : nullptr);
          INFO(bc::deviceDataTypeName(t) << " " << oc.name << " count=" << count << " layout=" << lay.name
                                        << " nsrcs=" << sh.nsrcs << " ndsts=" << sh.ndsts
                                        << (inPlace ? " in-place" : "") << (forced ? " grid 3x96" : ""));
          REQUIRE(st.isOk());
          for (int d = 0; d < sh.ndsts; ++d) {
            const unsigned char* got = static_cast<const unsigned char*>(a.dsts[d]);
            const long bad = firstMismatch(got, want.data(), count, t);
            if (bad >= 0) {
              FAIL("dst " << d << " element " << bad << ": got " << hexElem(got + bad * es, es) << ", want "
                          << hexElem(want.data() + bad * es, es));
            }
          }
          for (auto& b : srcBufs) REQUIRE(b.guardsIntact());
          for (auto& b : dstBufs) REQUIRE(b.guardsIntact());
          ++launches;
        }
      }
    }
  }
  return launches;
}

void checkType(DeviceDataType t) {
  int launches = 0;
  for (const OpCase& oc : kArithmeticCases) launches += checkAll(t, oc, false);
  // Bitwise ops are integer ops in the API; the kernels, like the CPU ones, combine any
  // type's bits, so every type runs them.
  for (const OpCase& oc : kBitwiseCases) launches += checkAll(t, oc, true);
  WARN(bc::deviceDataTypeName(t) << ": " << launches << " reduce-copies checked");
}

}  // namespace

TEST_CASE("host reduce-copy int8 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kInt8); }
TEST_CASE("host reduce-copy uint8 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kUint8); }
TEST_CASE("host reduce-copy int16 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kInt16); }
TEST_CASE("host reduce-copy uint16 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kUint16); }
TEST_CASE("host reduce-copy int32 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kInt32); }
TEST_CASE("host reduce-copy uint32 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kUint32); }
TEST_CASE("host reduce-copy int64 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kInt64); }
TEST_CASE("host reduce-copy uint64 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kUint64); }
TEST_CASE("host reduce-copy float16 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kFloat16); }
TEST_CASE("host reduce-copy bfloat16 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kBFloat16); }
TEST_CASE("host reduce-copy float32 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kFloat32); }
TEST_CASE("host reduce-copy float64 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kFloat64); }
TEST_CASE("host reduce-copy fp8 e4m3 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kFloat8E4M3); }
TEST_CASE("host reduce-copy fp8 e5m2 matches the CPU kernels", "[cuda]") { checkType(DeviceDataType::kFloat8E5M2); }

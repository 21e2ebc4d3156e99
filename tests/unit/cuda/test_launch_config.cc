// chooseLaunchConfig (grid and block from the slice size) and planReduceCopy (argument
// checks and kernel choice), and the byte kernel behind copies.

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/host_kernels.h"
#include "cuda/reduce_copy.h"
#include "support/catch.h"

namespace bc = braid::cuda;
using bc::DeviceDataType;
using braid::ReduceOp;

TEST_CASE("launch config: whole warps, within the limits, growing with the size", "[cuda]") {
  const bc::LaunchLimits limits[] = {{32, 512}, {4, 128}, {1, 1024}, {64, 100}, {0, 0}};
  for (const auto& lim : limits) {
    bc::LaunchConfig prev{1, 32};
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{16}, size_t{64}, size_t{1000}, size_t{4096}, size_t{65536},
                         size_t{1} << 20, size_t{3} << 20, size_t{1} << 30, size_t{1} << 40}) {
      const bc::LaunchConfig c = bc::chooseLaunchConfig(bytes, lim);
      INFO("bytes " << bytes << " limits " << lim.maxBlocks << "x" << lim.maxThreadsPerBlock);
      CHECK(c.block % 32 == 0);
      CHECK(c.block >= 32);
      CHECK(c.block <= std::max(32u, lim.maxThreadsPerBlock));
      CHECK(c.grid >= 1);
      CHECK(c.grid <= std::max(1u, lim.maxBlocks));
      CHECK(c.block >= prev.block);  // monotone: more data never gets less parallelism
      CHECK(c.grid >= prev.grid);
      // Enough threads that each iterates a bounded number of times, unless at the limits.
      const size_t threads = size_t{c.grid} * c.block;
      const bool atLimit = c.grid == std::max(1u, lim.maxBlocks) ||
                           (bytes + bc::kMinBytesPerBlock - 1) / bc::kMinBytesPerBlock <= c.grid;
      CHECK((threads * bc::kBytesPerThreadIteration >= bytes || atLimit));
      prev = c;
    }
  }
  // Specific points of the default limits (32 blocks x 512 threads).
  CHECK(bc::chooseLaunchConfig(100).grid == 1);
  CHECK(bc::chooseLaunchConfig(100).block == 32);
  CHECK(bc::chooseLaunchConfig(16 << 10).block == 256);
  CHECK(bc::chooseLaunchConfig(1 << 20).block == 512);
  CHECK(bc::chooseLaunchConfig(1 << 20).grid == 16);
  CHECK(bc::chooseLaunchConfig(size_t{1} << 30).grid == 32);
}

TEST_CASE("planReduceCopy rejects bad arguments and picks the byte kernel for copies and bitwise ops", "[cuda]") {
  int x = 0, y = 0;
  bc::ReduceCopyArgs a;
  a.srcs[0] = &x;
  a.srcs[1] = &y;
  a.dsts[0] = &x;
  a.nsrcs = 2;
  a.ndsts = 1;
  a.count = 1;
  CHECK(bc::planReduceCopy(a, DeviceDataType::kInt32, ReduceOp::kSum).isOk());
  auto code = [&](bc::ReduceCopyArgs b, DeviceDataType t, ReduceOp op) {
    return bc::planReduceCopy(b, t, op).status().code();
  };
  bc::ReduceCopyArgs b = a;
  b.nsrcs = 0;
  CHECK(code(b, DeviceDataType::kInt32, ReduceOp::kSum) == braid::Code::kInvalidArgument);
  b.nsrcs = bc::kMaxSources + 1;
  CHECK(code(b, DeviceDataType::kInt32, ReduceOp::kSum) == braid::Code::kInvalidArgument);
  b = a;
  b.ndsts = 3;
  CHECK(code(b, DeviceDataType::kInt32, ReduceOp::kSum) == braid::Code::kInvalidArgument);
  b = a;
  b.srcs[1] = nullptr;
  CHECK(code(b, DeviceDataType::kInt32, ReduceOp::kSum) == braid::Code::kInvalidArgument);
  b.count = 0;  // nothing is read, so a null pointer is fine
  CHECK(bc::planReduceCopy(b, DeviceDataType::kInt32, ReduceOp::kSum).isOk());
  b = a;
  b.divisor = 2;
  CHECK(code(b, DeviceDataType::kInt32, ReduceOp::kBxor) == braid::Code::kInvalidArgument);
  CHECK(code(a, static_cast<DeviceDataType>(14), ReduceOp::kSum) == braid::Code::kInvalidArgument);
  CHECK(code(a, DeviceDataType::kInt32, static_cast<ReduceOp>(8)) == braid::Code::kInvalidArgument);

  auto plan = bc::planReduceCopy(a, DeviceDataType::kFloat64, ReduceOp::kBand);
  REQUIRE(plan.isOk());
  CHECK(plan->kind == bc::KernelKind::kBytes);
  CHECK(plan->args.count == 8);
  b = a;
  b.nsrcs = 1;
  plan = bc::planReduceCopy(b, DeviceDataType::kFloat16, ReduceOp::kMax);
  REQUIRE(plan.isOk());
  CHECK(plan->kind == bc::KernelKind::kBytes);  // one source, nothing to compute: a copy
  b.preMul = 1;
  plan = bc::planReduceCopy(b, DeviceDataType::kFloat16, ReduceOp::kAvg);
  REQUIRE(plan.isOk());
  CHECK(plan->kind == bc::KernelKind::kArithmetic);
  CHECK(plan->op == ReduceOp::kSum);
}

TEST_CASE("copy: any size, any offsets, one or two destinations, bit for bit", "[cuda]") {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4097}, size_t{70001}}) {
    for (size_t so : {0, 3, 16}) {
      for (size_t d0o : {0, 3, 9}) {
        std::vector<unsigned char> src(bytes + so + 1), d0(bytes + d0o + 2, 0xEE), d1(bytes + 5, 0xEE);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
        REQUIRE(bc::sim::runCopy(d0.data() + d0o, d1.data() + 3, src.data() + so, bytes).isOk());
        INFO("bytes " << bytes << " src+" << so << " dst+" << d0o);
        REQUIRE(std::memcmp(d0.data() + d0o, src.data() + so, bytes) == 0);
        REQUIRE(std::memcmp(d1.data() + 3, src.data() + so, bytes) == 0);
        REQUIRE(d0[d0o + bytes] == 0xEE);
        REQUIRE(d1[3 + bytes] == 0xEE);
        if (d0o > 0) REQUIRE(d0[d0o - 1] == 0xEE);
      }
    }
  }
}

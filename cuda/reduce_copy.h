#pragma once
// The host-side description of one fused reduce-copy: what the CUDA kernels (device_launch.h)
// and the CPU executor (host_kernels.h) both take, plus the launch geometry and argument
// checks they share. No CUDA header is included: callers compile with any C++ compiler.
//
// Semantics follow src/reduce exactly, so a slice reduced on the GPU has the same bits as
// the same slice reduced by braid's CPU kernels (NaN payloads aside, see docs/cuda.md):
//  - dsts[d][i] = pre(srcs[0][i]) (op) srcs[1][i] (op) ... (op) srcs[nsrcs-1][i], then post;
//  - fp16, bf16 and fp8 widen to fp32, combine, and round to nearest even once per call;
//  - kAvg reduces as kSum; `divisor` > 1 divides the rounded result (the final step of an
//    average), exactly as reduce::divideInPlace does after reduce::reduceN;
//  - `preMul` multiplies srcs[0] by `preMulScalar` and rounds to the element type before
//    combining, exactly as reduce::scale does before the sum of a pre-multiplied sum;
//  - integer sum/prod wrap; float max/min are `a > b ? a : b` / `a < b ? a : b` folded left;
//  - kBand/kBor/kBxor combine raw bits (for float types too, as the CPU kernels do).

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "common/types.h"

namespace braid::cuda {

// The types the kernels take: every DataType, with the same values (the 8-bit floats are
// OCP OFP8; see numeric.cuh).
enum class DeviceDataType : int {
  kInt8 = 0, kUint8, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kBFloat16, kFloat32, kFloat64,
  kFloat8E4M3, kFloat8E5M2,
  kInt16, kUint16,
};
constexpr int kNumDeviceDataTypes = 14;
static_assert(static_cast<int>(DeviceDataType::kFloat8E4M3) == static_cast<int>(DataType::kFloat8E4M3) &&
                  static_cast<int>(DeviceDataType::kFloat8E5M2) == static_cast<int>(DataType::kFloat8E5M2) &&
                  static_cast<int>(DeviceDataType::kInt16) == static_cast<int>(DataType::kInt16) &&
                  static_cast<int>(DeviceDataType::kUint16) == static_cast<int>(DataType::kUint16) &&
                  kNumDeviceDataTypes == kNumDataTypes,
              "DeviceDataType mirrors DataType's values");

// Whether the kernels take `t`, and as which DeviceDataType.
constexpr bool hasDeviceKernels(DataType t) { return static_cast<int>(t) < kNumDeviceDataTypes; }
constexpr DeviceDataType toDeviceDataType(DataType t) { return static_cast<DeviceDataType>(t); }
size_t deviceDataTypeSize(DeviceDataType t);
const char* deviceDataTypeName(DeviceDataType t);  // "float", "half", ..., "fp8_e4m3", "fp8_e5m2"
bool isDeviceFloatType(DeviceDataType t);

// Sources: the local input and incoming slots (a tree node's children, for instance);
// destinations: the local output and the next peer's slot. Eight and two cover every
// Schedule primitive with room for wide trees.
constexpr int kMaxSources = 8;
constexpr int kMaxDestinations = 2;

// One reduce-copy. Passed to the kernel by value, so it must stay trivially copyable and
// well under the 4 KiB kernel-parameter limit.
struct ReduceCopyArgs {
  const void* srcs[kMaxSources] = {};
  void* dsts[kMaxDestinations] = {};
  int nsrcs = 0;
  int ndsts = 0;
  size_t count = 0;            // elements; any count, including 0
  int preMul = 0;              // nonzero: scale srcs[0] by preMulScalar first
  int divisor = 1;             // > 1: divide the result (average); <= 1: no division
  double preMulScalar = 1.0;
};

// Grid and block size of one launch.
struct LaunchConfig {
  unsigned grid = 1;
  unsigned block = 32;
};

// What the launch-geometry choice may use. Defaults fit every GPU braid targets; the
// device launcher fills them from cudaGetDeviceProperties.
struct LaunchLimits {
  unsigned maxBlocks = 32;           // e.g. channels, or a share of the SMs
  unsigned maxThreadsPerBlock = 512;
};

// Bytes of one vector pack and of one thread's share of a loop iteration (4 packs); also
// what chooseLaunchConfig sizes the grid by.
constexpr size_t kPackBytes = 16;
constexpr size_t kBytesPerThreadIteration = 4 * kPackBytes;

// Grid and block for a reduce-copy over `bytes` bytes per buffer. Small slices get one
// small block (launch latency dominates and extra warps would idle); larger ones grow the
// block to limits.maxThreadsPerBlock, then the grid, one block per kMinBytesPerBlock, up to
// limits.maxBlocks. The block is always a whole number of warps (>= 32 threads).
LaunchConfig chooseLaunchConfig(size_t bytes, const LaunchLimits& limits = LaunchLimits{});
constexpr size_t kMinBytesPerBlock = size_t{64} << 10;

// Which compiled kernel runs a checked reduce-copy. The byte kernel serves copies (one
// source, no pre/post operation: moved bit for bit, whatever the type) and the bitwise ops
// (raw bits, any type); `count` is then in bytes.
enum class KernelKind : int { kArithmetic, kBytes };
struct KernelPlan {
  KernelKind kind = KernelKind::kArithmetic;
  DeviceDataType type = DeviceDataType::kUint8;
  ReduceOp op = ReduceOp::kSum;  // kAvg is mapped to kSum; kSum means copy for kBytes
  ReduceCopyArgs args;           // with `count` in bytes for kBytes
};

// Checks `args` for `type` and `op` and picks the kernel. kInvalidArgument for: nsrcs
// outside [1, kMaxSources], ndsts outside [1, kMaxDestinations], a null pointer among the
// used ones while count > 0, an unknown type or op, or a pre-multiplier or divisor with a
// bitwise op. Pointers may have any alignment; a destination may equal a source exactly
// (in place) but must not partially overlap one.
StatusOr<KernelPlan> planReduceCopy(const ReduceCopyArgs& args, DeviceDataType type, ReduceOp op);

// A plain copy of `bytes` bytes from `src` to one or two destinations, as a plan.
StatusOr<KernelPlan> planCopy(void* dst0, void* dst1, const void* src, size_t bytes);

}  // namespace braid::cuda

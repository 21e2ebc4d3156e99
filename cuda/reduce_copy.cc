#include "cuda/reduce_copy.h"

#include <algorithm>
#include <string>

namespace braid::cuda {

size_t deviceDataTypeSize(DeviceDataType t) {
  switch (t) {
    case DeviceDataType::kInt8: case DeviceDataType::kUint8:
    case DeviceDataType::kFloat8E4M3: case DeviceDataType::kFloat8E5M2: return 1;
    case DeviceDataType::kFloat16: case DeviceDataType::kBFloat16:
    case DeviceDataType::kInt16: case DeviceDataType::kUint16: return 2;
    case DeviceDataType::kInt32: case DeviceDataType::kUint32: case DeviceDataType::kFloat32: return 4;
    case DeviceDataType::kInt64: case DeviceDataType::kUint64: case DeviceDataType::kFloat64: return 8;
  }
  return 0;
}

const char* deviceDataTypeName(DeviceDataType t) {
  switch (t) {
    case DeviceDataType::kFloat8E4M3: return "fp8_e4m3";
    case DeviceDataType::kFloat8E5M2: return "fp8_e5m2";
    default: return dataTypeName(static_cast<DataType>(t));
  }
}

bool isDeviceFloatType(DeviceDataType t) {
  return t == DeviceDataType::kFloat8E4M3 || t == DeviceDataType::kFloat8E5M2 ||
         (static_cast<int>(t) < kNumDataTypes && isFloatType(static_cast<DataType>(t)));
}

LaunchConfig chooseLaunchConfig(size_t bytes, const LaunchLimits& limits) {
  constexpr size_t kWarp = 32;
  // Whole warps only: the pack loop hands each warp contiguous chunks.
  const size_t maxBlock = std::max<size_t>(kWarp, limits.maxThreadsPerBlock / kWarp * kWarp);
  const size_t maxBlocks = std::max<unsigned>(1, limits.maxBlocks);

  // One thread per iteration's worth of bytes, rounded up to whole warps.
  const size_t threads = std::max<size_t>(1, (bytes + kBytesPerThreadIteration - 1) / kBytesPerThreadIteration);
  LaunchConfig cfg;
  cfg.block = static_cast<unsigned>(std::min(maxBlock, (threads + kWarp - 1) / kWarp * kWarp));
  // More blocks only once each has a good share of work: a block's fixed cost (scheduling,
  // loading its arguments) is worth paying per 64 KiB, not per few hundred bytes.
  const size_t byWork = (bytes + kMinBytesPerBlock - 1) / kMinBytesPerBlock;
  const size_t byThreads = (threads + cfg.block - 1) / cfg.block;
  cfg.grid = static_cast<unsigned>(std::clamp<size_t>(std::min(byWork, byThreads), 1, maxBlocks));
  return cfg;
}

namespace {

Status checkPointers(const ReduceCopyArgs& a) {
  if (a.nsrcs < 1 || a.nsrcs > kMaxSources) {
    return invalidArgument("reduce-copy: nsrcs " + std::to_string(a.nsrcs) + " outside [1, " +
                           std::to_string(kMaxSources) + "]");
  }
  if (a.ndsts < 1 || a.ndsts > kMaxDestinations) {
    return invalidArgument("reduce-copy: ndsts " + std::to_string(a.ndsts) + " outside [1, " +
                           std::to_string(kMaxDestinations) + "]");
  }
  if (a.count == 0) return Status::ok();  // nothing is dereferenced
  for (int s = 0; s < a.nsrcs; ++s) {
    if (a.srcs[s] == nullptr) return invalidArgument("reduce-copy: srcs[" + std::to_string(s) + "] is null");
  }
  for (int d = 0; d < a.ndsts; ++d) {
    if (a.dsts[d] == nullptr) return invalidArgument("reduce-copy: dsts[" + std::to_string(d) + "] is null");
  }
  return Status::ok();
}

}  // namespace

StatusOr<KernelPlan> planReduceCopy(const ReduceCopyArgs& args, DeviceDataType type, ReduceOp op) {
  const int t = static_cast<int>(type);
  const int o = static_cast<int>(op);
  if (t < 0 || t >= kNumDeviceDataTypes) return invalidArgument("reduce-copy: unknown data type " + std::to_string(t));
  if (!validReduceOp(o)) return invalidArgument("reduce-copy: unknown reduction op " + std::to_string(o));
  BRAID_RETURN_IF_ERROR(checkPointers(args));

  KernelPlan plan;
  plan.args = args;
  plan.type = type;
  const bool post = args.divisor > 1;
  if (isBitwiseOp(op)) {
    if (args.preMul || post) {
      return invalidArgument(std::string("reduce-copy: ") + reduceOpName(op) +
                             " takes no pre-multiplier or divisor");
    }
    plan.kind = KernelKind::kBytes;
    plan.op = op;
  } else if (args.nsrcs == 1 && !args.preMul && !post) {
    // Nothing to compute: move the bits, so even signaling NaNs arrive unchanged, as
    // reduce::reduceN does for one source.
    plan.kind = KernelKind::kBytes;
    plan.op = ReduceOp::kSum;
  } else {
    plan.kind = KernelKind::kArithmetic;
    plan.op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  }
  if (plan.kind == KernelKind::kBytes) plan.args.count = args.count * deviceDataTypeSize(type);
  if (!post) plan.args.divisor = 1;
  return plan;
}

StatusOr<KernelPlan> planCopy(void* dst0, void* dst1, const void* src, size_t bytes) {
  ReduceCopyArgs a;
  a.srcs[0] = src;
  a.nsrcs = 1;
  a.dsts[0] = dst0;
  a.dsts[1] = dst1;
  a.ndsts = dst1 != nullptr ? 2 : 1;
  a.count = bytes;
  return planReduceCopy(a, DeviceDataType::kUint8, ReduceOp::kSum);
}

}  // namespace braid::cuda

#include "cuda/host_kernels.h"

#include "cuda/cpu_executor.h"
#include "cuda/kernel_table.cuh"

namespace braid::cuda::sim {
namespace {

Status runPlan(const KernelPlan& plan, DeviceDataType type, const LaunchConfig* cfg, CpuExecutor* exec) {
  if (plan.args.count == 0) return Status::ok();
  host_build::KernelFn fn = host_build::selectKernel(plan);
  if (fn == nullptr) return internalError("reduce-copy: no host kernel for this type and op");
  const size_t bytes = plan.kind == KernelKind::kBytes ? plan.args.count
                                                       : plan.args.count * deviceDataTypeSize(type);
  const LaunchConfig geometry = cfg != nullptr ? *cfg : chooseLaunchConfig(bytes, kHostLaunchLimits);
  CpuExecutor& e = exec != nullptr ? *exec : CpuExecutor::shared();
  return e.launch(fn, dim3(geometry.grid), dim3(geometry.block), plan.args);
}

}  // namespace

Status runReduceCopy(const ReduceCopyArgs& args, DeviceDataType type, ReduceOp op, const LaunchConfig* cfg,
                     CpuExecutor* exec) {
  StatusOr<KernelPlan> plan = planReduceCopy(args, type, op);
  if (!plan.isOk()) return plan.status();
  return runPlan(plan.value(), type, cfg, exec);
}

Status runCopy(void* dst0, void* dst1, const void* src, size_t bytes, const LaunchConfig* cfg, CpuExecutor* exec) {
  StatusOr<KernelPlan> plan = planCopy(dst0, dst1, src, bytes);
  if (!plan.isOk()) return plan.status();
  return runPlan(plan.value(), DeviceDataType::kUint8, cfg, exec);
}

}  // namespace braid::cuda::sim

#include "device/device_mover.h"

#include <map>
#include <string>

namespace braid::device {
namespace {

// Registrations counted per process: CUDA refuses to register memory twice
// (cudaErrorHostMemoryAlreadyRegistered), and two communicators of one process may map the
// same slots (ranks as threads over loopback share one region for both ends), so the first
// registers and the last to leave unregisters.
struct Registry {
  std::mutex mu;
  std::map<std::pair<Runtime*, void*>, int> users;
};
Registry& registry() {
  static auto* r = new Registry();  // never destroyed: used up to process exit
  return *r;
}

Status acquire(Runtime& rt, void* base, size_t bytes) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  int& n = reg.users[{&rt, base}];
  if (n == 0) {
    Status st = rt.registerHost(base, bytes);
    if (!st.isOk()) {
      reg.users.erase({&rt, base});
      return st;
    }
  }
  ++n;
  return Status::ok();
}

void releaseRegistration(Runtime& rt, void* base) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.users.find({&rt, base});
  if (it == reg.users.end()) return;
  if (--it->second == 0) {
    rt.unregisterHost(base);
    reg.users.erase(it);
  }
}

}  // namespace

DeviceMover::~DeviceMover() {
  for (void* p : registered_) releaseRegistration(rt_, p);
  for (Space& s : space_)
    if (s.ptr) rt_.freeHost(s.ptr);
}

Status DeviceMover::registerSlots(const std::vector<std::pair<void*, size_t>>& ranges) {
  for (const auto& [base, bytes] : ranges) {
    Status st = acquire(rt_, base, bytes);
    if (!st.isOk()) {
      for (void* p : registered_) releaseRegistration(rt_, p);
      registered_.clear();
      return st.withContext("registering a shared-memory segment of " + std::to_string(bytes) + " bytes");
    }
    registered_.push_back(base);
  }
  return Status::ok();
}

Status DeviceMover::run(const cuda::ReduceCopyArgs& args, DataType type, ReduceOp op) {
  if (!cuda::hasDeviceKernels(type))
    return Status(Code::kInvalidArgument, std::string("no device kernels for ") + dataTypeName(type));
  return rt_.runKernel(args, cuda::toDeviceDataType(type), op, device_.load(std::memory_order_relaxed));
}

Status DeviceMover::reduceCopy(void* dst0, void* dst1, const void* a, const void* b, size_t bytes, DataType type,
                               ReduceOp op) {
  if (bytes == 0) return Status::ok();
  cuda::ReduceCopyArgs args;
  args.dsts[0] = dst0;
  args.dsts[1] = dst1;
  args.ndsts = dst1 ? 2 : 1;
  args.srcs[0] = a;
  args.srcs[1] = b;
  args.nsrcs = b ? 2 : 1;
  if (!b) {
    // A copy: the byte kernel, bit for bit whatever the type.
    args.count = bytes;
    return run(args, DataType::kUint8, ReduceOp::kSum);
  }
  args.count = bytes / dataTypeSize(type);
  return run(args, type, op);
}

// One source into one destination, `bytes` of `type`.
static cuda::ReduceCopyArgs oneToOne(void* dst, const void* src, size_t bytes, DataType type) {
  cuda::ReduceCopyArgs args;
  args.dsts[0] = dst;
  args.ndsts = 1;
  args.srcs[0] = src;
  args.nsrcs = 1;
  args.count = bytes / dataTypeSize(type);
  return args;
}

Status DeviceMover::divide(void* buf, size_t bytes, DataType type, int divisor) {
  if (bytes == 0 || divisor <= 1) return Status::ok();
  cuda::ReduceCopyArgs args = oneToOne(buf, buf, bytes, type);
  args.divisor = divisor;
  return run(args, type, ReduceOp::kAvg);
}

Status DeviceMover::scale(void* dst, const void* src, size_t bytes, DataType type, double scalar) {
  if (bytes == 0) return Status::ok();
  cuda::ReduceCopyArgs args = oneToOne(dst, src, bytes, type);
  args.preMul = 1;
  args.preMulScalar = scalar;
  return run(args, type, ReduceOp::kSum);
}

StatusOr<void*> DeviceMover::workspace(int index, size_t bytes) {
  if (index < 0 || index > 1) return internalError("workspace index out of range");
  std::lock_guard<std::mutex> lock(mu_);
  Space& s = space_[index];
  if (s.bytes < bytes) {
    // Pinned host memory: with unified addressing every GPU reaches it at its host address.
    // The old space is freed at the runtime's next freeDeferred(), by a caller's thread: not
    // here, where a caller's stream may wait for this very call (freeing pinned memory may
    // wait for the device).
    if (s.ptr) rt_.deferFree(s.ptr);
    s = Space{};
    BRAID_ASSIGN_OR_RETURN(s.ptr, rt_.allocHost(bytes));
    s.bytes = bytes;
  }
  return s.ptr;
}

}  // namespace braid::device

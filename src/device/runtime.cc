#include "device/runtime.h"

namespace braid::device {
namespace {
std::atomic<Runtime*> gTestRuntime{nullptr};
}  // namespace

Runtime& runtime() {
  Runtime* r = gTestRuntime.load(std::memory_order_acquire);
  return r ? *r : cudaRuntime();
}

void setRuntimeForTesting(Runtime* r) { gTestRuntime.store(r, std::memory_order_release); }

std::string Runtime::describe() {
  Status st = available();
  return st.isOk() ? std::string(name()) + ": usable" : std::string(name()) + ": unavailable: " + st.message();
}

namespace {
Status noDirect(const Runtime& rt) {
  return Status(Code::kSystemError, std::string(rt.name()) + ": no direct path (kernels on registered host memory)");
}
}  // namespace

Status Runtime::copyRowsAsync(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t bytes, size_t rows,
                              Stream s) {
  for (size_t i = 0; i < rows; ++i)
    BRAID_RETURN_IF_ERROR(
        copyAsync(static_cast<char*>(dst) + i * dstPitch, static_cast<const char*>(src) + i * srcPitch, bytes, s));
  return Status::ok();
}

StatusOr<bool> Runtime::capturing(Stream) { return false; }

Status Runtime::launchHostFunc(Stream, void (*)(void*), void*) {
  return Status(Code::kInvalidArgument, std::string(name()) + ": no host functions on a stream");
}
Status Runtime::keepWithCapture(Stream, void* obj, void (*destroy)(void*)) {
  destroy(obj);
  return Status(Code::kInvalidArgument, std::string(name()) + ": no graph capture");
}

void Runtime::deferFree(void* p) {
  std::lock_guard<std::mutex> lock(deferredMu_);
  deferred_.push_back(p);
}

void Runtime::freeDeferred() {
  std::vector<void*> v;
  {
    std::lock_guard<std::mutex> lock(deferredMu_);
    v.swap(deferred_);
  }
  for (void* p : v) freeHost(p);
}
Status Runtime::directSupport(int) { return noDirect(*this); }
Status Runtime::registerHost(void*, size_t) { return noDirect(*this); }
StatusOr<void*> Runtime::allocDevice(size_t, int) { return noDirect(*this); }
StatusOr<std::string> Runtime::exportDevice(void*) { return noDirect(*this); }
StatusOr<void*> Runtime::importDevice(const std::string&, int) { return noDirect(*this); }
Status Runtime::rdmaSupport(int) { return noDirect(*this); }
StatusOr<Runtime::Dmabuf> Runtime::dmabufOf(void*, size_t) { return noDirect(*this); }
Status Runtime::runKernel(const cuda::ReduceCopyArgs&, cuda::DeviceDataType, ReduceOp, int) { return noDirect(*this); }

}  // namespace braid::device

// device::cudaRuntime() in a build without the CUDA toolkit: never available, and it says
// so; every pointer is host memory.

#include "device/runtime.h"

namespace braid::device {
namespace {

Status notBuilt() {
  return Status(Code::kSystemError, "this braid was built without the CUDA toolkit (no nvcc at configure)");
}

class NoCudaRuntime final : public Runtime {
 public:
  const char* name() const override { return "none"; }
  Status available() override { return notBuilt(); }
  PointerInfo pointerInfo(const void*) override { return PointerInfo{}; }
  StatusOr<void*> allocHost(size_t) override { return notBuilt(); }
  void freeHost(void*) override {}
  StatusOr<Flag> allocFlag() override { return notBuilt(); }
  void freeFlag(const Flag&) override {}
  Status copyAsync(void*, const void*, size_t, Stream) override { return notBuilt(); }
  StatusOr<void*> mark(Stream) override { return notBuilt(); }
  StatusOr<bool> reached(void*) override { return notBuilt(); }
  void releaseMarker(void*) override {}
  Status waitFlag(Stream, const Flag&, uint32_t) override { return notBuilt(); }
  std::string describe() override { return "not built: " + notBuilt().message(); }
};

}  // namespace

Runtime& cudaRuntime() {
  static NoCudaRuntime rt;
  return rt;
}

}  // namespace braid::device

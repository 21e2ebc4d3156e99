#pragma once
// The device runtime seam: the few CUDA calls the GPU path needs (what kind of memory a
// pointer is, pinned host memory, copies and markers in stream order, and a stream that
// waits for a word the host writes), behind an interface, so that the orchestration above it
// (device_queue.h) runs in tests with host memory and a host thread standing in for a stream
// (tests/unit/device). The CUDA implementation (cuda_runtime.cc) is compiled only when the
// toolkit was found; it links the CUDA runtime statically and reaches the driver only
// through the runtime and cudaGetDriverEntryPointByVersion, never -lcuda, so one libbraid
// runs on machines without a driver, where available() says why.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "cuda/reduce_copy.h"

namespace braid::device {

// A cudaStream_t; nullptr is CUDA's legacy default stream.
using Stream = void*;

enum class MemoryKind { kHost, kDevice };

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // for device memory
};

// A 32-bit word in pinned host memory: the host stores to `host`, a stream waits on
// `deviceAddress` (its address as the device sees it).
struct Flag {
  std::atomic<uint32_t>* host = nullptr;
  uint64_t deviceAddress = 0;
};

// Whether `value` has been reached by `current`, cyclically (as CUDA's
// CU_STREAM_WAIT_VALUE_GEQ compares: (int32_t)(current - value) >= 0), so sequence numbers
// may wrap.
inline bool reachedValue(uint32_t current, uint32_t value) {
  return static_cast<int32_t>(current - value) >= 0;
}

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual const char* name() const = 0;

  // Ok when device buffers can be used here; otherwise why not (no driver, no device,
  // built without the CUDA toolkit).
  virtual Status available() = 0;
  // Device (or managed) memory, or anything else (host memory, or no runtime at all).
  virtual PointerInfo pointerInfo(const void* p) = 0;

  // Pinned host memory for staging.
  virtual StatusOr<void*> allocHost(size_t bytes) = 0;
  virtual void freeHost(void* p) = 0;
  virtual StatusOr<Flag> allocFlag() = 0;
  virtual void freeFlag(const Flag& f) = 0;

  // Enqueue on `s`. None waits for the stream.
  virtual Status copyAsync(void* dst, const void* src, size_t bytes, Stream s) = 0;
  // `rows` copies of `bytes` each, row i from src + i * srcPitch to dst + i * dstPitch: one
  // strided copy where the runtime has it (cudaMemcpy2DAsync), else one copy per row.
  virtual Status copyRowsAsync(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t bytes,
                               size_t rows, Stream s);
  // A point on `s` the host can poll with reached(); released with releaseMarker().
  virtual StatusOr<void*> mark(Stream s) = 0;
  virtual StatusOr<bool> reached(void* marker) = 0;
  virtual void releaseMarker(void* marker) = 0;
  // Work enqueued on `s` after this waits until reachedValue(*f.host, value).
  virtual Status waitFlag(Stream s, const Flag& f, uint32_t value) = 0;
  // Whether `s` is being captured into a CUDA graph (or, for the legacy default stream, would
  // join another stream's capture). Work put on such a stream is recorded, not run: the
  // proxy would wait for a marker that never comes, and a replay would wait for a flag
  // value nobody stores again.
  virtual StatusOr<bool> capturing(Stream s);
  // CUDA graph capture (device_queue.h, "Captured calls"). launchHostFunc enqueues fn(arg)
  // on `s` (cudaLaunchHostFunc): captured, a host node that runs at every replay, on a
  // thread that must not call the runtime. keepWithCapture ties `obj` to the graph `s` is
  // being captured into: destroy(obj) runs once that graph and every executable graph made
  // from it are gone (a CUDA user object), on such a thread too; it owns `obj` from the
  // call on, so a failure runs destroy(obj) as well. Both fail where the runtime cannot
  // capture.
  virtual Status launchHostFunc(Stream s, void (*fn)(void*), void* arg);
  virtual Status keepWithCapture(Stream s, void* obj, void (*destroy)(void*));
  // Pinned host memory a graph's destructor gave up (it may not call the runtime): freed by
  // the next freeDeferred(), which device calls and queues run now and then.
  void deferFree(void* p);
  void freeDeferred();

  // The direct path (device_mover.h): the reduce-copy kernels run by the proxy's and the
  // channels' threads between device buffers and the shared-memory slots, registered with
  // the GPU. Ok when `device` reaches registered host memory at its host address (and its
  // kernels are loaded on it, ready to launch while a stream waits); otherwise why not.
  virtual Status directSupport(int device);
  // Registers host memory (a shared-memory segment) so kernels reach it; undone by
  // unregisterHost.
  virtual Status registerHost(void* p, size_t bytes);
  virtual void unregisterHost(void* p) {}
  // Device slots (BRAID_CUDA_PATH=ipc): memory on `device`, and a name for it another
  // process (or thread) of the job opens: between processes a CUDA IPC handle, or a cuMem
  // allocation's shareable handle (BRAID_CUDA_MEM_HANDLE, docs/cuda.md), the address itself
  // within one. importDevice gives the address this process reaches it at, whatever kind
  // of name the exporter chose. Once every peer has opened it, exportsTaken(p) stops
  // offering it: a handle that travels as a file descriptor (common/fd_share.h) is handed
  // out only until then.
  virtual StatusOr<void*> allocDevice(size_t bytes, int device);
  virtual void freeDevice(void* p) {}
  virtual StatusOr<std::string> exportDevice(void* p);
  virtual void exportsTaken(void* p) {}
  virtual StatusOr<void*> importDevice(const std::string& name, int device);
  virtual void closeImported(void* p) {}
  // GPUDirect RDMA (device areas a transport registers with its NIC, docs/cuda.md): ok when
  // `device` can take part, that is when its driver supports GPUDirect RDMA and the NIC's
  // writes into its memory can be made visible to its kernels; otherwise why not.
  virtual Status rdmaSupport(int device);
  // A dmabuf of device memory [p, p + bytes) for the NIC (page-aligned; the caller closes
  // the fd), or why the GPU gives none: the NIC may then still take the address itself.
  struct Dmabuf {
    int fd = -1;
    uint64_t offset = 0;
  };
  virtual StatusOr<Dmabuf> dmabufOf(void* p, size_t bytes);
  // Makes writes a NIC has completed into `device`'s memory visible to kernels launched
  // after it returns (a no-op where the GPU orders them itself).
  virtual Status flushRemoteWrites(int device) { return Status::ok(); }
  // Runs one reduce-copy (cuda/reduce_copy.h) on `device` and waits for it: on a stream of
  // the calling thread's own, which waits for no other stream.
  virtual Status runKernel(const cuda::ReduceCopyArgs& args, cuda::DeviceDataType type, ReduceOp op, int device);

  // One line for braid-info: the runtime's versions, the GPUs it sees and how a stream
  // waits for the host, or why device buffers cannot be used here.
  virtual std::string describe();

 private:
  std::mutex deferredMu_;
  std::vector<void*> deferred_;
};

// The CUDA runtime (or, in a build without the toolkit, one that is never available).
Runtime& cudaRuntime();

// The runtime braid uses: cudaRuntime(), unless a test installed another.
Runtime& runtime();
// Tests: installs `r` (nullptr restores cudaRuntime()). Not thread-safe against calls.
void setRuntimeForTesting(Runtime* r);

}  // namespace braid::device

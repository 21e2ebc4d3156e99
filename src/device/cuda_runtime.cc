// The CUDA implementation of device::Runtime. Compiled only when the toolkit was found;
// the CUDA runtime is linked statically, the driver reached through it (never -lcuda).
// Written without a GPU at hand and first run on an H200 (docs/cuda.md, "On a GPU"): every
// call here is a plain, documented CUDA runtime call, checked, and kept as short as it can be.

#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fd_share.h"
#include "common/hex.h"
#include "common/process_state.h"
#include "cuda/device_launch.h"
#include "cuda/stream_wait.h"
#include "device/runtime.h"

namespace braid::device {
namespace {

Status cudaFailure(const char* what, cudaError_t e) {
  return Status(Code::kSystemError, std::string("CUDA: ") + what + ": " + cudaGetErrorName(e) + " (" +
                                        cudaGetErrorString(e) + ")");
}

// Driver entry points as CUDA 12.0 defines them (cuda.h), resolved through the runtime.
using WaitValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using PointerGetAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
using GetHandleForAddressRangeFn = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);

// How device slots travel to other processes (BRAID_CUDA_MEM_HANDLE): a CUDA IPC handle of
// cudaMalloc'd memory (ipc, the default), or an allocation of CUDA's virtual memory
// management (cuMemCreate) exported as a POSIX file descriptor, handed over a Unix socket
// (fd), or as a fabric handle, which travels as bytes (fabric).
enum class HandleKind { kIpc, kFd, kFabric };

// The driver's virtual memory management (cuda.h; CUDA 10.2 and later, fabric handles 12.3),
// resolved through the runtime once.
struct Vmm {
  decltype(&cuDeviceGet) deviceGet = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) addressFree = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) setAccess = nullptr;
  decltype(&cuMemExportToShareableHandle) exportHandle = nullptr;
  decltype(&cuMemImportFromShareableHandle) importHandle = nullptr;
  bool complete() const {
    return deviceGet && attribute && granularity && create && release && reserve && addressFree && map && unmap &&
           setAccess && exportHandle && importHandle;
  }
};

Status driverFailure(const char* what, CUresult r) {
  return Status(Code::kSystemError, std::string("CUDA: ") + what + " failed with error " + std::to_string(static_cast<int>(r)));
}

// How long a rank waits for a peer's process to hand over a slot area's descriptor: it is
// answering (it has exported, and waits in the job's store for this rank) unless it died.
constexpr int kFetchTimeoutMs = 10000;

template <typename Fn>
Fn driverEntry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

const Vmm& vmm() {
  static const Vmm api = [] {
    Vmm v;
    v.deviceGet = driverEntry<decltype(v.deviceGet)>("cuDeviceGet");
    v.attribute = driverEntry<decltype(v.attribute)>("cuDeviceGetAttribute");
    v.granularity = driverEntry<decltype(v.granularity)>("cuMemGetAllocationGranularity");
    v.create = driverEntry<decltype(v.create)>("cuMemCreate");
    v.release = driverEntry<decltype(v.release)>("cuMemRelease");
    v.reserve = driverEntry<decltype(v.reserve)>("cuMemAddressReserve");
    v.addressFree = driverEntry<decltype(v.addressFree)>("cuMemAddressFree");
    v.map = driverEntry<decltype(v.map)>("cuMemMap");
    v.unmap = driverEntry<decltype(v.unmap)>("cuMemUnmap");
    v.setAccess = driverEntry<decltype(v.setAccess)>("cuMemSetAccess");
    v.exportHandle = driverEntry<decltype(v.exportHandle)>("cuMemExportToShareableHandle");
    v.importHandle = driverEntry<decltype(v.importHandle)>("cuMemImportFromShareableHandle");
    return v;
  }();
  return api;
}

// BRAID_CUDA_STREAM_WAIT=host: the stream waits in a host function (it runs on CUDA's
// callback thread, which it occupies until the flag is set: the queue always sets it).
struct HostWait {
  std::atomic<uint32_t>* flag;
  uint32_t value;
};
void CUDART_CB waitInHost(void* p) {
  auto* w = static_cast<HostWait*>(p);
  while (!reachedValue(w->flag->load(std::memory_order_acquire), w->value)) std::this_thread::yield();
  delete w;
}

class CudaRuntime final : public Runtime {
 public:
  const char* name() const override { return "cuda"; }

  Status available() override {
    std::call_once(once_, [this] { probe(); });
    return why_;
  }

  PointerInfo pointerInfo(const void* p) override {
    PointerInfo info;
    // Every call asks, twice: without a GPU this must cost one load (available() returns a
    // copy of the reason, a string, and call_once is a call through pthread_once).
    if (!p || !usable()) return info;
    if (pointerAttribute_) {
      // The driver's query needs no context, so a host-only job on a GPU machine never
      // creates one (cudaPointerGetAttributes may).
      unsigned int type = 0;
      if (pointerAttribute_(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
        return info;  // not memory CUDA knows: host
      if (type == CU_MEMORYTYPE_DEVICE) {
        int ordinal = -1;
        pointerAttribute_(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(p));
        info.kind = MemoryKind::kDevice;
        info.device = ordinal;
      }
      return info;
    }
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // an unknown pointer is host memory; clear the sticky error
      return info;
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
      info.kind = MemoryKind::kDevice;
      info.device = a.device;
    }
    return info;
  }

  StatusOr<void*> allocHost(size_t bytes) override {
    void* p = nullptr;
    // A captured call pins its block during the capture, and other threads' calls may pin
    // theirs while a thread captures, where the global capture mode would refuse it: this
    // thread allows it, as NCCL does, for this call alone.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) return cudaFailure("cudaHostAlloc", e);
    return p;
  }
  void freeHost(void* p) override {
    if (!p) return;
    // Likewise while another thread captures (a graph's block is freed at the next call).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaFreeHost(p);
    cudaThreadExchangeStreamCaptureMode(&mode);
  }

  StatusOr<Flag> allocFlag() override {
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, sizeof(std::atomic<uint32_t>), cudaHostAllocPortable | cudaHostAllocMapped);
    if (e != cudaSuccess) return cudaFailure("cudaHostAlloc (mapped flag)", e);
    Flag f;
    f.host = new (p) std::atomic<uint32_t>(0);
    void* dev = nullptr;
    e = cudaHostGetDevicePointer(&dev, p, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(p);
      return cudaFailure("cudaHostGetDevicePointer", e);
    }
    f.deviceAddress = reinterpret_cast<uint64_t>(dev);
    // The polling kernel (the wait where the driver has no stream memory operations) is
    // loaded now, before any stream waits on this flag: loaded at its first launch it could
    // wait for another stream's flag wait (cuda::preloadKernels says why).
    if (waitMode_ != WaitMode::kHost) {
      Status st = cuda::preloadWaitFlag();
      if (!st.isOk()) {
        cudaFreeHost(p);
        return st;
      }
    }
    return f;
  }
  void freeFlag(const Flag& f) override {
    if (f.host) cudaFreeHost(f.host);
  }

  Status copyAsync(void* dst, const void* src, size_t bytes, Stream s) override {
    if (bytes == 0) return Status::ok();
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(s));
    return e == cudaSuccess ? Status::ok() : cudaFailure("cudaMemcpyAsync", e);
  }

  Status copyRowsAsync(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t bytes, size_t rows,
                       Stream s) override {
    if (bytes == 0 || rows == 0) return Status::ok();
    // cudaMemcpy2DAsync takes pitches up to the device's cudaDevAttrMaxPitch (2^31 - 1 on
    // current GPUs); wider rows go one by one.
    constexpr size_t kMaxPitch = (size_t{1} << 31) - 1;
    if (dstPitch > kMaxPitch || srcPitch > kMaxPitch)
      return Runtime::copyRowsAsync(dst, dstPitch, src, srcPitch, bytes, rows, s);
    cudaError_t e = cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, bytes, rows, cudaMemcpyDefault,
                                      static_cast<cudaStream_t>(s));
    return e == cudaSuccess ? Status::ok() : cudaFailure("cudaMemcpy2DAsync", e);
  }

  StatusOr<void*> mark(Stream s) override {
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return cudaFailure("cudaEventCreateWithFlags", e);
    e = cudaEventRecord(ev, static_cast<cudaStream_t>(s));
    if (e != cudaSuccess) {
      cudaEventDestroy(ev);
      return cudaFailure("cudaEventRecord", e);
    }
    return static_cast<void*>(ev);
  }
  StatusOr<bool> reached(void* marker) override {
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(marker));
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    return cudaFailure("cudaEventQuery", e);
  }
  void releaseMarker(void* marker) override { cudaEventDestroy(static_cast<cudaEvent_t>(marker)); }

  Status waitFlag(Stream s, const Flag& f, uint32_t value) override {
    BRAID_RETURN_IF_ERROR(waitModeError_);
    if (waitMode_ == WaitMode::kMemOp) {
      if (WaitValue32Fn wait = waitValue32_.load(std::memory_order_relaxed)) {
        CUresult r = wait(static_cast<CUstream>(s), static_cast<CUdeviceptr>(f.deviceAddress), value,
                          CU_STREAM_WAIT_VALUE_GEQ);
        if (r == CUDA_SUCCESS) return Status::ok();
        // A device without stream memory operations: the polling kernel from now on
        // (communicators on other threads may get here at once; any of them may store it).
        waitValue32_.store(nullptr, std::memory_order_relaxed);
      }
    }
    if (waitMode_ != WaitMode::kHost)
      return cuda::launchWaitFlag(reinterpret_cast<const void*>(f.deviceAddress), value, s);
    auto* w = new HostWait{f.host, value};
    cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(s), &waitInHost, w);
    if (e != cudaSuccess) {
      delete w;
      return cudaFailure("cudaLaunchHostFunc", e);
    }
    return Status::ok();
  }

  Status launchHostFunc(Stream s, void (*fn)(void*), void* arg) override {
    cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(s), fn, arg);
    return e == cudaSuccess ? Status::ok() : cudaFailure("cudaLaunchHostFunc", e);
  }

  Status keepWithCapture(Stream s, void* obj, void (*destroy)(void*)) override {
    cudaStreamCaptureStatus state = cudaStreamCaptureStatusNone;
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(s), &state, nullptr, &graph);
    if (e != cudaSuccess || state != cudaStreamCaptureStatusActive || !graph) {
      destroy(obj);
      if (e != cudaSuccess) return cudaFailure("cudaStreamGetCaptureInfo", e);
      return Status(Code::kInvalidArgument, "the stream is not being captured (its capture was invalidated)");
    }
    cudaUserObject_t uo = nullptr;
    // The one reference moves to the graph; executable graphs made from it take their own.
    e = cudaUserObjectCreate(&uo, obj, destroy, 1, cudaUserObjectNoDestructorSync);
    if (e != cudaSuccess) {
      destroy(obj);
      return cudaFailure("cudaUserObjectCreate", e);
    }
    e = cudaGraphRetainUserObject(graph, uo, 1, cudaGraphUserObjectMove);
    if (e != cudaSuccess) {
      cudaUserObjectRelease(uo, 1);  // runs destroy(obj)
      return cudaFailure("cudaGraphRetainUserObject", e);
    }
    return Status::ok();
  }

  StatusOr<bool> capturing(Stream s) override {
    cudaStreamCaptureStatus state = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(static_cast<cudaStream_t>(s), &state);
    // The legacy default stream while a blocking stream captures: using it would join that
    // capture (CUDA's documented answer; the error is not sticky).
    if (e == cudaErrorStreamCaptureImplicit) {
      cudaGetLastError();
      return true;
    }
    if (e != cudaSuccess) return cudaFailure("cudaStreamIsCapturing", e);
    return state != cudaStreamCaptureStatusNone;
  }

  Status directSupport(int device) override {
    BRAID_RETURN_IF_ERROR(available());
    int can = 0;
    cudaError_t e = cudaDeviceGetAttribute(&can, cudaDevAttrCanUseHostPointerForRegisteredMem, device);
    if (e != cudaSuccess) return cudaFailure("cudaDeviceGetAttribute", e);
    if (!can)
      return Status(Code::kSystemError, "CUDA: GPU " + std::to_string(device) +
                                            " cannot use registered host memory at its host address");
    // The direct path launches kernels while the caller's stream waits for it: each must be
    // loaded before (cuda::preloadKernels says why), on that GPU, leaving this thread's
    // current device as it was.
    int current = -1;
    e = cudaGetDevice(&current);
    if (e != cudaSuccess) return cudaFailure("cudaGetDevice", e);
    if (current != device && (e = cudaSetDevice(device)) != cudaSuccess) return cudaFailure("cudaSetDevice", e);
    Status st = cuda::preloadKernels();
    if (current != device) cudaSetDevice(current);
    return st;
  }

  Status registerHost(void* p, size_t bytes) override {
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
    return e == cudaSuccess ? Status::ok() : cudaFailure("cudaHostRegister", e);
  }
  void unregisterHost(void* p) override {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
  }

  // Device slots. The caller's thread keeps its current device (DeviceScope).
  StatusOr<void*> allocDevice(size_t bytes, int device) override {
    BRAID_RETURN_IF_ERROR(available());
    BRAID_RETURN_IF_ERROR(handleKindError_);
    if (handleKind_ != HandleKind::kIpc) return allocShareable(bytes, device);
    DeviceScope scope;
    BRAID_RETURN_IF_ERROR(scope.use(device));
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) return cudaFailure("cudaMalloc (device slots)", e);
    return p;
  }
  void freeDevice(void* p) override {
    if (!p) return;
    Area area;
    if (takeArea(p, &area)) return unmapArea(p, area);
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();
  }
  // "process:address:handle" (handle in hex): the address serves threads of the same
  // process, which CUDA does not let open their own handles; the handle the others. The
  // process is processToken(), not the pid: a rank of another pid namespace (a container on
  // the same host) may have the same pid, and an address of its process read here as one of
  // this process would be some other memory of this one. A cuMem allocation's name starts
  // with its kind, "cumem-fd:" (then the descriptor's fd_share ticket as the handle) or
  // "cumem-fabric:" (the fabric handle in hex), and carries its size before the handle.
  StatusOr<std::string> exportDevice(void* p) override {
    const std::string process = std::to_string(processToken()) + ":" + std::to_string(reinterpret_cast<uintptr_t>(p));
    {
      std::lock_guard<std::mutex> lock(areasMu_);
      auto it = areas_.find(reinterpret_cast<uintptr_t>(p));
      if (it != areas_.end()) return exportShareable(it->second, process);
    }
    cudaIpcMemHandle_t h{};
    cudaError_t e = cudaIpcGetMemHandle(&h, p);
    if (e != cudaSuccess) return cudaFailure("cudaIpcGetMemHandle", e);
    return process + ":" + hex(h.reserved, sizeof h.reserved);
  }
  void exportsTaken(void* p) override {
    std::string ticket;
    {
      std::lock_guard<std::mutex> lock(areasMu_);
      auto it = areas_.find(reinterpret_cast<uintptr_t>(p));
      if (it == areas_.end()) return;
      ticket.swap(it->second.ticket);
    }
    if (!ticket.empty()) withdrawFd(ticket);
  }
  StatusOr<void*> importDevice(const std::string& name, int device) override {
    HandleKind kind = HandleKind::kIpc;
    size_t at = 0;
    if (name.compare(0, 9, "cumem-fd:") == 0) kind = HandleKind::kFd, at = 9;
    else if (name.compare(0, 13, "cumem-fabric:") == 0) kind = HandleKind::kFabric, at = 13;
    // process:address[:bytes]:handle
    std::vector<std::string> f;
    for (size_t i = at;;) {
      const size_t c = name.find(':', i);
      f.push_back(name.substr(i, c == std::string::npos ? c : c - i));
      if (c == std::string::npos) break;
      i = c + 1;
    }
    const size_t want = kind == HandleKind::kIpc ? 3 : 4;
    if (f.size() != want || f[0].empty() || f[1].empty() || f[0].find_first_not_of("0123456789") != std::string::npos ||
        f[1].find_first_not_of("0123456789") != std::string::npos)
      return Status(Code::kInvalidArgument, "device slots: a malformed name '" + name + "'");
    if (std::strtoull(f[0].c_str(), nullptr, 10) == processToken()) {
      // Threads of one process: the address. On another GPU this GPU's kernels reach it
      // through peer access, which stays on for the process once enabled.
      void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(std::strtoull(f[1].c_str(), nullptr, 10)));
      const PointerInfo info = pointerInfo(p);
      if (info.kind != MemoryKind::kDevice)
        return Status(Code::kInvalidArgument, "device slots: a peer thread's slots are not device memory");
      if (info.device != device) BRAID_RETURN_IF_ERROR(reachFrom(device, info.device, p));
      return p;
    }
    if (kind != HandleKind::kIpc) return importShareable(kind, f[2], f[3], device);
    cudaIpcMemHandle_t h{};
    if (!unhex(f[2], h.reserved, sizeof h.reserved))
      return Status(Code::kInvalidArgument, "device slots: a malformed IPC name '" + name + "'");
    DeviceScope scope;
    BRAID_RETURN_IF_ERROR(scope.use(device));
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) return cudaFailure("cudaIpcOpenMemHandle", e);
    std::lock_guard<std::mutex> lock(importedMu_);
    imported_.push_back(p);
    return p;
  }
  void closeImported(void* p) override {
    Area area;
    if (takeArea(p, &area)) return unmapArea(p, area);
    {
      std::lock_guard<std::mutex> lock(importedMu_);
      auto it = std::find(imported_.begin(), imported_.end(), p);
      if (it == imported_.end()) return;  // an address of this process: nothing was opened
      imported_.erase(it);
    }
    if (cudaIpcCloseMemHandle(p) != cudaSuccess) cudaGetLastError();
  }

  // GPUDirect RDMA. A NIC's writes into GPU memory need a flush before a kernel reads them
  // unless the GPU orders them for its own context (cudaDevAttrGPUDirectRDMAWritesOrdering
  // at least "owner"); the flush is the host call, so a GPU with neither cannot take part.
  Status rdmaSupport(int device) override {
    BRAID_RETURN_IF_ERROR(available());
    int supported = 0, ordering = 0, options = 0;
    cudaError_t e = cudaDeviceGetAttribute(&supported, cudaDevAttrGPUDirectRDMASupported, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, device);
    if (e != cudaSuccess) return cudaFailure("cudaDeviceGetAttribute (GPUDirect RDMA)", e);
    const std::string gpu = "CUDA: GPU " + std::to_string(device);
    if (!supported) return Status(Code::kSystemError, gpu + " does not support GPUDirect RDMA");
    const bool ordered = ordering >= cudaGPUDirectRDMAWritesOrderingOwner;
    if (!ordered && !(options & cudaFlushGPUDirectRDMAWritesOptionHost))
      return Status(Code::kSystemError, gpu + " can neither order nor flush GPUDirect RDMA writes from the host");
    if (device >= 0 && static_cast<size_t>(device) < rdmaOrdered_.size())
      rdmaOrdered_[static_cast<size_t>(device)].store(ordered, std::memory_order_relaxed);
    return Status::ok();
  }
  StatusOr<Dmabuf> dmabufOf(void* p, size_t bytes) override {
    static const auto getHandle = driverEntry<GetHandleForAddressRangeFn>("cuMemGetHandleForAddressRange");
    if (!getHandle) return Status(Code::kSystemError, "CUDA: the driver has no cuMemGetHandleForAddressRange");
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    if (reinterpret_cast<uintptr_t>(p) % page || bytes % page)
      return Status(Code::kInvalidArgument, "CUDA: a dmabuf needs a page-aligned range");
    int fd = -1;
    const CUresult r = getHandle(&fd, reinterpret_cast<CUdeviceptr>(p), bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS || fd < 0)
      return Status(Code::kSystemError, "CUDA: cuMemGetHandleForAddressRange (dmabuf) failed with error " +
                                            std::to_string(static_cast<int>(r)));
    return Dmabuf{fd, 0};
  }
  // Called before every kernel that reads a received device payload: a flag read, no lock.
  Status flushRemoteWrites(int device) override {
    if (device >= 0 && static_cast<size_t>(device) < rdmaOrdered_.size() &&
        rdmaOrdered_[static_cast<size_t>(device)].load(std::memory_order_relaxed))
      return Status::ok();
    DeviceScope scope;
    BRAID_RETURN_IF_ERROR(scope.use(device));
    const cudaError_t e =
        cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice, cudaFlushGPUDirectRDMAWritesToOwner);
    return e == cudaSuccess ? Status::ok() : cudaFailure("cudaDeviceFlushGPUDirectRDMAWrites", e);
  }

  // Each thread that runs kernels (the proxy, the communicator's channel threads) has one
  // stream per GPU, created non-blocking: a stream that synchronized with the legacy default
  // stream would wait for the caller's flag wait there, which waits for this very kernel.
  Status runKernel(const cuda::ReduceCopyArgs& args, cuda::DeviceDataType type, ReduceOp op, int device) override {
    thread_local std::vector<cudaStream_t> streams;  // by device; they go with the process
    if (device < 0) return Status(Code::kInvalidArgument, "CUDA: a kernel without a device");
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) {
      cudaError_t e = cudaSetDevice(device);
      if (e != cudaSuccess) return cudaFailure("cudaSetDevice", e);
    }
    if (streams.size() <= static_cast<size_t>(device)) streams.resize(static_cast<size_t>(device) + 1, nullptr);
    cudaStream_t& s = streams[static_cast<size_t>(device)];
    if (!s) {
      cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (e != cudaSuccess) {
        s = nullptr;
        return cudaFailure("cudaStreamCreateWithFlags", e);
      }
    }
    BRAID_RETURN_IF_ERROR(cuda::launchReduceCopy(args, type, op, s));
    cudaError_t e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? Status::ok() : cudaFailure("cudaStreamSynchronize (reduce-copy)", e);
  }

  std::string describe() override {
    const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    int rtVersion = 0, drvVersion = 0;
    std::string out = "CUDA runtime ";
    out += cudaRuntimeGetVersion(&rtVersion) == cudaSuccess ? version(rtVersion) : "?";
    out += " (static), driver ";
    // No driver: CUDA reports version 0.
    out += cudaDriverGetVersion(&drvVersion) == cudaSuccess && drvVersion > 0 ? version(drvVersion) : "none";
    Status st = available();
    if (!st.isOk()) return out + "; device buffers unavailable: " + st.message();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) cudaGetLastError();
    out += "; " + std::to_string(n) + (n == 1 ? " GPU" : " GPUs");
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      out += std::string(i ? ", " : ": ") + std::to_string(i) + " " + p.name + " (sm_" + std::to_string(p.major) +
             std::to_string(p.minor) + ", " + std::to_string(p.totalGlobalMem >> 20) + " MiB)";
    }
    out += "; stream wait: ";
    if (!waitModeError_.isOk()) return out + waitModeError_.message();
    switch (waitMode_) {
      case WaitMode::kMemOp:
        out += waitValue32_.load(std::memory_order_relaxed) ? "memop (cuStreamWaitValue32)"
                                                            : "kernel (the driver has no cuStreamWaitValue32)";
        break;
      case WaitMode::kKernel: out += "kernel"; break;
      case WaitMode::kHost: out += "host function"; break;
    }
    out += !handleKindError_.isOk()           ? "; device slots: " + handleKindError_.message()
           : handleKind_ == HandleKind::kIpc  ? std::string("; device slots shared by CUDA IPC")
           : handleKind_ == HandleKind::kFd   ? std::string("; device slots shared as cuMem file descriptors")
                                              : std::string("; device slots shared as cuMem fabric handles");
    // Which path device calls take (BRAID_CUDA_PATH), and whether GPU 0 could take the
    // direct one.
    const char* path = std::getenv("BRAID_CUDA_PATH");
    if (path && !std::strcmp(path, "direct")) {
      Status d = n > 0 ? directSupport(0) : Status(Code::kSystemError, "no GPU");
      out += d.isOk() ? "; calls: direct (BRAID_CUDA_PATH=direct) on the slots of every transport that gives them"
                      : "; calls: staged, the direct path is unavailable: " + d.message();
    } else {
      out += "; calls: staged (BRAID_CUDA_PATH=direct: kernels on the transports' slots)";
    }
    return out;
  }

 private:
  // Run once (once_): whether CUDA sees a GPU, and the driver entry points if it does.
  void probe() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      // No driver, or no device node: CUDA says which.
      why_ = cudaFailure("no usable GPU", e);
      cudaGetLastError();
    } else if (n == 0) {
      why_ = Status(Code::kSystemError, "CUDA: no GPU is visible (CUDA_VISIBLE_DEVICES?)");
    }
    // How a stream waits for the host (BRAID_CUDA_STREAM_WAIT): the driver's stream memory
    // operation (memop, the default; the kernel where the device has none), a one-thread
    // kernel polling the flag (kernel), or a host function (host). On an H200 the three
    // measured alike (docs/cuda.md). A value braid does not know fails every device call
    // with this message; host calls are unaffected.
    if (const char* v = std::getenv("BRAID_CUDA_STREAM_WAIT"); v && *v) {
      if (!std::strcmp(v, "kernel")) waitMode_ = WaitMode::kKernel;
      else if (!std::strcmp(v, "memop")) waitMode_ = WaitMode::kMemOp;
      else if (!std::strcmp(v, "host")) waitMode_ = WaitMode::kHost;
      else
        waitModeError_ = Status(Code::kInvalidArgument, std::string("BRAID_CUDA_STREAM_WAIT=") + v +
                                                            ": expected kernel, memop or host");
    }
    // How device slots are shared between processes (BRAID_CUDA_MEM_HANDLE): a value braid
    // does not know is the reason every rank keeps the shared-memory slots.
    if (const char* v = std::getenv("BRAID_CUDA_MEM_HANDLE"); v && *v) {
      if (!std::strcmp(v, "ipc")) handleKind_ = HandleKind::kIpc;
      else if (!std::strcmp(v, "fd")) handleKind_ = HandleKind::kFd;
      else if (!std::strcmp(v, "fabric")) handleKind_ = HandleKind::kFabric;
      else
        handleKindError_ =
            Status(Code::kInvalidArgument, std::string("BRAID_CUDA_MEM_HANDLE=") + v + ": expected ipc, fd or fabric");
    }
    if (why_.isOk()) {
      waitValue32_ = driverEntry<WaitValue32Fn>("cuStreamWaitValue32");
      pointerAttribute_ = driverEntry<PointerGetAttributeFn>("cuPointerGetAttribute");
    }
    state_.store(why_.isOk() ? kUsable : kUnusable, std::memory_order_release);
  }

  bool usable() {
    int st = state_.load(std::memory_order_acquire);
    if (st == kUnknown) {
      (void)available();
      st = state_.load(std::memory_order_acquire);
    }
    return st == kUsable;
  }

  // Makes `device` current on this thread for a scope, then restores the one before.
  struct DeviceScope {
    int previous = -1;
    Status use(int device) {
      if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
      if (previous == device) return Status::ok();
      cudaError_t e = cudaSetDevice(device);
      return e == cudaSuccess ? Status::ok() : cudaFailure("cudaSetDevice", e);
    }
    ~DeviceScope() {
      int now = -1;
      if (previous >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous) cudaSetDevice(previous);
    }
  };

  // A cuMem allocation behind a device slot area: made here (own) and exported, or imported
  // from a peer's process and mapped here.
  struct Area {
    CUmemGenericAllocationHandle handle = 0;
    size_t bytes = 0;  // whole granules
    HandleKind kind = HandleKind::kFd;
    std::string ticket;  // an own kFd area's descriptor while it is offered (fd_share)
  };

  static CUmemAllocationHandleType handleType(HandleKind k) {
    return k == HandleKind::kFd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_FABRIC;
  }
  static const char* handleName(HandleKind k) { return k == HandleKind::kFd ? "fd" : "fabric"; }

  // BRAID_CUDA_MEM_HANDLE=fd or fabric: memory of `device` made shareable as that kind,
  // mapped here for `device`'s kernels.
  StatusOr<void*> allocShareable(size_t bytes, int device) {
    const Vmm& api = vmm();
    const std::string asked = std::string("BRAID_CUDA_MEM_HANDLE=") + handleName(handleKind_);
    if (!api.complete())
      return Status(Code::kSystemError, "CUDA: the driver has no virtual memory management (cuMemCreate), which " +
                                            asked + " needs");
    const std::string gpu = "CUDA: GPU " + std::to_string(device);
    CUdevice dev = 0;
    CUresult r = api.deviceGet(&dev, device);
    if (r != CUDA_SUCCESS) return driverFailure("cuDeviceGet", r);
    int vmmOk = 0, typeOk = 0, rdmaOk = 0;
    api.attribute(&vmmOk, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    api.attribute(&typeOk,
                  handleKind_ == HandleKind::kFd ? CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
                                                 : CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
                  dev);
    api.attribute(&rdmaOk, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev);
    if (!vmmOk) return Status(Code::kSystemError, gpu + " has no virtual memory management (cuMemCreate)");
    if (!typeOk)
      return Status(Code::kSystemError, gpu + " cannot export its memory as " +
                                            (handleKind_ == HandleKind::kFd ? "a POSIX file descriptor" : "a fabric handle") +
                                            ", which " + asked + " asks for");
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = handleType(handleKind_);
    // A NIC may register these areas too (GPUDirect RDMA), where the GPU lets it.
    prop.allocFlags.gpuDirectRDMACapable = rdmaOk ? 1 : 0;
    size_t granule = 0;
    r = api.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (r != CUDA_SUCCESS || granule == 0) return driverFailure("cuMemGetAllocationGranularity", r);
    Area area;
    area.kind = handleKind_;
    area.bytes = (std::max<size_t>(bytes, 1) + granule - 1) / granule * granule;
    DeviceScope scope;
    BRAID_RETURN_IF_ERROR(scope.use(device));
    r = api.create(&area.handle, area.bytes, &prop, 0);
    if (r != CUDA_SUCCESS) return driverFailure("cuMemCreate (device slots)", r);
    return keepMapped(area, granule, device);
  }

  // Maps `area` at an address of its own, for `device`'s kernels, and keeps it; releases its
  // handle when it cannot.
  StatusOr<void*> keepMapped(Area& area, size_t alignment, int device) {
    const Vmm& api = vmm();
    CUdeviceptr va = 0;
    CUresult r = api.reserve(&va, area.bytes, alignment, 0, 0);
    const char* failed = r != CUDA_SUCCESS ? "cuMemAddressReserve" : nullptr;
    if (!failed && (r = api.map(va, area.bytes, 0, area.handle, 0)) != CUDA_SUCCESS) {
      failed = "cuMemMap";
      api.addressFree(va, area.bytes);
    }
    if (!failed && (r = grantAccess(va, area.bytes, device)) != CUDA_SUCCESS) {
      failed = "cuMemSetAccess";
      api.unmap(va, area.bytes);
      api.addressFree(va, area.bytes);
    }
    if (failed) {
      api.release(area.handle);
      return driverFailure(failed, r);
    }
    std::lock_guard<std::mutex> lock(areasMu_);
    areas_[static_cast<uintptr_t>(va)] = area;
    return reinterpret_cast<void*>(static_cast<uintptr_t>(va));
  }

  // The name of an own cuMem area (areasMu_ held): its descriptor offered through fd_share
  // (once; exportsTaken withdraws it), or its fabric handle.
  StatusOr<std::string> exportShareable(Area& area, const std::string& process) {
    const Vmm& api = vmm();
    const std::string head = std::string("cumem-") + handleName(area.kind) + ":" + process + ":" +
                             std::to_string(area.bytes) + ":";
    if (area.kind == HandleKind::kFabric) {
      CUmemFabricHandle fabric{};
      const CUresult r = api.exportHandle(&fabric, area.handle, CU_MEM_HANDLE_TYPE_FABRIC, 0);
      if (r != CUDA_SUCCESS) return driverFailure("cuMemExportToShareableHandle (fabric)", r);
      return head + hex(fabric.data, sizeof fabric.data);
    }
    if (area.ticket.empty()) {
      int fd = -1;
      const CUresult r = api.exportHandle(&fd, area.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (r != CUDA_SUCCESS || fd < 0) return driverFailure("cuMemExportToShareableHandle (file descriptor)", r);
      auto ticket = publishFd(fd);
      ::close(fd);
      BRAID_RETURN_IF_ERROR(ticket.status());
      area.ticket = ticket.value();
    }
    return head + area.ticket;
  }

  // A peer's cuMem area, from the size and handle of its name.
  StatusOr<void*> importShareable(HandleKind kind, const std::string& bytes, const std::string& handle, int device) {
    const Vmm& api = vmm();
    if (!api.complete())
      return Status(Code::kSystemError,
                    "CUDA: the driver has no virtual memory management (cuMemCreate), which a peer's slots need");
    Area area;
    area.kind = kind;
    area.bytes = std::strtoull(bytes.c_str(), nullptr, 10);
    if (area.bytes == 0 || bytes.find_first_not_of("0123456789") != std::string::npos)
      return Status(Code::kInvalidArgument, "device slots: a peer's cuMem area has a malformed size '" + bytes + "'");
    CUresult r;
    if (kind == HandleKind::kFd) {
      BRAID_ASSIGN_OR_RETURN(const int fd, fetchFd(handle, kFetchTimeoutMs));
      r = api.importHandle(&area.handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      ::close(fd);
    } else {
      CUmemFabricHandle fabric{};
      if (!unhex(handle, fabric.data, sizeof fabric.data))
        return Status(Code::kInvalidArgument, "device slots: a malformed fabric handle");
      r = api.importHandle(&area.handle, &fabric, CU_MEM_HANDLE_TYPE_FABRIC);
    }
    if (r != CUDA_SUCCESS) return driverFailure("cuMemImportFromShareableHandle", r);
    DeviceScope scope;
    BRAID_RETURN_IF_ERROR(scope.use(device));
    return keepMapped(area, 0, device);
  }

  // The cuMem area at `p`, no longer kept, if there is one.
  bool takeArea(void* p, Area* out) {
    std::lock_guard<std::mutex> lock(areasMu_);
    auto it = areas_.find(reinterpret_cast<uintptr_t>(p));
    if (it == areas_.end()) return false;
    *out = std::move(it->second);
    areas_.erase(it);
    return true;
  }
  static void unmapArea(void* p, const Area& area) {
    const Vmm& api = vmm();
    if (!area.ticket.empty()) withdrawFd(area.ticket);
    const auto va = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
    api.unmap(va, area.bytes);
    api.addressFree(va, area.bytes);
    api.release(area.handle);
  }

  // Lets kernels on `from` reach the slots at `p`, memory of `to`, made by another thread of
  // this process: peer access for cudaMalloc'd memory; for a cuMem area, which peer access
  // does not open, access to its mapping for `from` as well (the GPUs must still reach each
  // other).
  Status reachFrom(int from, int to, void* p) {
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(areasMu_);
      auto it = areas_.find(reinterpret_cast<uintptr_t>(p));
      if (it != areas_.end()) bytes = it->second.bytes;
    }
    if (bytes == 0) return enablePeerAccess(from, to);
    BRAID_RETURN_IF_ERROR(peerReachable(from, to));
    const CUresult r = grantAccess(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)), bytes, from);
    return r == CUDA_SUCCESS ? Status::ok() : driverFailure("cuMemSetAccess (a peer thread's slots)", r);
  }

  // Lets `device`'s kernels read and write the mapping [va, va + bytes).
  static CUresult grantAccess(CUdeviceptr va, size_t bytes, int device) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return vmm().setAccess(va, bytes, &access, 1);
  }

  // Whether kernels on `from` can reach memory on `to` at all (NVLink or PCIe P2P).
  static Status peerReachable(int from, int to) {
    int can = 0;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, from, to);
    if (e != cudaSuccess) return cudaFailure("cudaDeviceCanAccessPeer", e);
    if (!can)
      return Status(Code::kInvalidArgument, "device slots: GPU " + std::to_string(from) +
                                                " has no peer access to GPU " + std::to_string(to) +
                                                ", where a peer thread's slots are");
    return Status::ok();
  }

  // Lets kernels on `from` reach memory on `to` (NVLink or PCIe P2P). Enabling is
  // per context and cannot be undone while another thread's slots may use it, so it is
  // never disabled; a second enable (another thread's, or this pair's again) is no error.
  static Status enablePeerAccess(int from, int to) {
    BRAID_RETURN_IF_ERROR(peerReachable(from, to));
    DeviceScope scope;
    BRAID_RETURN_IF_ERROR(scope.use(from));
    const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return Status::ok();
    }
    return e == cudaSuccess ? Status::ok() : cudaFailure("cudaDeviceEnablePeerAccess", e);
  }

  std::mutex importedMu_;
  std::vector<void*> imported_;  // opened with cudaIpcOpenMemHandle
  std::mutex areasMu_;
  std::map<uintptr_t, Area> areas_;  // cuMem areas, own and imported, by address
  HandleKind handleKind_ = HandleKind::kIpc;  // written once, in probe()
  Status handleKindError_;                    // written once, in probe()
  // Per GPU (the first 64; others always flush): its NIC writes need no flush, as
  // rdmaSupport found. Unknown counts as needing one.
  std::array<std::atomic<bool>, 64> rdmaOrdered_{};
  enum class WaitMode { kKernel, kMemOp, kHost };
  static constexpr int kUnknown = 0, kUsable = 1, kUnusable = 2;
  std::once_flag once_;
  Status why_;
  std::atomic<int> state_{kUnknown};  // what probe() found, for pointerInfo's fast check
  std::atomic<WaitValue32Fn> waitValue32_{nullptr};
  PointerGetAttributeFn pointerAttribute_ = nullptr;  // written once, in probe()
  WaitMode waitMode_ = WaitMode::kMemOp;               // written once, in probe()
  Status waitModeError_;                               // written once, in probe()
};

}  // namespace

Runtime& cudaRuntime() {
  static CudaRuntime* rt = new CudaRuntime();  // never destroyed: used up to process exit
  return *rt;
}

}  // namespace braid::device

#pragma once
// A device::Runtime for tests, on host memory: "device memory" is host memory this runtime
// handed out (so pointerInfo can tell it apart), and a stream is a host thread that runs
// what was enqueued on it in order - copies, markers, flag waits, and "kernels" (closures a
// test enqueues to stand for work before and after a collective). Everything the staging
// queue does goes through the same Runtime calls as with CUDA; only their implementation
// differs.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/fd_share.h"
#include "cuda/host_kernels.h"
#include "device/runtime.h"

namespace braid::device::test {

class FakeStream {
 public:
  // `capacity` > 0: at most that much work waits on the stream, and enqueue() blocks until
  // there is room, as a CUDA stream's queue of work is bounded.
  explicit FakeStream(size_t capacity = 0) : capacity_(capacity), worker_([this] { loop(); }) {}
  ~FakeStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void enqueue(std::function<void()> fn) {
    std::unique_lock<std::mutex> l(mu_);
    if (capacity_ > 0) cv_.wait(l, [&] { return q_.size() < capacity_; });
    q_.push_back(std::move(fn));
    cv_.notify_all();
  }
  // Waits until everything enqueued so far has run.
  void synchronize() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return q_.empty() && !busy_; });
  }
  Stream handle() { return this; }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;
      auto fn = std::move(q_.front());
      q_.pop_front();
      busy_ = true;
      cv_.notify_all();  // room for a blocked enqueue()
      l.unlock();
      fn();
      l.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  const size_t capacity_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;
};

// A gate a test puts on a stream: everything after it waits until open().
class Gate {
 public:
  void closeOn(FakeStream& s) {
    s.enqueue([this] {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return open_; });
    });
  }
  void open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class FakeRuntime final : public Runtime {
 public:
  ~FakeRuntime() override { freeDeferred(); }
  const char* name() const override { return "fake"; }
  Status available() override { return Status::ok(); }

  // Device memory of this runtime (never touched by the host except through streams, in the
  // tests' discipline).
  void* deviceAlloc(size_t bytes) {
    void* p = std::malloc(bytes ? bytes : 1);
    std::lock_guard<std::mutex> l(mu_);
    device_[reinterpret_cast<uintptr_t>(p)] = bytes ? bytes : 1;
    return p;
  }
  // Memory the caller allocated, device memory from now on (an address a host buffer had
  // that the GPU's memory now takes); given back with forgetDevice, not freed here.
  void adoptAsDevice(void* p, size_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    device_[reinterpret_cast<uintptr_t>(p)] = bytes ? bytes : 1;
  }
  void forgetDevice(void* p) {
    std::lock_guard<std::mutex> l(mu_);
    device_.erase(reinterpret_cast<uintptr_t>(p));
  }
  void deviceFree(void* p) {
    {
      std::lock_guard<std::mutex> l(mu_);
      device_.erase(reinterpret_cast<uintptr_t>(p));
    }
    std::free(p);
  }

  PointerInfo pointerInfo(const void* p) override {
    PointerInfo info;
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> l(mu_);
    auto it = device_.upper_bound(a);
    if (it != device_.begin()) {
      --it;
      if (a < it->first + it->second) {
        info.kind = MemoryKind::kDevice;
        info.device = 0;
      }
    }
    return info;
  }

  StatusOr<void*> allocHost(size_t bytes) override {
    hostAllocs.fetch_add(1);
    hostLive.fetch_add(1);
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    std::lock_guard<std::mutex> l(mu_);
    reachable_[reinterpret_cast<uintptr_t>(p)] = rounded;
    return p;
  }
  void freeHost(void* p) override {
    hostLive.fetch_sub(1);
    {
      std::lock_guard<std::mutex> l(mu_);
      reachable_.erase(reinterpret_cast<uintptr_t>(p));
    }
    std::free(p);
  }

  // The direct path: registered host memory is recorded, and a "kernel" is the kernel
  // source run by the CPU executor - after checking that every pointer it is given is memory
  // a GPU would reach (this runtime's device memory, pinned or registered host memory), so a
  // host buffer handed to a kernel by mistake fails the call, as it would fault on a GPU.
  Status directSupport(int) override {
    if (noDirect.load()) return Status(Code::kSystemError, "fake: no direct path, on purpose");
    return Status::ok();
  }
  Status registerHost(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    reachable_[reinterpret_cast<uintptr_t>(p)] = bytes;
    registered.fetch_add(1);
    return Status::ok();
  }
  void unregisterHost(void* p) override {
    std::lock_guard<std::mutex> l(mu_);
    reachable_.erase(reinterpret_cast<uintptr_t>(p));
    registered.fetch_sub(1);
  }
  // Device slots: "device memory" in a shared-memory segment of its own, named by the
  // segment, so that ranks in other processes (or threads) map the same pages as CUDA IPC
  // would give them the same GPU memory. With BRAID_CUDA_MEM_HANDLE=fd, as braid's CUDA
  // runtime exports cuMem allocations: a memory file, whose descriptor the others fetch
  // through common/fd_share.h while it is offered (exportDevice to exportsTaken).
  StatusOr<void*> allocDevice(size_t bytes, int) override {
    if (noDeviceSlots.load()) return Status(Code::kSystemError, "fake: no device slots, on purpose");
    static std::atomic<int> serial{0};
    const char* handles = std::getenv("BRAID_CUDA_MEM_HANDLE");
    const bool byFd = handles && !std::strcmp(handles, "fd");
    const std::string name = "/braid-fake-slots-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
    const int fd = byFd ? ::memfd_create(name.c_str() + 1, MFD_CLOEXEC)
                        : ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return Status(Code::kSystemError, "fake: shm_open " + name);
    void* p = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0
                  ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    if (byFd && p != MAP_FAILED) {
      std::lock_guard<std::mutex> l(mu_);
      memoryFiles_[reinterpret_cast<uintptr_t>(p)] = fd;
    } else {
      ::close(fd);
    }
    if (p == MAP_FAILED) {
      if (!byFd) ::shm_unlink(name.c_str());
      return Status(Code::kSystemError, "fake: mapping " + name);
    }
    slotAreas.fetch_add(1);
    std::lock_guard<std::mutex> l(mu_);
    device_[reinterpret_cast<uintptr_t>(p)] = bytes;
    areas_[reinterpret_cast<uintptr_t>(p)] = bytes;
    areaNames_[reinterpret_cast<uintptr_t>(p)] = byFd ? "" : name;
    return p;
  }
  void freeDevice(void* p) override {
    exportsTaken(p);
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::string name;
    size_t bytes = 0;
    int fd = -1;
    {
      std::lock_guard<std::mutex> l(mu_);
      bytes = areas_[a];
      name = areaNames_[a];
      device_.erase(a);
      areas_.erase(a);
      areaNames_.erase(a);
      if (auto it = memoryFiles_.find(a); it != memoryFiles_.end()) {
        fd = it->second;
        memoryFiles_.erase(it);
      }
    }
    ::munmap(p, bytes);
    if (fd >= 0) ::close(fd);
    if (!name.empty()) ::shm_unlink(name.c_str());
    slotAreas.fetch_sub(1);
  }
  StatusOr<std::string> exportDevice(void* p) override {
    std::lock_guard<std::mutex> l(mu_);
    const auto a = reinterpret_cast<uintptr_t>(p);
    if (auto it = memoryFiles_.find(a); it != memoryFiles_.end()) {
      BRAID_ASSIGN_OR_RETURN(std::string ticket, publishFd(it->second));
      if (withdrawAtOnce.load()) withdrawFd(ticket);
      else tickets_[a] = ticket;
      return "fakefd:" + std::to_string(areas_[a]) + ":" + ticket;
    }
    return "fake:" + std::to_string(areas_[a]) + ":" + areaNames_[a];
  }
  void exportsTaken(void* p) override {
    std::string ticket;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = tickets_.find(reinterpret_cast<uintptr_t>(p));
      if (it == tickets_.end()) return;
      ticket = it->second;
      tickets_.erase(it);
    }
    withdrawFd(ticket);
  }
  StatusOr<void*> importDevice(const std::string& name, int) override {
    const bool byFd = name.compare(0, 7, "fakefd:") == 0;
    const size_t start = byFd ? 7 : 5, colon = name.find(':', start);
    if ((!byFd && name.compare(0, 5, "fake:") != 0) || colon == std::string::npos)
      return Status(Code::kInvalidArgument, "fake: not a fake name: " + name);
    const size_t bytes = std::strtoull(name.c_str() + start, nullptr, 10);
    const std::string seg = name.substr(colon + 1);
    int fd = -1;
    if (byFd) {
      BRAID_ASSIGN_OR_RETURN(fd, fetchFd(seg, 10000));
      fdImports.fetch_add(1);
    } else {
      fd = ::shm_open(seg.c_str(), O_RDWR, 0);
      if (fd < 0) return Status(Code::kSystemError, "fake: shm_open " + seg);
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return Status(Code::kSystemError, "fake: mapping " + seg);
    imports.fetch_add(1);
    std::lock_guard<std::mutex> l(mu_);
    device_[reinterpret_cast<uintptr_t>(p)] = bytes;
    areas_[reinterpret_cast<uintptr_t>(p)] = bytes;
    return p;
  }
  void closeImported(void* p) override {
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      bytes = areas_[reinterpret_cast<uintptr_t>(p)];
      device_.erase(reinterpret_cast<uintptr_t>(p));
      areas_.erase(reinterpret_cast<uintptr_t>(p));
    }
    ::munmap(p, bytes);
    imports.fetch_sub(1);
  }
  // GPUDirect RDMA: this runtime's "device memory" is host memory a NIC registers by address
  // (no dmabuf, as with nvidia-peermem); every flush before a kernel reads a NIC's writes is
  // counted.
  Status rdmaSupport(int) override {
    if (noRdma.load()) return Status(Code::kSystemError, "fake: no GPUDirect RDMA, on purpose");
    return Status::ok();
  }
  StatusOr<Dmabuf> dmabufOf(void*, size_t) override {
    return Status(Code::kSystemError, "fake: host memory has no dmabuf");
  }
  Status flushRemoteWrites(int) override {
    rdmaFlushes.fetch_add(1);
    return Status::ok();
  }
  Status runKernel(const cuda::ReduceCopyArgs& args, cuda::DeviceDataType type, ReduceOp op, int device) override {
    if (device != 0) return Status(Code::kInvalidArgument, "fake: kernel on GPU " + std::to_string(device));
    const size_t bytes = args.count * cuda::deviceDataTypeSize(type);
    for (int i = 0; i < args.nsrcs; ++i)
      if (!reachableByKernel(args.srcs[i], bytes)) return unreachable(args.srcs[i]);
    for (int i = 0; i < args.ndsts; ++i)
      if (!reachableByKernel(args.dsts[i], bytes)) return unreachable(args.dsts[i]);
    kernels.fetch_add(1);
    {
      std::lock_guard<std::mutex> l(mu_);
      bool inArea = false;
      for (int i = 0; i < args.nsrcs; ++i) inArea |= bytes && inside(areas_, args.srcs[i], bytes);
      for (int i = 0; i < args.ndsts; ++i) inArea |= bytes && inside(areas_, args.dsts[i], bytes);
      if (inArea) slotKernels.fetch_add(1);
    }
    // Small blocks: every CUDA thread is a host thread here.
    const cuda::LaunchConfig cfg{2, 32};
    return cuda::sim::runReduceCopy(args, type, op, &cfg);
  }
  StatusOr<Flag> allocFlag() override {
    Flag f;
    f.host = new std::atomic<uint32_t>(0);
    f.deviceAddress = reinterpret_cast<uint64_t>(f.host);
    return f;
  }
  void freeFlag(const Flag& f) override { delete f.host; }

  Status copyAsync(void* dst, const void* src, size_t bytes, Stream s) override {
    if (failCopies.load()) return Status(Code::kSystemError, "fake: copy refused on purpose");
    put(s, [=] {
      if (const int us = copyDelayUs.load()) std::this_thread::sleep_for(std::chrono::microseconds(us));
      std::memcpy(dst, src, bytes);
      copiesDone.fetch_add(1);
    });
    return Status::ok();
  }
  // One operation on the stream, as cudaMemcpy2DAsync is.
  Status copyRowsAsync(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t bytes, size_t rows,
                       Stream s) override {
    if (failCopies.load()) return Status(Code::kSystemError, "fake: copy refused on purpose");
    put(s, [=] {
      if (const int us = copyDelayUs.load()) std::this_thread::sleep_for(std::chrono::microseconds(us));
      for (size_t i = 0; i < rows; ++i)
        std::memcpy(static_cast<char*>(dst) + i * dstPitch, static_cast<const char*>(src) + i * srcPitch, bytes);
      copiesDone.fetch_add(1);
      rowCopiesDone.fetch_add(1);
    });
    return Status::ok();
  }
  StatusOr<void*> mark(Stream s) override {
    if (graphOf(s)) return Status(Code::kInternal, "fake: a marker on a stream being captured");
    auto* m = new std::atomic<bool>(false);
    markersLive.fetch_add(1);
    stream(s).enqueue([m] { m->store(true, std::memory_order_release); });
    return static_cast<void*>(m);
  }
  StatusOr<bool> reached(void* marker) override {
    return static_cast<std::atomic<bool>*>(marker)->load(std::memory_order_acquire);
  }
  void releaseMarker(void* marker) override {
    markersLive.fetch_sub(1);
    delete static_cast<std::atomic<bool>*>(marker);
  }
  Status waitFlag(Stream s, const Flag& f, uint32_t value) override {
    if (graphOf(s)) return Status(Code::kInternal, "fake: a flag wait on a stream being captured");
    stream(s).enqueue([f, value] {
      while (!reachedValue(f.host->load(std::memory_order_acquire), value)) std::this_thread::yield();
    });
    return Status::ok();
  }

  // A stream that answers capturing() but records nothing (a capture this fake cannot
  // take: keepWithCapture fails on it).
  void setCapturing(Stream s, bool on) {
    std::lock_guard<std::mutex> l(mu_);
    if (on) capturing_.insert(s);
    else capturing_.erase(s);
  }
  StatusOr<bool> capturing(Stream s) override {
    std::lock_guard<std::mutex> l(mu_);
    return capturing_.count(s) > 0 || graphs_.count(s) > 0;
  }

  // Graph capture as CUDA does it (cudaStreamBeginCapture ... EndCapture, cudaGraphLaunch):
  // what is put on a capturing stream is recorded, and a launch puts the recording on a
  // stream; objects kept with the graph are destroyed with it.
  struct Graph {
    std::vector<std::function<void()>> ops;
    std::vector<std::pair<void*, void (*)(void*)>> kept;
    ~Graph() {
      for (auto& [obj, destroy] : kept) destroy(obj);
    }
  };
  void beginCapture(Stream s) {
    std::lock_guard<std::mutex> l(mu_);
    graphs_[s] = std::make_shared<Graph>();
  }
  std::shared_ptr<Graph> endCapture(Stream s) {
    std::lock_guard<std::mutex> l(mu_);
    auto g = graphs_[s];
    graphs_.erase(s);
    return g;
  }
  void launch(const std::shared_ptr<Graph>& g, Stream s) {
    for (const auto& op : g->ops) stream(s).enqueue(op);
  }
  Status launchHostFunc(Stream s, void (*fn)(void*), void* arg) override {
    hostFuncs.fetch_add(1);
    put(s, [fn, arg] { fn(arg); });
    return Status::ok();
  }
  Status keepWithCapture(Stream s, void* obj, void (*destroy)(void*)) override {
    std::shared_ptr<Graph> g = graphOf(s);
    if (!g) {
      destroy(obj);
      return Status(Code::kInvalidArgument, "fake: the stream is not being captured into a graph");
    }
    std::lock_guard<std::mutex> l(mu_);
    g->kept.emplace_back(obj, destroy);
    return Status::ok();
  }

  FakeStream& defaultStream() { return default_; }

  std::atomic<bool> failCopies{false};
  std::atomic<bool> noDirect{false};  // directSupport() refuses
  std::atomic<int> registered{0};     // ranges registered now
  std::atomic<int> kernels{0};        // runKernel calls
  std::atomic<bool> noDeviceSlots{false};  // allocDevice() refuses
  std::atomic<int> slotAreas{0};           // device slot areas allocated now
  std::atomic<int> imports{0};             // opened now
  std::atomic<int> fdImports{0};           // opened through a fetched descriptor, ever
  std::atomic<bool> withdrawAtOnce{false};  // BRAID_CUDA_MEM_HANDLE=fd: names a descriptor no longer offered
  std::atomic<int> slotKernels{0};         // kernels that read or wrote a device slot area
  std::atomic<bool> noRdma{false};         // rdmaSupport() refuses
  std::atomic<int> rdmaFlushes{0};         // flushRemoteWrites calls
  std::atomic<int> copyDelayUs{0};  // each copy takes at least this long (a slow link)
  std::atomic<int> copiesDone{0};
  std::atomic<int> hostFuncs{0};  // launchHostFunc calls
  std::atomic<int> rowCopiesDone{0};  // copyRowsAsync calls among them
  std::atomic<int> hostAllocs{0};
  std::atomic<int> hostLive{0};
  std::atomic<int> markersLive{0};

 private:
  FakeStream& stream(Stream s) { return s ? *static_cast<FakeStream*>(s) : default_; }
  std::shared_ptr<Graph> graphOf(Stream s) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = graphs_.find(s);
    return it == graphs_.end() ? nullptr : it->second;
  }
  // Onto the stream, or into the graph it is being captured into.
  void put(Stream s, std::function<void()> op) {
    if (std::shared_ptr<Graph> g = graphOf(s)) {
      std::lock_guard<std::mutex> l(mu_);
      g->ops.push_back(std::move(op));
      return;
    }
    stream(s).enqueue(std::move(op));
  }

  static bool inside(const std::map<uintptr_t, size_t>& m, const void* p, size_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = m.upper_bound(a);
    if (it == m.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
  }
  bool reachableByKernel(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> l(mu_);
    return bytes == 0 || inside(device_, p, bytes) || inside(reachable_, p, bytes);
  }
  static Status unreachable(const void* p) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%p", p);
    return Status(Code::kInternal, std::string("fake: a kernel was given host memory no GPU reaches: ") + buf);
  }

  std::mutex mu_;
  std::map<uintptr_t, size_t> device_;
  std::map<uintptr_t, size_t> reachable_;  // pinned (allocHost) and registered host memory
  std::map<uintptr_t, size_t> areas_;      // device slot areas, made (allocDevice) or mapped (importDevice)
  std::map<uintptr_t, std::string> areaNames_;  // the segments of those made here
  std::map<uintptr_t, int> memoryFiles_;        // BRAID_CUDA_MEM_HANDLE=fd: their memory files
  std::map<uintptr_t, std::string> tickets_;    // and the tickets of those offered now
  std::set<Stream> capturing_;
  std::map<Stream, std::shared_ptr<Graph>> graphs_;
  FakeStream default_;
};

}  // namespace braid::device::test

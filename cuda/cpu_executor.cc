#include "cuda/cpu_executor.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

namespace braid::cuda::sim {

// What the threads of one block share: the __syncthreads() barrier and the BRAID_SHARED
// arena. The barrier counts threads still inside the kernel, so one that returns early
// cannot leave the others waiting forever.
struct BlockState {
  std::mutex mu;
  std::condition_variable cv;
  size_t inside = 0;       // threads that have not returned from the kernel
  size_t arrived = 0;      // threads waiting at the current barrier
  uint64_t phase = 0;      // bumped when a barrier opens
  std::map<const void*, std::unique_ptr<unsigned char[]>> shared;

  void arriveAndWait() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t myPhase = phase;
    if (++arrived >= inside) {
      openLocked();
      return;
    }
    cv.wait(lock, [&] { return phase != myPhase; });
  }

  void leave() {
    std::lock_guard<std::mutex> lock(mu);
    --inside;
    // The leaver may have been the last thread the others were waiting for.
    if (arrived > 0 && arrived >= inside) openLocked();
  }

  void openLocked() {
    arrived = 0;
    ++phase;
    cv.notify_all();
  }
};

namespace {

// The block the calling thread is running, for __syncthreads() and BRAID_SHARED.
thread_local BlockState* tlsBlock = nullptr;

// Filler for fresh shared memory: recognisable in a debugger, and never a value a test
// expects, so a read-before-write in a kernel makes results wrong rather than lucky.
constexpr unsigned char kSharedFill = 0xA5;

}  // namespace

void syncBlock() {
  // Outside an executor (a kernel called as a plain function) there is nothing to wait for.
  if (tlsBlock != nullptr) tlsBlock->arriveAndWait();
}

void* sharedStorage(const void* site, size_t bytes, size_t align) {
  if (tlsBlock == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(tlsBlock->mu);
  auto& slot = tlsBlock->shared[site];
  if (!slot) {
    // new[] of unsigned char is aligned for any fundamental type; over-allocate for more.
    slot.reset(new unsigned char[bytes + align]);
    std::memset(slot.get(), kSharedFill, bytes + align);
  }
  auto p = reinterpret_cast<uintptr_t>(slot.get());
  p = (p + align - 1) / align * align;
  return reinterpret_cast<void*>(p);
}

CpuExecutor::CpuExecutor() = default;

CpuExecutor::~CpuExecutor() {
  stop_.store(true);
  for (auto& w : workers_) {
    // Taking the worker's mutex orders the store before its next look at the predicate, so
    // the wake-up is not lost.
    std::lock_guard<std::mutex> lock(w->mu);
    w->cv.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

CpuExecutor& CpuExecutor::shared() {
  static CpuExecutor* exec = new CpuExecutor();  // never destroyed: no exit-order issues
  return *exec;
}

void CpuExecutor::ensureWorkers(size_t n) {
  while (workers_.size() < n) {
    const size_t index = workers_.size();
    workers_.push_back(std::make_unique<Worker>());
    Worker* w = workers_.back().get();
    w->thread = std::thread([this, w, index] { workerLoop(w, index); });
  }
}

void CpuExecutor::workerLoop(Worker* w, size_t index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(w->mu);
      w->cv.wait(lock, [&] { return stop_.load() || w->generation != seen; });
      if (stop_.load()) return;
      seen = w->generation;
    }
    // The launch fields were written before this worker's mutex was taken to wake it, so
    // they are visible here and stay fixed until the block finishes.
    const dim3 bdim = blockDim_;
    tlsGridDim = gridDim_;
    tlsBlockIdx = blockIdx_;
    tlsBlockDim = bdim;
    // Linear index -> (x, y, z), x fastest, as CUDA numbers threads.
    tlsThreadIdx.x = static_cast<unsigned>(index % bdim.x);
    tlsThreadIdx.y = static_cast<unsigned>(index / bdim.x % bdim.y);
    tlsThreadIdx.z = static_cast<unsigned>(index / (size_t{bdim.x} * bdim.y));
    BlockState* block = block_;
    tlsBlock = block;
    (*body_)();
    tlsBlock = nullptr;
    block->leave();

    std::lock_guard<std::mutex> lock(doneMu_);
    if (--remaining_ == 0) doneCv_.notify_one();
  }
}

Status CpuExecutor::run(dim3 grid, dim3 block, std::function<void()> body) {
  const size_t threads = size_t{block.x} * block.y * block.z;
  const size_t blocks = size_t{grid.x} * grid.y * grid.z;
  if (threads == 0 || blocks == 0) return invalidArgument("cpu executor: empty launch geometry");
  if (threads > kMaxThreadsPerBlock) {
    return invalidArgument("cpu executor: " + std::to_string(threads) +
                           " threads per block, more than " + std::to_string(kMaxThreadsPerBlock));
  }
  std::lock_guard<std::mutex> launchLock(launchMu_);
  ensureWorkers(threads);
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        BlockState b;
        b.inside = threads;
        body_ = &body;
        block_ = &b;
        blockDim_ = block;
        gridDim_ = grid;
        blockIdx_ = uint3{bx, by, bz};
        {
          std::lock_guard<std::mutex> lock(doneMu_);
          remaining_ = threads;
        }
        ++generation_;
        for (size_t i = 0; i < threads; ++i) {
          Worker& w = *workers_[i];
          std::lock_guard<std::mutex> lock(w.mu);
          w.generation = generation_;
          w.cv.notify_one();
        }
        std::unique_lock<std::mutex> lock(doneMu_);
        doneCv_.wait(lock, [&] { return remaining_ == 0; });
      }
    }
  }
  block_ = nullptr;
  body_ = nullptr;
  return Status::ok();
}

}  // namespace braid::cuda::sim

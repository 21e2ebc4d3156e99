#pragma once
// CpuExecutor runs `__global__`-style functions from cuda/ on the host, so the very source
// that nvcc compiles for the GPU is tested on machines without one.
//
// Model: one host thread per CUDA thread of a block. Blocks run one after another; within a
// block all threads run concurrently, see their own threadIdx and the launch's blockIdx,
// blockDim and gridDim, meet at __syncthreads() on a real barrier, and share the block's
// BRAID_SHARED objects (fresh per block, filled with 0xA5 so a read before any write shows).
// The threads live in a pool that persists across launches, so a test can launch
// thousands of small kernels cheaply.
//
// Limits (what the shim does not model, so kernels must not rely on it):
//  - no warp lock-step and no warp-level intrinsics (shuffles, votes, match, __syncwarp):
//    host threads of one "warp" run independently;
//  - no GPU memory model: host threads are ordered only by __syncthreads() (a mutex), and
//    atomics, fences, volatile and weak/relaxed loads behave as the host's, not the GPU's;
//  - blocks never run concurrently, so inter-block communication (a spin on a flag another
//    block sets) deadlocks here, and cooperative launches are not supported;
//  - no dynamic shared memory, streams, events, clusters, or launch bounds; the block size
//    is capped at kMaxThreadsPerBlock (1024, as on the GPU) but each thread is an OS thread,
//    so keep test blocks small (32-128 threads);
//  - a thread that returns from the kernel leaves the block's barrier, so the remaining
//    threads do not deadlock at a later __syncthreads() (CUDA leaves that undefined);
//  - pointers are host pointers; there is no separate device address space to catch a
//    host pointer slipping into device code.
//
// Thread-safety: launch() may be called from any thread; launches on one executor run one
// at a time, each blocking its caller until the grid is done. Different executors run
// concurrently (each has its own pool).

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "cuda/cuda_compat.h"

namespace braid::cuda::sim {

// The state the threads of one running block share (barrier, shared arena); cpu_executor.cc.
struct BlockState;

class CpuExecutor {
 public:
  static constexpr unsigned kMaxThreadsPerBlock = 1024;

  CpuExecutor();
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  // Runs `kernel(args...)` on every thread of a `grid` x `block` launch and returns when all
  // blocks are done. Fails with kInvalidArgument for an empty or oversized geometry (as a
  // CUDA launch would), without running anything. Arguments are copied once and passed to
  // every thread by value, as kernel parameters are.
  template <class... P, class... A>
  Status launch(void (*kernel)(P...), dim3 grid, dim3 block, A&&... args) {
    auto bound = [kernel, tuple = std::make_tuple(static_cast<P>(args)...)]() {
      std::apply(kernel, tuple);
    };
    return run(grid, block, std::function<void()>(std::move(bound)));
  }

  // The process-wide executor the host_kernels.h entry points use.
  static CpuExecutor& shared();

 private:
  // One pool thread. Each has its own wake-up word, so starting a 32-thread block wakes 32
  // threads, not the whole pool.
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t generation = 0;  // the block it was last told to run
    std::thread thread;
  };

  Status run(dim3 grid, dim3 block, std::function<void()> body);
  void ensureWorkers(size_t n);
  void workerLoop(Worker* w, size_t index);

  std::mutex launchMu_;              // one launch at a time
  std::vector<std::unique_ptr<Worker>> workers_;
  // Set once, by the destructor, before it wakes each worker under that worker's mu: atomic,
  // since every worker reads it under a different mutex.
  std::atomic<bool> stop_{false};
  uint64_t generation_ = 0;          // bumped per block

  // The block being run; written before the workers are woken, read-only while they run.
  const std::function<void()>* body_ = nullptr;
  BlockState* block_ = nullptr;
  dim3 blockDim_;
  dim3 gridDim_;
  uint3 blockIdx_;

  std::mutex doneMu_;
  std::condition_variable doneCv_;   // run() waits here until the block's threads are done
  size_t remaining_ = 0;             // guarded by doneMu_
};

}  // namespace braid::cuda::sim

#pragma once
// The direct path for device buffers: instead of staging a call through pinned host memory
// (device_queue.h), the executor runs it on the device buffers themselves, and every byte it
// moves or reduces goes through the reduce-copy kernels (cuda/), which read the local input
// and the incoming slot and write the outgoing slot and the local output in one pass. The
// slots are the shm transport's segments, or across hosts tcp's, UCX's or verbs' staging
// slots, registered with the GPU so that kernels reach them at their host addresses: NCCL's
// shm transport works this way, and its network path without GPUDirect RDMA. Each kernel
// runs on a stream of the calling thread's own and is waited for before the executor posts
// the slot, so a peer reading it sees the whole slice.
//
// Every operation goes through Runtime::runKernel, so the tests run the very kernel source
// on the CPU executor through a host-memory runtime (tests/unit/device).

#include <atomic>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"
#include "device/runtime.h"
#include "exec/executor.h"

namespace braid::device {

class DeviceMover final : public exec::DataMover {
 public:
  explicit DeviceMover(Runtime& rt) : rt_(rt) {}
  ~DeviceMover() override;
  DeviceMover(const DeviceMover&) = delete;
  DeviceMover& operator=(const DeviceMover&) = delete;

  // Registers the memory of the communicator's slots with the runtime (all or none).
  Status registerSlots(const std::vector<std::pair<void*, size_t>>& ranges);
  // The GPU the next runs' kernels use (that of the call's buffers). Set between runs.
  void setDevice(int device) { device_.store(device, std::memory_order_relaxed); }

  Status reduceCopy(void* dst0, void* dst1, const void* a, const void* b, size_t bytes, DataType type,
                    ReduceOp op) override;
  Status divide(void* buf, size_t bytes, DataType type, int divisor) override;
  Status scale(void* dst, const void* src, size_t bytes, DataType type, double scalar) override;
  StatusOr<void*> workspace(int index, size_t bytes) override;
  Status flushRemoteWrites() override { return rt_.flushRemoteWrites(device_.load(std::memory_order_relaxed)); }

 private:
  Status run(const cuda::ReduceCopyArgs& args, DataType type, ReduceOp op);

  Runtime& rt_;
  std::atomic<int> device_{0};
  std::vector<void*> registered_;
  struct Space {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  std::mutex mu_;
  Space space_[2];
};

}  // namespace braid::device

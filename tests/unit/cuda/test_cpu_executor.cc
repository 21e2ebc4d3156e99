// The CPU executor (cuda/cpu_executor.h): geometry and built-ins as CUDA defines them,
// __syncthreads() as a real barrier, BRAID_SHARED as per-block storage, early-returning
// threads, and rejection of launches a GPU would reject.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cuda/cpu_executor.h"
#include "cuda/stream_wait.cuh"
#include "support/catch.h"

namespace sim = braid::cuda::sim;

namespace {

// Each thread records its linear global id; checks every id is seen once and that the
// built-ins are consistent.
__global__ void recordIds(int* seen, int* bad) {
  const unsigned tpb = blockDim.x * blockDim.y * blockDim.z;
  const unsigned local = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x >= blockDim.x || threadIdx.y >= blockDim.y || threadIdx.z >= blockDim.z ||
      blockIdx.x >= gridDim.x || blockIdx.y >= gridDim.y || blockIdx.z >= gridDim.z) {
    __atomic_fetch_add(bad, 1, __ATOMIC_RELAXED);
  }
  __atomic_fetch_add(&seen[block * tpb + local], 1, __ATOMIC_RELAXED);
}

// BRAID_SHARED takes a plain (non-array) type, as `type name` must declare it on both sides.
struct Tile {
  int v[128];
};

// A block-wide reversal through shared memory: wrong unless __syncthreads() separates the
// writes from the reads and all threads of a block see one array.
__global__ void reverseInBlock(const int* in, int* out) {
  BRAID_SHARED(Tile, tile);
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  tile.v[threadIdx.x] = in[i];
  __syncthreads();
  out[i] = tile.v[blockDim.x - 1 - threadIdx.x];
}

// Several barrier rounds of a tree sum in shared memory.
__global__ void blockSum(const int* in, int* out) {
  BRAID_SHARED(Tile, partial);
  partial.v[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial.v[threadIdx.x] += partial.v[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial.v[0];
}

// Half the threads leave before the barrier; the rest must still get through it.
__global__ void earlyExit(int* out) {
  if (threadIdx.x % 2 == 1) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

}  // namespace

TEST_CASE("cpu executor: every thread of 1-, 2- and 3-D launches runs once with CUDA's built-ins", "[cuda]") {
  sim::CpuExecutor exec;
  const dim3 grids[] = {dim3(3), dim3(2, 3), dim3(2, 1, 2)};
  const dim3 blocks[] = {dim3(32), dim3(8, 4), dim3(4, 2, 3)};
  for (int g = 0; g < 3; ++g) {
    const size_t n = size_t{grids[g].x} * grids[g].y * grids[g].z * blocks[g].x * blocks[g].y * blocks[g].z;
    std::vector<int> seen(n, 0);
    int bad = 0;
    REQUIRE(exec.launch(recordIds, grids[g], blocks[g], seen.data(), &bad).isOk());
    CHECK(bad == 0);
    for (size_t i = 0; i < n; ++i) REQUIRE(seen[i] == 1);
  }
}

TEST_CASE("cpu executor: __syncthreads and BRAID_SHARED give per-block shared memory", "[cuda]") {
  sim::CpuExecutor exec;
  const unsigned kBlock = 64, kGrid = 3;
  std::vector<int> in(kBlock * kGrid), out(kBlock * kGrid, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 7 + 1);
  REQUIRE(exec.launch(reverseInBlock, dim3(kGrid), dim3(kBlock), static_cast<const int*>(in.data()), out.data())
              .isOk());
  for (unsigned b = 0; b < kGrid; ++b) {
    for (unsigned t = 0; t < kBlock; ++t) REQUIRE(out[b * kBlock + t] == in[b * kBlock + kBlock - 1 - t]);
  }
  std::vector<int> sums(kGrid, 0);
  for (int round = 0; round < 20; ++round) {  // repeated launches reuse the thread pool
    REQUIRE(exec.launch(blockSum, dim3(kGrid), dim3(kBlock), static_cast<const int*>(in.data()), sums.data())
                .isOk());
    for (unsigned b = 0; b < kGrid; ++b) {
      int want = 0;
      for (unsigned t = 0; t < kBlock; ++t) want += in[b * kBlock + t];
      REQUIRE(sums[b] == want);
    }
  }
}

TEST_CASE("cpu executor: threads that return early leave the barrier", "[cuda]") {
  sim::CpuExecutor exec;
  std::vector<int> out(32, 0);
  REQUIRE(exec.launch(earlyExit, dim3(2), dim3(32), out.data()).isOk());
  for (int t = 0; t < 32; ++t) CHECK(out[t] == (t % 2 == 0 ? 1 : 0));
}

TEST_CASE("cpu executor: rejects empty and oversized launches", "[cuda]") {
  sim::CpuExecutor exec;
  int bad = 0;
  std::vector<int> seen(2048, 0);
  CHECK(exec.launch(recordIds, dim3(0), dim3(32), seen.data(), &bad).code() == braid::Code::kInvalidArgument);
  CHECK(exec.launch(recordIds, dim3(1), dim3(0), seen.data(), &bad).code() == braid::Code::kInvalidArgument);
  CHECK(exec.launch(recordIds, dim3(1), dim3(2048), seen.data(), &bad).code() == braid::Code::kInvalidArgument);
  for (int s : seen) REQUIRE(s == 0);
}

// The staged device path's stream-wait kernel (cuda/stream_wait.cuh), its own source run by
// the executor: it returns only once the flag has reached the value, compared cyclically
// across the 32-bit wrap, and at once when the flag is already there.
TEST_CASE("stream-wait kernel: holds until the flag reaches the value, across the 32-bit wrap", "[cuda]") {
  namespace k = braid::cuda::host_build;
  sim::CpuExecutor exec;
  for (uint32_t start : {0u, 0xFFFFFFF0u}) {
    alignas(4) uint32_t flag = start;
    const uint32_t value = start + 0x20u;  // wraps past zero for the second start
    std::atomic<bool> returned{false};
    bool launched = false;
    // No assertion on this thread: the test's assertions share a lock, which one held
    // across the launch would keep the main thread from releasing the kernel.
    std::thread waiter([&] {
      launched = exec.launch(k::waitFlagKernel, dim3(1), dim3(32), static_cast<const uint32_t*>(&flag), value).isOk();
      returned = true;
    });
    // Below the value (start + 0x1F compares as behind it), the kernel keeps waiting.
    __atomic_store_n(&flag, start + 0x1Fu, __ATOMIC_RELEASE);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    CHECK_FALSE(returned.load());
    __atomic_store_n(&flag, value + 5u, __ATOMIC_RELEASE);  // past it counts as reached
    waiter.join();
    CHECK(launched);
    CHECK(returned.load());
    // Already reached: returns without waiting.
    REQUIRE(exec.launch(k::waitFlagKernel, dim3(1), dim3(32), static_cast<const uint32_t*>(&flag), value).isOk());
  }
}

// The reduce-copy kernels on a real GPU (braid_cuda_kernels), compared element by element
// with the same kernel source run by the CPU executor (braid_cuda_host). Every type and op
// over odd sizes, misaligned pointers, several source counts and both destination counts,
// plus launches large enough for a multi-block grid.
//
// When no GPU is visible (cudaGetDeviceCount fails or returns 0) main() prints why and
// exits 77, which CTest (SKIP_RETURN_CODE) reports as skipped rather than passed.
//
// NaNs compare by NaN-ness only: GPU arithmetic returns a canonical NaN where x86 keeps an
// operand's payload.

#define CATCH_CONFIG_RUNNER

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/device_launch.h"
#include "cuda/host_kernels.h"
#include "cuda/stream_wait.h"
#include "support/catch.h"
#include "unit/cuda/cuda_test_util.h"

namespace bc = braid::cuda;
using bc::DeviceDataType;
using braid::ReduceOp;
using namespace braid::cuda::test;

namespace {

#define CUDA_REQUIRE(call)                                                             \
  do {                                                                                 \
    const cudaError_t e_ = (call);                                                     \
    INFO(#call << ": " << cudaGetErrorString(e_));                                     \
    REQUIRE(e_ == cudaSuccess);                                                        \
  } while (0)

struct OpCase {
  ReduceOp op;
  bool preMul;
  double scalar;
  int divisor;
};

// Every byte of a launch's buffers in one allocation, each buffer in its own 256-byte-aligned
// region of `stride` bytes at its requested offset.
size_t regionStride(DeviceDataType t, size_t count) { return (count * bc::deviceDataTypeSize(t) + 64 + 255) / 256 * 256; }

// Runs the launch whose sources are already in `host` on the device and under the CPU
// executor and compares every destination element.
void compareLaunch(DeviceDataType t, const OpCase& oc, size_t count, int nsrcs, int ndsts, const size_t* offsets,
                   std::vector<unsigned char>& host) {
  const size_t es = bc::deviceDataTypeSize(t);
  const size_t stride = regionStride(t, count);
  const int nbuf = nsrcs + ndsts;

  unsigned char* dev = nullptr;
  CUDA_REQUIRE(cudaMalloc(&dev, host.size()));
  CUDA_REQUIRE(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));

  bc::ReduceCopyArgs da, ha;
  da.nsrcs = ha.nsrcs = nsrcs;
  da.ndsts = ha.ndsts = ndsts;
  da.count = ha.count = count;
  da.preMul = ha.preMul = oc.preMul;
  da.preMulScalar = ha.preMulScalar = oc.scalar;
  da.divisor = ha.divisor = oc.divisor;
  for (int b = 0; b < nbuf; ++b) {
    unsigned char* d = dev + b * stride + offsets[b];
    unsigned char* h = host.data() + b * stride + offsets[b];
    if (b < nsrcs) {
      da.srcs[b] = d;
      ha.srcs[b] = h;
    } else {
      da.dsts[b - nsrcs] = d;
      ha.dsts[b - nsrcs] = h;
    }
  }
  REQUIRE(bc::launchReduceCopy(da, t, oc.op, nullptr).isOk());
  CUDA_REQUIRE(cudaDeviceSynchronize());
  std::vector<unsigned char> got(host.size());
  CUDA_REQUIRE(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost));
  CUDA_REQUIRE(cudaFree(dev));

  REQUIRE(bc::sim::runReduceCopy(ha, t, oc.op).isOk());
  for (int d = 0; d < ndsts; ++d) {
    const size_t at = (nsrcs + d) * stride + offsets[nsrcs + d];
    const long bad = firstMismatch(got.data() + at, host.data() + at, count, t);
    INFO(bc::deviceDataTypeName(t) << " op " << static_cast<int>(oc.op) << " premul " << oc.preMul << " divisor "
                                   << oc.divisor << " count " << count << " nsrcs " << nsrcs << " dst " << d);
    if (bad >= 0) {
      FAIL("element " << bad << ": gpu " << hexElem(got.data() + at + bad * es, es) << ", cpu executor "
                      << hexElem(host.data() + at + bad * es, es));
    }
  }
  // Nothing outside the destinations changed on the device (sources included).
  for (int b = 0; b < nbuf; ++b) {
    if (b >= nsrcs) continue;
    REQUIRE(std::memcmp(got.data() + b * stride, host.data() + b * stride, stride) == 0);
  }
}

// One launch with random sources.
void runOne(DeviceDataType t, const OpCase& oc, size_t count, int nsrcs, int ndsts, const size_t* offsets,
            std::mt19937_64& rng) {
  const size_t stride = regionStride(t, count);
  std::vector<unsigned char> host(stride * (nsrcs + ndsts), 0);
  for (int s = 0; s < nsrcs; ++s) fillRandom(host.data() + s * stride + offsets[s], count, t, rng);
  compareLaunch(t, oc, count, nsrcs, ndsts, offsets, host);
}

}  // namespace

TEST_CASE("gpu reduce-copy matches the CPU executor for every type and op", "[gpu]") {
  const OpCase arithmetic[] = {{ReduceOp::kSum, false, 1, 1},  {ReduceOp::kProd, false, 1, 1},
                               {ReduceOp::kMax, false, 1, 1},  {ReduceOp::kMin, false, 1, 1},
                               {ReduceOp::kAvg, false, 1, 4},  {ReduceOp::kSum, true, 0.37, 1},
                               {ReduceOp::kSum, true, -2.9, 1}};
  const OpCase bitwise[] = {{ReduceOp::kBand, false, 1, 1}, {ReduceOp::kBor, false, 1, 1}, {ReduceOp::kBxor, false, 1, 1}};
  const size_t sizes[] = {0, 1, 7, 15, 16, 17, 1003, 65536 + 5};
  const size_t layouts[][bc::kMaxSources + bc::kMaxDestinations] = {
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, {0, 8, 16, 24, 32, 40, 48, 56, 8, 24},
      {1, 3, 5, 7, 2, 6, 9, 11, 5, 13}};
  const int shapes[][2] = {{1, 1}, {2, 1}, {2, 2}, {3, 2}, {8, 1}};
  std::mt19937_64 rng(42);
  for (DeviceDataType t : allDeviceTypes()) {
    for (const auto& ops : {std::vector<OpCase>(std::begin(arithmetic), std::end(arithmetic)),
                            std::vector<OpCase>(std::begin(bitwise), std::end(bitwise))}) {
      for (const OpCase& oc : ops) {
        for (size_t count : sizes) {
          for (const auto& lay : layouts) {
            for (const auto& sh : shapes) {
              // The shim is slow for big counts; keep those to one layout and shape.
              if (count > 10000 && (&lay != &layouts[1] || sh[0] != 3)) continue;
              // The layout lists source offsets first, then destination offsets.
              size_t offsets[bc::kMaxSources + bc::kMaxDestinations];
              for (int s = 0; s < sh[0]; ++s) offsets[s] = lay[s];
              for (int d = 0; d < sh[1]; ++d) offsets[sh[0] + d] = lay[bc::kMaxSources + d];
              runOne(t, oc, count, sh[0], sh[1], offsets, rng);
            }
          }
        }
      }
    }
  }
}

// The device converts fp16 (and fp8 from sm_89 on) with the hardware, the CPU executor with
// braid's integer code: every code through a widen and narrow (a pre-multiply by 1), through
// an inexact scaling, and in sums - every pair of codes for fp8, each fp16 code with four
// rotations of the code space - must give the same bits (NaNs: NaN on both sides).
TEST_CASE("gpu fp16 and fp8 conversions match the CPU executor for every code", "[gpu]") {
  const size_t count = 65536;
  const size_t offsets[3] = {0, 0, 0};
  for (DeviceDataType t : {DeviceDataType::kFloat16, DeviceDataType::kFloat8E4M3, DeviceDataType::kFloat8E5M2}) {
    const size_t es = bc::deviceDataTypeSize(t);
    const size_t stride = regionStride(t, count);
    const size_t rotations = es == 2 ? 4 : 1;
    for (size_t r = 0; r < rotations; ++r) {
      const uint32_t shift[] = {1, 0x1235, 0x7bff, 0x8001};
      std::vector<unsigned char> host(stride * 3, 0);
      for (size_t i = 0; i < count; ++i) {
        if (es == 2) {
          const uint16_t a = static_cast<uint16_t>(i), b = static_cast<uint16_t>(i + shift[r]);
          std::memcpy(host.data() + i * 2, &a, 2);
          std::memcpy(host.data() + stride + i * 2, &b, 2);
        } else {
          host[i] = static_cast<unsigned char>(i);            // every pair of codes:
          host[stride + i] = static_cast<unsigned char>(i >> 8);  // (i mod 256, i / 256)
        }
      }
      INFO(bc::deviceDataTypeName(t) << " rotation " << r);
      for (const OpCase& oc : {OpCase{ReduceOp::kSum, true, 1.0, 1}, OpCase{ReduceOp::kSum, true, 0.37, 1},
                               OpCase{ReduceOp::kAvg, false, 1, 3}}) {
        std::vector<unsigned char> one = host;
        compareLaunch(t, oc, count, 1, 1, offsets, one);
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
        std::vector<unsigned char> two = host;
        compareLaunch(t, OpCase{op, false, 1, 1}, count, 2, 1, offsets, two);
      }
    }
  }
}

TEST_CASE("gpu copy matches for large multi-block sizes", "[gpu]") {
  const size_t bytes = (size_t{64} << 20) + 3;
  std::vector<unsigned char> h(bytes);
  for (size_t i = 0; i < bytes; ++i) h[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  unsigned char *src = nullptr, *dst = nullptr;
  CUDA_REQUIRE(cudaMalloc(&src, bytes + 16));
  CUDA_REQUIRE(cudaMalloc(&dst, bytes + 16));
  CUDA_REQUIRE(cudaMemcpy(src + 1, h.data(), bytes, cudaMemcpyHostToDevice));
  REQUIRE(bc::launchCopy(dst + 1, nullptr, src + 1, bytes, nullptr).isOk());
  CUDA_REQUIRE(cudaDeviceSynchronize());
  std::vector<unsigned char> got(bytes);
  CUDA_REQUIRE(cudaMemcpy(got.data(), dst + 1, bytes, cudaMemcpyDeviceToHost));
  REQUIRE(std::memcmp(got.data(), h.data(), bytes) == 0);
  CUDA_REQUIRE(cudaFree(src));
  CUDA_REQUIRE(cudaFree(dst));
}

TEST_CASE("gpu stream-wait kernel holds the stream until the host sets the mapped flag", "[gpu]") {
  uint32_t* flag = nullptr;
  CUDA_REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(uint32_t), cudaHostAllocMapped));
  void* deviceFlag = nullptr;
  CUDA_REQUIRE(cudaHostGetDevicePointer(&deviceFlag, flag, 0));
  int* out = nullptr;
  CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(int)));
  CUDA_REQUIRE(cudaMemset(out, 0, sizeof(int)));
  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (uint32_t start : {0u, 0xFFFFFFF8u}) {  // the second crosses the 32-bit wrap
    __atomic_store_n(flag, start, __ATOMIC_RELEASE);
    const uint32_t value = start + 16u;
    REQUIRE(bc::launchWaitFlag(deviceFlag, value, stream).isOk());
    CUDA_REQUIRE(cudaMemsetAsync(out, static_cast<int>(start & 0xFF), sizeof(int), stream));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);  // still waiting: flag behind the value
    __atomic_store_n(flag, value, __ATOMIC_RELEASE);
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_REQUIRE(cudaStreamSynchronize(stream));
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("stream-wait kernel: stream done %.1f us after the flag was set\n", us);
    int got = -1;
    CUDA_REQUIRE(cudaMemcpy(&got, out, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(got == static_cast<int>((start & 0xFF) * 0x01010101u));
  }
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  CUDA_REQUIRE(cudaFree(out));
  CUDA_REQUIRE(cudaFreeHost(flag));
}

int main(int argc, char** argv) {
  const braid::StatusOr<int> n = bc::visibleDeviceCount();
  if (!n.isOk() || n.value() == 0) {
    std::printf("SKIPPED: no usable GPU (%s)\n",
                n.isOk() ? "cudaGetDeviceCount returned 0 devices" : n.status().message().c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}

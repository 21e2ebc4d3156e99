// kernel_perf: the reduce-copy kernels alone on one GPU, against the same GPU's
// device-to-device copy (cudaMemcpyAsync) measured in the same run.
//
//   kernel_perf [-b 1M] [-e 256M] [-f 2] [-d float] [-o sum] [-n 20] [-w 5] [-g 0] [-t 0] [-B 0]
//
// -t and -B fix the threads per block and the blocks of every kernel launch (0: braid's own
// choice, chooseLaunchConfig), for comparing launch geometries in one run.
// For each size (bytes per buffer) it times, on one stream with CUDA events:
//   memcpy   cudaMemcpyAsync device to device       bytes read + written = 2 x size
//   copy     braid's copy kernel, 1 -> 1            2 x size
//   reduce   2 sources -> 1 destination (op)        3 x size
//   fused    2 sources -> 2 destinations            4 x size (recvReduceCopySend's shape)
// and prints GB/s (1e9 bytes/s) of bytes moved, and each kernel's ratio to memcpy. The
// issue's target for the GPU path: reduce >= 0.85 x memcpy at 256 MiB. Every kernel's result
// is checked once per size (inputs 1 and 2, so a sum is 3 in every type). Exits 77 with the
// reason when no GPU is usable, so a CTest run reports it as skipped.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/device_launch.h"
#include "cuda/reduce_copy.h"

namespace bc = braid::cuda;
using bc::DeviceDataType;
using braid::ReduceOp;

namespace {

constexpr int kExitSkip = 77;

[[noreturn]] void die(const std::string& what, int code = 1) {
  std::fprintf(stderr, "kernel_perf: %s\n", what.c_str());
  std::exit(code);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

void check(const braid::Status& s, const char* what) {
  if (!s.isOk()) die(std::string(what) + ": " + s.message());
}

size_t parseSize(const char* s, const char* flag) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) die(std::string(flag) + " '" + s + "' is not a size such as 1M", 2);
  switch (*end) {
    case 'K': case 'k': v *= 1024; ++end; break;
    case 'M': case 'm': v *= 1024 * 1024; ++end; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end) die(std::string(flag) + " '" + s + "' is not a size such as 1M", 2);
  return static_cast<size_t>(v);
}

struct TypeName {
  const char* name;
  DeviceDataType t;
};
constexpr TypeName kTypes[] = {
    {"float", DeviceDataType::kFloat32},   {"half", DeviceDataType::kFloat16},   {"bfloat16", DeviceDataType::kBFloat16},
    {"double", DeviceDataType::kFloat64},  {"int32", DeviceDataType::kInt32},    {"int8", DeviceDataType::kInt8},
    {"int16", DeviceDataType::kInt16},
    {"f8e4m3", DeviceDataType::kFloat8E4M3}, {"f8e5m2", DeviceDataType::kFloat8E5M2},
};

struct OpName {
  const char* name;
  ReduceOp op;
};
constexpr OpName kOps[] = {{"sum", ReduceOp::kSum}, {"prod", ReduceOp::kProd}, {"max", ReduceOp::kMax},
                           {"min", ReduceOp::kMin}};

// `count` elements of value v (1 or 2) in type t, as host bytes.
std::vector<unsigned char> filled(DeviceDataType t, size_t count, int v) {
  const size_t es = bc::deviceDataTypeSize(t);
  std::vector<unsigned char> out(count * es);
  unsigned char one[8] = {};
  switch (t) {
    case DeviceDataType::kFloat32: { const float f = static_cast<float>(v); std::memcpy(one, &f, 4); break; }
    case DeviceDataType::kFloat64: { const double d = v; std::memcpy(one, &d, 8); break; }
    case DeviceDataType::kFloat16: { const uint16_t h = v == 1 ? 0x3c00 : v == 2 ? 0x4000 : 0x4200; std::memcpy(one, &h, 2); break; }
    case DeviceDataType::kBFloat16: { const uint16_t b = v == 1 ? 0x3f80 : v == 2 ? 0x4000 : 0x4040; std::memcpy(one, &b, 2); break; }
    case DeviceDataType::kFloat8E4M3: one[0] = v == 1 ? 0x38 : v == 2 ? 0x40 : 0x44; break;
    case DeviceDataType::kFloat8E5M2: one[0] = v == 1 ? 0x3c : v == 2 ? 0x40 : 0x42; break;
    default: { const int64_t i = v; std::memcpy(one, &i, es); break; }
  }
  for (size_t i = 0; i < count; ++i) std::memcpy(out.data() + i * es, one, es);
  return out;
}

// Whether the first and last elements of device buffer `p` hold `want` (host bytes of one).
bool holds(const void* p, size_t count, const std::vector<unsigned char>& want, size_t es) {
  if (count == 0) return true;
  std::vector<unsigned char> got(es);
  for (size_t i : {size_t{0}, count - 1}) {
    check(cudaMemcpy(got.data(), static_cast<const unsigned char*>(p) + i * es, es, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (std::memcmp(got.data(), want.data(), es) != 0) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = 1 << 20, maxBytes = 256u << 20, factor = 2;
  int iters = 20, warmup = 5, gpu = 0;
  long threads = 0, blocks = 0;
  DeviceDataType type = DeviceDataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: kernel_perf [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-d float|half|bfloat16|double|int32|int16|int8|"
                  "f8e4m3|f8e5m2] [-o sum|prod|max|min] [-n ITERS] [-w WARMUP] [-g GPU] [-t THREADS_PER_BLOCK] [-B BLOCKS]\n");
      return 0;
    }
    if (i + 1 >= argc) die("option " + a + " needs a value (see -h)", 2);
    const char* v = argv[++i];
    if (a == "-b") minBytes = parseSize(v, "-b");
    else if (a == "-e") maxBytes = parseSize(v, "-e");
    else if (a == "-f") factor = static_cast<size_t>(std::atoi(v));
    else if (a == "-n") iters = std::atoi(v);
    else if (a == "-w") warmup = std::atoi(v);
    else if (a == "-g") gpu = std::atoi(v);
    else if (a == "-t") threads = std::atol(v);
    else if (a == "-B") blocks = std::atol(v);
    else if (a == "-d") {
      bool found = false;
      for (const TypeName& t : kTypes) found = found || (std::strcmp(v, t.name) == 0 && ((type = t.t), true));
      if (!found) die(std::string("-d '") + v + "' is not a type (see -h)", 2);
    } else if (a == "-o") {
      bool found = false;
      for (const OpName& o : kOps) found = found || (std::strcmp(v, o.name) == 0 && ((op = o.op), true));
      if (!found) die(std::string("-o '") + v + "' is not sum, prod, max or min", 2);
    } else {
      die("unknown option " + a + " (see -h)", 2);
    }
  }
  if (factor < 2 || iters < 1 || warmup < 0 || minBytes == 0 || maxBytes < minBytes)
    die("need -f >= 2, -n >= 1, -w >= 0 and 0 < -b <= -e", 2);
  // 512: braid launches no kernel with larger blocks, and fp16's and bf16's are built for
  // at most that many threads (cuda/reduce_copy.cuh, kTwoBlocksPerSm).
  if ((threads == 0) != (blocks == 0) || threads < 0 || threads > 512 || threads % 32 != 0 || blocks < 0 ||
      blocks > 65535)
    die("-t and -B go together: whole warps up to 512 threads per block, 1 to 65535 blocks", 2);

  auto count = bc::visibleDeviceCount();
  if (!count.isOk()) die("no usable GPU: " + count.status().message(), kExitSkip);
  if (count.value() == 0) die("no usable GPU: no device is visible", kExitSkip);
  if (gpu < 0 || gpu >= count.value()) die("-g " + std::to_string(gpu) + " is not one of the " +
                                           std::to_string(count.value()) + " visible GPUs", 2);
  check(cudaSetDevice(gpu), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
  const size_t es = bc::deviceDataTypeSize(type);
  std::printf("# kernel_perf on GPU %d: %s (sm_%d%d, %d SMs); type %s, op %s; GB/s of bytes read + written\n", gpu,
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, bc::deviceDataTypeName(type),
              op == ReduceOp::kSum ? "sum" : op == ReduceOp::kProd ? "prod" : op == ReduceOp::kMax ? "max" : "min");
  if (threads > 0) std::printf("# every kernel launched with %ld blocks of %ld threads\n", blocks, threads);
  std::printf("# %12s %10s %10s %10s %10s %8s %8s %8s  %s\n", "size(B)", "memcpy", "copy", "reduce", "fused",
              "copy/mc", "red/mc", "fus/mc", "check");

  void* a = nullptr; void* b = nullptr; void* c = nullptr; void* d = nullptr;
  check(cudaMalloc(&a, maxBytes), "cudaMalloc");
  check(cudaMalloc(&b, maxBytes), "cudaMalloc");
  check(cudaMalloc(&c, maxBytes), "cudaMalloc");
  check(cudaMalloc(&d, maxBytes), "cudaMalloc");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");

  // GB/s of `moved` bytes per run of `fn`, timed over `iters` runs after `warmup`.
  auto timeIt = [&](size_t moved, auto&& fn) {
    for (int i = 0; i < warmup; ++i) fn();
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) fn();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return static_cast<double>(moved) * iters / (ms * 1e-3) / 1e9;
  };

  bc::LaunchConfig fixed;
  fixed.grid = static_cast<unsigned>(blocks);
  fixed.block = static_cast<unsigned>(threads);
  const bc::LaunchConfig* cfg = threads > 0 ? &fixed : nullptr;

  bool allOk = true;
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    const size_t n = bytes / es;
    const size_t used = n * es;
    const auto ones = filled(type, n, 1), twos = filled(type, n, 2);
    check(cudaMemcpy(a, ones.data(), used, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(b, twos.data(), used, cudaMemcpyHostToDevice), "cudaMemcpy");
    // A copy from pageable memory may return before its DMA is done, and `stream` does not
    // wait for the legacy stream.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    const double memcpyBw = timeIt(2 * used, [&] {
      check(cudaMemcpyAsync(c, a, used, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    });
    const double copyBw = timeIt(2 * used, [&] { check(bc::launchCopy(c, nullptr, a, used, stream, cfg), "launchCopy"); });
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    bool ok = holds(c, n, filled(type, 1, 1), es);

    bc::ReduceCopyArgs ra;
    ra.srcs[0] = a;
    ra.srcs[1] = b;
    ra.nsrcs = 2;
    ra.dsts[0] = c;
    ra.ndsts = 1;
    ra.count = n;
    const double reduceBw = timeIt(3 * used, [&] { check(bc::launchReduceCopy(ra, type, op, stream, cfg), "launchReduceCopy"); });
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    // 1 op 2: sum 3, prod 2, max 2, min 1.
    const int want = op == ReduceOp::kSum ? 3 : op == ReduceOp::kMin ? 1 : 2;
    ok = ok && holds(c, n, filled(type, 1, want), es);

    ra.dsts[1] = d;
    ra.ndsts = 2;
    const double fusedBw = timeIt(4 * used, [&] { check(bc::launchReduceCopy(ra, type, op, stream, cfg), "launchReduceCopy"); });
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    ok = ok && holds(c, n, filled(type, 1, want), es) && holds(d, n, filled(type, 1, want), es);
    allOk = allOk && ok;

    std::printf("  %12zu %10.1f %10.1f %10.1f %10.1f %8.2f %8.2f %8.2f  %s\n", used, memcpyBw, copyBw, reduceBw,
                fusedBw, copyBw / memcpyBw, reduceBw / memcpyBw, fusedBw / memcpyBw, ok ? "ok" : "WRONG");
    if (bytes > maxBytes / factor) break;
  }
  std::printf("# target: reduce/memcpy >= 0.85 at 256 MiB\n");
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(d);
  return allOk ? 0 : 1;
}

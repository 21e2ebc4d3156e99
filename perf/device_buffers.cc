#include "device_buffers.h"

#ifdef BRAID_PERF_CUDA
#include <cuda_runtime_api.h>
#endif

namespace braid::perf::device {

#ifdef BRAID_PERF_CUDA

namespace {
thread_local cudaError_t gLast = cudaSuccess;  // each rank's own (-t: ranks are threads)
bool okay(cudaError_t e) {
  if (e != cudaSuccess) gLast = e;
  return e == cudaSuccess;
}
}  // namespace

std::string init(int localRank, int* gpu) {
  int n = 0;
  if (!okay(cudaGetDeviceCount(&n))) return "no usable GPU: " + lastError();
  if (n == 0) return "no GPU is visible (CUDA_VISIBLE_DEVICES?)";
  *gpu = (localRank < 0 ? 0 : localRank) % n;
  if (!okay(cudaSetDevice(*gpu))) return "cudaSetDevice(" + std::to_string(*gpu) + "): " + lastError();
  return "";
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  return okay(cudaMalloc(&p, bytes ? bytes : 1)) ? p : nullptr;
}
void release(void* p) {
  if (p) cudaFree(p);
}
namespace {
bool copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, void* stream) {
  if (bytes == 0) return true;
  if (!stream) return okay(cudaMemcpy(dst, src, bytes, kind));
  auto s = static_cast<cudaStream_t>(stream);
  return okay(cudaMemcpyAsync(dst, src, bytes, kind, s)) && okay(cudaStreamSynchronize(s));
}
}  // namespace
bool toDevice(void* dst, const void* src, size_t bytes, void* stream) {
  return copy(dst, src, bytes, cudaMemcpyHostToDevice, stream);
}
bool toHost(void* dst, const void* src, size_t bytes, void* stream) {
  return copy(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
}
bool synchronize(void* stream) {
  return okay(stream ? cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) : cudaDeviceSynchronize());
}
std::string lastError() { return std::string(cudaGetErrorName(gLast)) + " (" + cudaGetErrorString(gLast) + ")"; }

void* createStream() {
  cudaStream_t s = nullptr;
  return okay(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) ? s : nullptr;
}
void destroyStream(void* stream) {
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}
void* capture(void* stream, const std::function<bool()>& body) {
  auto s = static_cast<cudaStream_t>(stream);
  // Thread-local: what other threads (braid's own) do meanwhile cannot invalidate it.
  if (!okay(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal))) return nullptr;
  const bool good = body();
  cudaGraph_t graph = nullptr;
  if (!okay(cudaStreamEndCapture(s, &graph)) || !good) {
    if (graph) cudaGraphDestroy(graph);
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const bool made = okay(cudaGraphInstantiate(&exec, graph, 0));
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  return made ? exec : nullptr;
}
bool launch(void* graph, void* stream) {
  return okay(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream)));
}
void destroyGraph(void* graph) {
  if (graph) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
}

#else

std::string init(int, int*) { return "this build has no CUDA toolkit (no nvcc at configure)"; }
void* alloc(size_t) { return nullptr; }
void release(void*) {}
bool toDevice(void*, const void*, size_t, void*) { return false; }
bool toHost(void*, const void*, size_t, void*) { return false; }
bool synchronize(void*) { return false; }
std::string lastError() { return "no CUDA"; }
void* createStream() { return nullptr; }
void destroyStream(void*) {}
void* capture(void*, const std::function<bool()>&) { return nullptr; }
bool launch(void*, void*) { return false; }
void destroyGraph(void*) {}

#endif

}  // namespace braid::perf::device

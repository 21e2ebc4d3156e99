#pragma once
// Device buffers for the perf tools' -D 1 (nccl-tests' one GPU per rank): the tools fill and
// check host buffers as always and mirror them to and from GPU memory around each operation;
// the timed calls get the device pointers (and so run on CUDA's legacy default stream, or
// with -G on a stream of the tool's own, captured into a graph; the device is synchronized
// before the clock stops). Built with the CUDA runtime when the toolkit was
// found; otherwise -D 1 fails with that reason.

#include <cstddef>
#include <functional>
#include <string>

namespace braid::perf::device {

// Selects GPU (local rank % visible GPUs) for the calling thread; "" on success, else why not.
// `gpu` gets its index.
std::string init(int localRank, int* gpu);
void* alloc(size_t bytes);  // nullptr on failure
void release(void* p);
// Copies that have finished when they return. With a stream (-t > 1: the rank's own) they
// run on it, in order with the calls queued there; without one, on the legacy default stream.
bool toDevice(void* dst, const void* src, size_t bytes, void* stream);
bool toHost(void* dst, const void* src, size_t bytes, void* stream);
// Waits for everything queued on `stream`, or with nullptr on the whole device.
bool synchronize(void* stream);
// -G: a stream of the tool's own (the legacy default stream cannot be captured), and the
// calls `body` enqueues on it captured into an executable graph (nullptr on failure), which
// launch() runs on it.
void* createStream();
void destroyStream(void* stream);
void* capture(void* stream, const std::function<bool()>& body);
bool launch(void* graph, void* stream);
void destroyGraph(void* graph);
// The last CUDA error, for messages.
std::string lastError();

}  // namespace braid::perf::device

// The C API's device path: buffers the runtime calls device memory (or a stream) go through
// the staging queue and return at once; bad mixes are clear errors; without a GPU a stream
// is refused with the reason. Ranks are threads on the loopback transport.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.h"
#include "braid/braid.hpp"
#include "common/fd_share.h"
#include "device/runtime.h"
#include "device_checks.h"
#include "fake_runtime.h"
#include "support/catch.h"

using braid::device::test::FakeRuntime;
using braid::device::test::FakeStream;
using braid::device::test::Gate;

namespace {

template <typename F>
void onRanks(int n, F body, const char* transport = "loopback") {
  setenv("BRAID_TRANSPORT", transport, 1);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      braidComm_t comm = nullptr;
      if (braidCommInitRank(&comm, n, id, r) != braidSuccess) return;
      body(comm, r);
      braidCommDestroy(comm);
    });
  }
  for (auto& t : ts) t.join();
}

// onRanks for the C++ API: `body` gets each rank's Communicator; what it throws becomes that
// rank's entry of `errors`.
template <typename F>
void onCxxRanks(int n, std::vector<std::string>& errors, F body) {
  setenv("BRAID_TRANSPORT", "loopback", 1);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        braid::Communicator comm = braid::Communicator::fromUniqueId(id, r, n);
        body(comm, r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
}

// Each rank's first failure, for ranks that run as threads: fail(r, what) keeps the first
// (an empty `what` is none); fail.of[r] is rank r's, "" if it had none.
struct Failures {
  explicit Failures(int n) : of(static_cast<size_t>(n)) {}
  void operator()(int r, const std::string& what) {
    if (!what.empty() && of[r].empty()) of[r] = what;
  }
  std::vector<std::string> of;
};

// What the communicator's asynchronous error query reports, "" when nothing failed.
std::string asyncFailure(braidComm_t comm) {
  braidResult_t async = braidInternalError;
  braidCommGetAsyncError(comm, &async);
  return async == braidSuccess ? "" : std::string("async error: ") + braidGetLastError(comm);
}

// BRAID_CUDA_PATH for one test, restored after it.
struct CudaPath {
  explicit CudaPath(const char* v) { setenv("BRAID_CUDA_PATH", v, 1); }
  ~CudaPath() { unsetenv("BRAID_CUDA_PATH"); }
};

struct MemHandle {
  explicit MemHandle(const char* v) { setenv("BRAID_CUDA_MEM_HANDLE", v, 1); }
  ~MemHandle() { unsetenv("BRAID_CUDA_MEM_HANDLE"); }
};

struct InstallRuntime {
  explicit InstallRuntime(braid::device::Runtime* r) { braid::device::setRuntimeForTesting(r); }
  ~InstallRuntime() { braid::device::setRuntimeForTesting(nullptr); }
};

}  // namespace

TEST_CASE("C API: device buffers are enqueued on the stream and return at once", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const int n = 3;
  const size_t count = 300001;
  std::vector<std::string> errors(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* in = static_cast<float*>(rt.deviceAlloc(count * 4));
    float* out = static_cast<float*>(rt.deviceAlloc(count * n * 4));
    Gate gate;
    gate.closeOn(stream);
    stream.enqueue([&] {
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(r + 1);
    });
    // Allreduce in place, then an allgather of its result: two calls in stream order.
    braidResult_t a = braidAllReduce(in, in, count, braidFloat32, braidSum, comm, stream.handle());
    braidResult_t g = braidAllGather(in, out, count, braidFloat32, comm, stream.handle());
    std::vector<float> got;
    stream.enqueue([&] { got.assign(out, out + count * n); });
    if (a != braidSuccess || g != braidSuccess) errors[r] = braidGetLastError(comm);
    if (!got.empty()) errors[r] = "the calls waited for the stream";
    gate.open();
    stream.synchronize();
    braidResult_t async = braidInternalError;
    braidCommGetAsyncError(comm, &async);
    if (async != braidSuccess) errors[r] = std::string("async error: ") + braidGetLastError(comm);
    for (size_t b = 0; b < static_cast<size_t>(n) && errors[r].empty(); ++b)
      if (got.size() != count * n || got[b * count] != 6.0f || got[b * count + count - 1] != 6.0f)
        errors[r] = "wrong allgather result in block " + std::to_string(b);
    // The same device buffers with host memory in one call: refused, naming both.
    std::vector<float> host(count);
    if (braidAllReduce(in, host.data(), count, braidFloat32, braidSum, comm, stream.handle()) != braidInvalidArgument)
      errors[r] = "a host/device mix was accepted";
    else if (std::string(braidGetLastError(comm)).find("sendbuff is device memory and recvbuff is host memory") ==
             std::string::npos)
      errors[r] = std::string("mix message: ") + braidGetLastError(comm);
    stream.synchronize();
    rt.deviceFree(in);
    rt.deviceFree(out);
  });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
}

TEST_CASE("C API: sends and receives on device buffers, grouped with a collective, run on the stream",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const int n = 4;
  const size_t count = 70001;
  std::vector<std::string> errors(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    int* mine = static_cast<int*>(rt.deviceAlloc(count * 4));
    int* fromLeft = static_cast<int*>(rt.deviceAlloc(count * 4));
    int* sum = static_cast<int*>(rt.deviceAlloc(4));
    Gate gate;
    gate.closeOn(stream);
    stream.enqueue([&] {
      for (size_t i = 0; i < count; ++i) mine[i] = r * 1000 + static_cast<int>(i % 1000);
      *sum = r;
    });
    // A ring exchange and an allreduce in one group, all on the stream.
    braidGroupStart();
    braidSend(mine, count, braidInt32, (r + 1) % n, comm, stream.handle());
    braidRecv(fromLeft, count, braidInt32, (r + n - 1) % n, comm, stream.handle());
    braidAllReduce(sum, sum, 1, braidInt32, braidSum, comm, stream.handle());
    if (braidGroupEnd() != braidSuccess) errors[r] = std::string("group: ") + braidGetLastError(comm);
    std::vector<int> got;
    int total = -1;
    stream.enqueue([&] {
      got.assign(fromLeft, fromLeft + count);
      total = *sum;
    });
    if (!got.empty()) errors[r] = "braidGroupEnd waited for the stream";
    gate.open();
    stream.synchronize();
    const int left = (r + n - 1) % n;
    for (size_t i = 0; i < got.size() && errors[r].empty(); ++i)
      if (got[i] != left * 1000 + static_cast<int>(i % 1000)) errors[r] = "received element " + std::to_string(i);
    if (got.size() != count) errors[r] = "nothing received";
    if (total != 6) errors[r] = "allreduce in the group gave " + std::to_string(total);
    // Host and device buffers in one group's sends and receives: refused, by name.
    std::vector<int> host(count);
    braidGroupStart();
    braidSend(mine, count, braidInt32, (r + 1) % n, comm, stream.handle());
    braidRecv(host.data(), count, braidInt32, (r + n - 1) % n, comm, nullptr);
    if (braidGroupEnd() != braidInvalidArgument ||
        std::string(braidGetLastError(comm)).find("mixes host and device buffers") == std::string::npos)
      errors[r] = std::string("mixed group: ") + braidGetLastError(comm);
    stream.synchronize();
    rt.deviceFree(mine);
    rt.deviceFree(fromLeft);
    rt.deviceFree(sum);
  });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
}

// A group of large sends and receives on device buffers runs as one group, its receive
// going on while its send waits: rank 2 takes rank 1's message only after rank 0's second
// call, which comes only once rank 1 has received rank 0's first. Cut into one group per
// piece, rank 1's later pieces would wait for its send (docs/cuda.md, "Point-to-point calls
// are staged whole").
TEST_CASE("C API: a large device group receives while its send waits for a peer's later call", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  setenv("BRAID_TIMEOUT", "20", 1);  // a wait that never ends fails within this
  const size_t count = size_t{4} << 20;  // 16 MiB of int32: four times a connection's slots
  Failures fail(3);
  onRanks(3, [&](braidComm_t comm, int r) {
    FakeStream stream;
    int* big = static_cast<int*>(rt.deviceAlloc(count * 4));
    int* big2 = static_cast<int*>(rt.deviceAlloc(count * 4));
    int* small = static_cast<int*>(rt.deviceAlloc(4));
    stream.enqueue([=] {
      for (size_t i = 0; i < count; ++i) big[i] = static_cast<int>(r * 7 + i % 1001);
      *small = r == 0 ? 42 : -1;
    });
    auto ok = [&](braidResult_t res, const char* what) {
      if (res != braidSuccess) fail(r, std::string(what) + ": " + braidGetLastError(comm));
    };
    if (r == 0) {
      ok(braidSend(big, count, braidInt32, 1, comm, stream.handle()), "send to 1");
      ok(braidSend(small, 1, braidInt32, 2, comm, stream.handle()), "send to 2");
    } else if (r == 1) {
      braidGroupStart();
      ok(braidRecv(big2, count, braidInt32, 0, comm, stream.handle()), "recv from 0");
      ok(braidSend(big, count, braidInt32, 2, comm, stream.handle()), "send to 2");
      ok(braidGroupEnd(), "group");
    } else {
      ok(braidRecv(small, 1, braidInt32, 0, comm, stream.handle()), "recv from 0");
      ok(braidRecv(big2, count, braidInt32, 1, comm, stream.handle()), "recv from 1");
    }
    stream.synchronize();
    fail(r, asyncFailure(comm));
    const int from = r == 1 ? 0 : 1;
    for (size_t i = 0; r > 0 && i < count && fail.of[r].empty(); ++i)
      if (big2[i] != static_cast<int>(from * 7 + i % 1001))
        fail(r, "element " + std::to_string(i) + " from rank " + std::to_string(from));
    if (r == 2 && fail.of[r].empty() && *small != 42) fail(r, "rank 0's message is " + std::to_string(*small));
    rt.deviceFree(big);
    rt.deviceFree(big2);
    rt.deviceFree(small);
  });
  unsetenv("BRAID_TIMEOUT");
  for (int r = 0; r < 3; ++r) CHECK(fail.of[r] == "");
}

TEST_CASE("C API: a host call after device calls waits for them, so every rank sees the same order",
          "[device][cuda]") {
  // Rank 0's stream reaches its device allreduce at once; the others' only after they have
  // issued a host allreduce too. Were the host call run at once, rank 0 would see the device
  // call first and the others the host call first.
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const int n = 3;
  const size_t count = 1000;
  std::vector<std::string> errors(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* dev = static_cast<float*>(rt.deviceAlloc(count * 4));
    Gate gate;
    gate.closeOn(stream);
    stream.enqueue([&] {
      for (size_t i = 0; i < count; ++i) dev[i] = 1.0f;
    });
    if (braidAllReduce(dev, dev, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      errors[r] = std::string("device call: ") + braidGetLastError(comm);
    std::thread opener([&] {
      if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      gate.open();
    });
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<float> host(count, static_cast<float>(r));
    if (braidAllReduce(host.data(), host.data(), count, braidFloat32, braidMax, comm, nullptr) != braidSuccess)
      errors[r] = std::string("host call: ") + braidGetLastError(comm);
    else if (host[0] != 2.0f)
      errors[r] = "host call result " + std::to_string(host[0]);
    opener.join();
    std::vector<float> got;
    stream.enqueue([&] { got.assign(dev, dev + count); });
    stream.synchronize();
    if (got.empty() || got[0] != 3.0f) errors[r] = "device call result wrong";
    rt.deviceFree(dev);
  });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
}

// On the direct paths a captured call is staged (its host node may not launch kernels):
// every rank capturing the same calls, the replays are host calls on every rank, carried by
// the connections of either path, while the calls outside the capture keep running on the
// device buffers through the kernels. On ipc a capture before the first device call, which
// sets up the device slots, is refused.
TEST_CASE("C API: on the direct paths calls captured into a CUDA graph run staged at every replay", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const char* path = GENERATE("direct", "ipc");
  INFO(path);
  CudaPath cudaPath(path);
  const int n = 2;
  const size_t count = 1000;
  Failures fail(n);
  std::atomic<int> kernelsAtCapture{-1};
  std::atomic<int> arrived{0};
  // Bounded, so that a rank that never got here (a failed init) fails the test, not hangs it.
  auto allArrive = [&](int round) {
    arrived.fetch_add(1);
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (arrived.load() < round * n) {
      if (std::chrono::steady_clock::now() > limit) return false;
      std::this_thread::yield();
    }
    return true;
  };
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* buf = static_cast<float*>(rt.deviceAlloc(count * 4));
    float* peer = static_cast<float*>(rt.deviceAlloc(count * 4));
    if (std::string(path) == "ipc") {
      // Before any device call the ipc path is not set up, which a capture cannot do: refused.
      rt.beginCapture(stream.handle());
      const braidResult_t res = braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle());
      const std::string msg = braidGetLastError(comm);
      rt.endCapture(stream.handle());
      if (res != braidInvalidArgument) fail(r, "a capture before the ipc path was set up was accepted");
      else if (msg.find("braidAllReduce on rank " + std::to_string(r) + ": stream is being captured") == std::string::npos ||
               msg.find("make one device call before capturing") == std::string::npos)
        fail(r, "message: " + msg);
    }
    // A call before the capture takes the direct path (and, for ipc, sets up the device slots).
    stream.enqueue([&] { std::fill(buf, buf + count, 1.0f); });
    if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      fail(r, std::string("before the capture: ") + braidGetLastError(comm));
    stream.synchronize();
    if (buf[count - 1] != 2.0f) fail(r, "before the capture: " + std::to_string(buf[count - 1]));
    // Captured: an allreduce in place and an exchange of the result.
    rt.beginCapture(stream.handle());
    if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      fail(r, std::string("captured allreduce: ") + braidGetLastError(comm));
    braidGroupStart();
    braidSend(buf, count, braidFloat32, 1 - r, comm, stream.handle());
    braidRecv(peer, count, braidFloat32, 1 - r, comm, stream.handle());
    if (braidGroupEnd() != braidSuccess) fail(r, std::string("captured group: ") + braidGetLastError(comm));
    auto graph = rt.endCapture(stream.handle());
    stream.synchronize();
    if (!allArrive(1)) fail(r, "the other rank never came");
    if (r == 0) kernelsAtCapture.store(rt.kernels.load());
    if (!allArrive(2)) fail(r, "the other rank never came");
    for (int replay = 1; replay <= 2 && fail.of[r].empty(); ++replay) {
      stream.enqueue([=] {
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((r + 1) * replay * (1 + i % 5));
      });
      rt.launch(graph, stream.handle());
      stream.synchronize();
      for (size_t i = 0; i < count && fail.of[r].empty(); ++i) {
        const float want = static_cast<float>(3 * replay * (1 + i % 5));
        if (buf[i] != want || peer[i] != want)
          fail(r, "replay " + std::to_string(replay) + ": element " + std::to_string(i) + " is " +
                      std::to_string(buf[i]) + " / " + std::to_string(peer[i]));
      }
    }
    if (!allArrive(3)) fail(r, "the other rank never came");
    if (r == 0 && rt.kernels.load() != kernelsAtCapture.load()) fail(r, "a replay launched kernels");
    if (!allArrive(4)) fail(r, "the other rank never came");
    // After the capture the same call runs on the direct path again, in stream order.
    if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      fail(r, std::string("after the capture: ") + braidGetLastError(comm));
    stream.synchronize();
    if (fail.of[r].empty() && buf[4] != 2.0f * 3 * 2 * 5) fail(r, "after the capture: " + std::to_string(buf[4]));
    fail(r, asyncFailure(comm));
    graph.reset();
    rt.deviceFree(buf);
    rt.deviceFree(peer);
  });
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
  CHECK(rt.kernels.load() > kernelsAtCapture.load());  // the calls outside the capture
  CHECK(rt.hostFuncs.load() == 2 * n);                // one host node per captured call
}

// Captured into a CUDA graph, a staged call becomes graph nodes (copies in, a host node
// running the collective, copies out; device_queue.h, "Captured calls"): nothing runs at
// capture, every replay runs the collective on that replay's data, the graph's going frees
// what it held, and a replay after the communicator went leaves the buffers alone.
TEST_CASE("C API: calls captured into a CUDA graph run at every replay of the graph", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const int n = 2;
  const size_t count = 3001;
  const int hostBefore = rt.hostLive.load();
  std::vector<std::unique_ptr<FakeStream>> streams;
  for (int r = 0; r < n; ++r) streams.push_back(std::make_unique<FakeStream>());
  std::vector<std::shared_ptr<FakeRuntime::Graph>> graphs(n);
  std::vector<float*> bufs(n), gathered(n);
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream& stream = *streams[r];
    float* buf = bufs[r] = static_cast<float*>(rt.deviceAlloc(count * 4));
    float* all = gathered[r] = static_cast<float*>(rt.deviceAlloc(n * count * 4));
    stream.enqueue([=] { std::fill(buf, buf + count, -1.0f); });
    stream.synchronize();
    // Capture: an allreduce in place, then an allgather of its result.
    rt.beginCapture(stream.handle());
    if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      fail(r, std::string("captured allreduce: ") + braidGetLastError(comm));
    if (braidAllGather(buf, all, count, braidFloat32, comm, stream.handle()) != braidSuccess)
      fail(r, std::string("captured allgather: ") + braidGetLastError(comm));
    graphs[r] = rt.endCapture(stream.handle());
    stream.synchronize();
    if (buf[0] != -1.0f) fail(r, "the capture ran the call");
    if (graphs[r]->ops.size() != 6) fail(r, std::to_string(graphs[r]->ops.size()) + " graph nodes, expected 6");
    // Three replays, each on its own data.
    for (int replay = 1; replay <= 3 && fail.of[r].empty(); ++replay) {
      stream.enqueue([=] {
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((r + 1) * replay * (1 + i % 7));
      });
      rt.launch(graphs[r], stream.handle());
      stream.synchronize();
      for (size_t i = 0; i < count && fail.of[r].empty(); ++i) {
        const float want = static_cast<float>(3 * replay * (1 + i % 7));
        if (buf[i] != want || all[i] != want || all[count + i] != want)
          fail(r, "replay " + std::to_string(replay) + ": element " + std::to_string(i) + " is " +
                      std::to_string(buf[i]) + " / " + std::to_string(all[i]) + " / " + std::to_string(all[count + i]));
      }
    }
    // Calls outside the capture run as before, after the replays in stream order.
    if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      fail(r, std::string("after the replays: ") + braidGetLastError(comm));
    stream.synchronize();
    // Twice replay 3's sum.
    if (fail.of[r].empty() && buf[5] != 2.0f * 9 * 6) fail(r, "after the replays: " + std::to_string(buf[5]));
    fail(r, asyncFailure(comm));
  });
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
  CHECK(rt.hostFuncs.load() == 2 * n);  // one host node per captured call, made once
  // A replay after the communicator went runs nothing: the buffer keeps what the stream
  // wrote before it.
  streams[0]->enqueue([&] { std::fill(bufs[0], bufs[0] + count, 7.0f); });
  rt.launch(graphs[0], streams[0]->handle());
  streams[0]->synchronize();
  CHECK(bufs[0][0] == 7.0f);
  CHECK(bufs[0][count - 1] == 7.0f);
  // The graphs' going gives their blocks back (freed by the runtime's next chance).
  graphs.clear();
  rt.freeDeferred();
  CHECK(rt.hostLive.load() == hostBefore);
  for (int r = 0; r < n; ++r) {
    rt.deviceFree(bufs[r]);
    rt.deviceFree(gathered[r]);
  }
}

// A replay whose collective fails (here: the peer never replays, so it times out) leaves
// the stream going, and its error fails the next call and the async error query.
TEST_CASE("C API: a captured call that fails at a replay is reported by the next call", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  setenv("BRAID_TIMEOUT", "2", 1);
  const int n = 2;
  const size_t count = 100;
  Failures fail(n);
  std::atomic<int> done{0};
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* buf = static_cast<float*>(rt.deviceAlloc(count * 4));
    rt.beginCapture(stream.handle());
    if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      fail(r, std::string("capture: ") + braidGetLastError(comm));
    auto graph = rt.endCapture(stream.handle());
    if (r == 0) {
      // Only rank 0 replays: its collective waits for rank 1, which never comes.
      const auto t0 = std::chrono::steady_clock::now();
      rt.launch(graph, stream.handle());
      stream.synchronize();  // returns: the failed replay does not hold the stream
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) fail(r, "the failed replay took too long");
      braidResult_t async = braidSuccess;
      braidCommGetAsyncError(comm, &async);
      if (async == braidSuccess || async == braidInProgress) fail(r, "no async error after the failed replay");
      if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) == braidSuccess)
        fail(r, "the call after the failed replay was accepted");
    }
    done.fetch_add(1);
    while (done.load() < n) std::this_thread::yield();
    graph.reset();
    rt.deviceFree(buf);
  });
  unsetenv("BRAID_TIMEOUT");
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
}

// A call large enough to be staged in pieces is cut the same way in a capture: the host node
// runs the pieces one after another, so a rank that replays a graph and peers that issue
// the same calls uncaptured run the same collectives.
TEST_CASE("C API: a large captured call runs in the pieces its uncaptured peers are cut in", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  setenv("BRAID_TIMEOUT", "20", 1);  // a mismatch would fail, or wait this long
  const int n = 3;
  const size_t count = (size_t{3} << 20) + 1234;       // an allreduce of 12 MiB: three pieces
  const size_t block = (size_t{3} << 20) / 4 + 1234;  // an allgather of 9 MiB in all: three pieces
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* buf = static_cast<float*>(rt.deviceAlloc(count * 4));
    float* one = static_cast<float*>(rt.deviceAlloc(block * 4));
    float* all = static_cast<float*>(rt.deviceAlloc(n * block * 4));
    auto calls = [&](const std::string& when) {
      if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
        fail(r, when + " allreduce: " + braidGetLastError(comm));
      if (braidAllGather(one, all, block, braidFloat32, comm, stream.handle()) != braidSuccess)
        fail(r, when + " allgather: " + braidGetLastError(comm));
    };
    std::shared_ptr<FakeRuntime::Graph> graph;
    if (r == 0) {
      rt.beginCapture(stream.handle());
      calls("captured");
      graph = rt.endCapture(stream.handle());
    }
    for (int round = 1; round <= 2 && fail.of[r].empty(); ++round) {
      stream.enqueue([=] {
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((r + 1) * round * (1 + i % 11));
        for (size_t i = 0; i < block; ++i) one[i] = static_cast<float>(r * 100000 + round * (i % 4099));
      });
      if (graph) rt.launch(graph, stream.handle());
      else calls("round " + std::to_string(round));
      stream.synchronize();
      for (size_t i = 0; i < count && fail.of[r].empty(); ++i)
        if (buf[i] != static_cast<float>(6 * round * (1 + i % 11)))
          fail(r, "round " + std::to_string(round) + ": allreduce element " + std::to_string(i) + " is " +
                      std::to_string(buf[i]));
      for (size_t k = 0; k < n * block && fail.of[r].empty(); ++k)
        if (all[k] != static_cast<float>((k / block) * 100000 + round * ((k % block) % 4099)))
          fail(r, "round " + std::to_string(round) + ": allgather element " + std::to_string(k) + " is " +
                      std::to_string(all[k]));
    }
    fail(r, asyncFailure(comm));
    graph.reset();
    rt.deviceFree(buf);
    rt.deviceFree(one);
    rt.deviceFree(all);
  });
  unsetenv("BRAID_TIMEOUT");
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
  CHECK(rt.hostFuncs.load() == 2);  // rank 0's two host nodes, made once
}

// The C++ API's Work forms are refused under a capture: the call runs at each replay, and
// there is nothing to wait for yet.
TEST_CASE("C++ API: a Work form on a stream being captured is refused, naming the rank", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const int n = 2;
  std::vector<std::string> errors(n);
  onCxxRanks(n, errors, [&](braid::Communicator& comm, int r) {
    FakeStream stream;
    float* dev = static_cast<float*>(rt.deviceAlloc(64 * 4));
    rt.beginCapture(stream.handle());
    {
      braid::StreamGuard guard(stream.handle());
      try {
        comm.allreduceAsync(dev, dev, 64, braid::DataType::kFloat32, braid::ReduceOp::kSum);
        errors[r] = "a Work form was captured";
      } catch (const braid::InvalidArgument& e) {
        const std::string what = e.what();
        if (what.find("on rank " + std::to_string(r)) == std::string::npos ||
            what.find("an asynchronous Work cannot wait for it") == std::string::npos)
          errors[r] = "message: " + what;
      }
    }
    auto graph = rt.endCapture(stream.handle());
    if (!graph->ops.empty()) errors[r] += "; the refused call left graph nodes";
    graph.reset();
    rt.deviceFree(dev);
  });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
}

TEST_CASE("C API: without a GPU a stream is refused with the reason, and host calls run as before", "[device][cuda]") {
  if (braid::device::cudaRuntime().available().isOk()) {
    WARN("a GPU is visible here: the no-driver path is not what runs");
    return;
  }
  const int n = 2;
  std::vector<std::string> errors(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    std::vector<float> v(1000, 1.0f);
    int fakeStream = 0;
    braidResult_t res = braidAllReduce(v.data(), v.data(), v.size(), braidFloat32, braidSum, comm, &fakeStream);
    std::string msg = braidGetLastError(comm);
    if (res != braidInvalidArgument) errors[r] = "a stream was accepted without a GPU";
    else if (msg.find("braidAllReduce on rank " + std::to_string(r) + ": stream is not NULL but device buffers cannot be used here") ==
             std::string::npos)
      errors[r] = "message: " + msg;
    if (braidAllReduce(v.data(), v.data(), v.size(), braidFloat32, braidSum, comm, nullptr) != braidSuccess ||
        v[999] != 2.0f)
      errors[r] = "the host call after it failed";
  });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
}

TEST_CASE("C and C++ API: a call repeated on addresses that have become device memory takes the device path",
          "[device][cuda]") {
  // A blocking host call made again with the same arguments skips its checks (the call's
  // preparation is kept from the time before); the memory kind of its buffers is asked again.
  // One rank: the identical call has no stream, so it goes on the default stream, which
  // ranks that are threads of one process would share.
  FakeRuntime rt;
  InstallRuntime install(&rt);
  const size_t count = 1000;
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i);
  std::string failure;
  int copiesOnHost = -1;
  // Twice on host memory, then once more after the same addresses became device memory:
  // staged on the default stream (copied in and out), returning at once.
  auto threeCalls = [&](const std::function<std::string()>& allreduce) {
    for (int k = 0; k < 2 && failure.empty(); ++k) {
      std::fill(out.begin(), out.end(), -1.0f);
      failure = allreduce();
      if (failure.empty() && out[count - 1] != static_cast<float>(count - 1))
        failure = "host call " + std::to_string(k) + ": last element " + std::to_string(out[count - 1]);
    }
    copiesOnHost = rt.copiesDone.load();
    rt.adoptAsDevice(in.data(), count * sizeof(float));
    rt.adoptAsDevice(out.data(), count * sizeof(float));
    std::fill(out.begin(), out.end(), -1.0f);
    if (failure.empty()) failure = allreduce();
    rt.defaultStream().synchronize();
  };
  SECTION("C API") {
    onRanks(1, [&](braidComm_t comm, int) {
      threeCalls([&]() -> std::string {
        if (braidAllReduce(in.data(), out.data(), count, braidFloat32, braidSum, comm, nullptr) == braidSuccess) return "";
        return std::string("braidAllReduce: ") + braidGetLastError(comm);
      });
      if (failure.empty()) failure = asyncFailure(comm);
    });
  }
  SECTION("C++ API") {
    std::vector<std::string> errors(1);
    onCxxRanks(1, errors, [&](braid::Communicator& comm, int) {
      threeCalls([&]() -> std::string {
        comm.allreduce(in.data(), out.data(), count, braid::DataType::kFloat32, braid::ReduceOp::kSum);
        return "";
      });
    });
    if (failure.empty()) failure = errors[0];
  }
  rt.forgetDevice(in.data());
  rt.forgetDevice(out.data());
  CHECK(failure == "");
  CHECK(copiesOnHost == 0);
  CHECK(rt.copiesDone.load() >= 2);  // staged in and out
  CHECK(out[0] == 0.0f);
  CHECK(out[count - 1] == static_cast<float>(count - 1));
}

TEST_CASE("C API: a call repeated after a send and a receive runs its own schedule again", "[device][cuda]") {
  // The repeated call skips comparing its request with the current plan's only while that
  // plan is the one it ran with; a send and a receive in between run a plan of their own.
  const int n = 2;
  const size_t count = 6;
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    std::vector<float> in(count), out(count);
    std::vector<int32_t> sent(3, r + 10), got(3, -1);
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(round * 100 + r * 10) + static_cast<float>(i);
      for (int k = 0; k < 2; ++k) {  // the second is a repeat
        std::fill(out.begin(), out.end(), -1.0f);
        if (braidAllReduce(in.data(), out.data(), count, braidFloat32, braidSum, comm, nullptr) != braidSuccess) {
          fail(r, std::string("allreduce: ") + braidGetLastError(comm));
          return;
        }
        for (size_t i = 0; i < count; ++i) {
          const float expect = static_cast<float>(2 * round * 100 + 10) + 2.0f * static_cast<float>(i);
          if (out[i] != expect) fail(r, "round " + std::to_string(round) + ": element " + std::to_string(i) + " is " +
                                            std::to_string(out[i]) + ", expected " + std::to_string(expect));
        }
      }
      braidGroupStart();
      braidSend(sent.data(), sent.size(), braidInt32, 1 - r, comm, nullptr);
      braidRecv(got.data(), got.size(), braidInt32, 1 - r, comm, nullptr);
      if (braidGroupEnd() != braidSuccess) fail(r, std::string("send/recv: ") + braidGetLastError(comm));
      else if (got[2] != 1 - r + 10) fail(r, "received " + std::to_string(got[2]));
    }
  });
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
}

TEST_CASE("C API: a call repeated with a pre-multiplied sum destroyed since fails, naming the op", "[device][cuda]") {
  // The other side of the kept preparation: what may change between identical calls is
  // checked again (here the op handle, on host buffers).
  const int n = 2;
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    float scalar = 0.5f;
    braidRedOp_t op;
    if (braidRedOpCreatePreMulSum(&op, &scalar, braidFloat32, comm) != braidSuccess) {
      fail(r, std::string("create: ") + braidGetLastError(comm));
      return;
    }
    std::vector<float> v(16, 2.0f);
    for (float expect : {2.0f, 2.0f}) {  // (2 + 2) / 2, twice
      if (braidAllReduce(v.data(), v.data(), v.size(), braidFloat32, op, comm, nullptr) != braidSuccess)
        fail(r, std::string("call: ") + braidGetLastError(comm));
      else if (v[15] != expect)
        fail(r, "element is " + std::to_string(v[15]));
    }
    braidRedOpDestroy(op, comm);
    if (braidAllReduce(v.data(), v.data(), v.size(), braidFloat32, op, comm, nullptr) != braidInvalidArgument)
      fail(r, "a destroyed op was accepted");
    else if (std::string(braidGetLastError(comm)).find("was destroyed by braidRedOpDestroy") == std::string::npos)
      fail(r, std::string("message: ") + braidGetLastError(comm));
  });
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
}

TEST_CASE("C++ API: calls under a StreamGuard are enqueued on its stream, and a Work on device buffers is done "
          "once the stream is past its call",
          "[device][cuda]") {
  FakeRuntime rt;
  rt.copyDelayUs = 20000;  // a copy back that lags the collective, which Work::wait must wait for
  InstallRuntime installed(&rt);
  const int n = 2;
  const size_t count = 5003;
  std::vector<std::string> errors(n);
  onCxxRanks(n, errors, [&](braid::Communicator& comm, int r) {
    FakeStream stream;
    float* dev = static_cast<float*>(rt.deviceAlloc(count * 4));
    float* gathered = static_cast<float*>(rt.deviceAlloc(count * n * 4));
    Gate gate;
    gate.closeOn(stream);
    stream.enqueue([&] {
      for (size_t i = 0; i < count; ++i) dev[i] = static_cast<float>(r + 1);
    });
    std::vector<float> got;
    braid::Work work;
    {
      braid::StreamGuard guard(stream.handle());
      if (braid::StreamGuard::current() != stream.handle()) errors[r] = "current() is not the guard's stream";
      comm.allreduce(dev, count, braid::DataType::kFloat32, braid::ReduceOp::kSum);
      comm.allgather(dev, gathered, count, braid::DataType::kFloat32);
      // Sends and receives go to the stream too, as one batch.
      std::vector<braid::P2POp> ops(2);
      ops[0].isSend = true;
      ops[0].buf = dev;
      ops[0].count = count;
      ops[0].dtype = braid::DataType::kFloat32;
      ops[0].peer = 1 - r;
      ops[1] = ops[0];
      ops[1].isSend = false;
      ops[1].buf = gathered + count * r;  // receives the peer's sum: the same values
      comm.sendRecv(ops);
      // The Work form is enqueued alike; its Work is done once the stream is past it.
      work = comm.allreduceAsync(dev, dev, count, braid::DataType::kFloat32, braid::ReduceOp::kSum);
      stream.enqueue([&] { got.assign(gathered, gathered + count * n); });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (work.test()) errors[r] = "the Work was done before its stream reached the call";
    if (braid::StreamGuard::current() != nullptr) errors[r] = "the guard did not restore the stream";
    if (!got.empty()) errors[r] = "the calls waited for the stream";
    gate.open();
    work.wait();
    // Done: the second sum is in the buffer, whatever the stream does next.
    for (size_t i = 0; i < count && errors[r].empty(); i += 997)
      if (dev[i] != 6.0f) errors[r] = "after Work::wait, element " + std::to_string(i) + " is " + std::to_string(dev[i]);
    if (!work.test()) errors[r] = "a waited-for Work is not done";
    stream.synchronize();
    comm.checkAsyncError();
    for (size_t i = 0; i < got.size() && errors[r].empty(); i += 997)
      if (got[i] != 3.0f) errors[r] = "element " + std::to_string(i) + " is " + std::to_string(got[i]);
    if (got.size() != count * n) errors[r] = "no result";
    // Without a guard, host buffers run on the calling thread as before.
    std::vector<float> host(7, 1.0f);
    comm.allreduce(host.data(), host.size(), braid::DataType::kFloat32, braid::ReduceOp::kSum);
    if (host[6] != 2.0f) errors[r] = "host call after device calls: " + std::to_string(host[6]);
    rt.deviceFree(dev);
    rt.deviceFree(gathered);
  });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
}

// A large allreduce and broadcast through the C API are staged in pieces (device_queue.h):
// every element of an odd count comes out right, in place and out of place, for sum and
// average.
TEST_CASE("C API: a large device allreduce or broadcast, staged in pieces, gives every element", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  // The direct paths run the same pieces on the device buffers, through the kernels (ipc: with
  // the slots in device memory).
  const char* path = GENERATE("staged", "direct", "ipc");
  INFO(path);
  CudaPath cudaPath(path);
  const int n = 3;
  const size_t count = (size_t{9} << 20) / 4 + 12345;  // three pieces, the last one short
  std::vector<std::string> errors(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* in = static_cast<float*>(rt.deviceAlloc(count * 4));
    float* out = static_cast<float*>(rt.deviceAlloc(count * 4));
    for (braidRedOp_t op : {braidSum, braidAvg}) {
      for (bool inPlace : {false, true}) {
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((r + 1) * (i % 4099));
        });
        float* dst = inPlace ? in : out;
        if (braidAllReduce(in, dst, count, braidFloat32, op, comm, stream.handle()) != braidSuccess) {
          errors[r] = braidGetLastError(comm);
          gate.open();
          break;
        }
        gate.open();
        stream.synchronize();
        const float scale = op == braidSum ? 6.0f : 2.0f;  // 1+2+3, or their mean
        for (size_t i = 0; i < count && errors[r].empty(); ++i)
          if (dst[i] != scale * static_cast<float>(i % 4099))
            errors[r] = std::string(op == braidSum ? "sum" : "avg") + (inPlace ? " in place" : "") + ": element " +
                        std::to_string(i) + " is " + std::to_string(dst[i]);
      }
    }
    // A broadcast from rank 1, out of place on the root and in place elsewhere.
    {
      const int root = 1;
      Gate gate;
      gate.closeOn(stream);
      stream.enqueue([&] {
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((r + 1) * (i % 4099));
        for (size_t i = 0; i < count; ++i) out[i] = -1.0f;
      });
      float* src = r == root ? in : out;
      if (braidBroadcast(src, out, count, braidFloat32, root, comm, stream.handle()) != braidSuccess &&
          errors[r].empty())
        errors[r] = std::string("broadcast: ") + braidGetLastError(comm);
      gate.open();
      stream.synchronize();
      for (size_t i = 0; i < count && errors[r].empty(); ++i)
        if (out[i] != static_cast<float>((root + 1) * (i % 4099)))
          errors[r] = "broadcast: element " + std::to_string(i) + " is " + std::to_string(out[i]);
    }
    braidResult_t async = braidInternalError;
    braidCommGetAsyncError(comm, &async);
    if (async != braidSuccess && errors[r].empty()) errors[r] = std::string("async error: ") + braidGetLastError(comm);
    rt.deviceFree(in);
    rt.deviceFree(out);
  });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
  CHECK((rt.kernels.load() > 0) == (std::string(path) != "staged"));
}

// Allgather, reduce-scatter and alltoall are staged in pieces too, each piece the same range
// of every rank's block, and reduce (whose non-roots have no output) like allreduce: every
// element of an odd count right, in place and out of place, on either path.
TEST_CASE("C API: a large device allgather, reduce-scatter, alltoall or reduce, staged in pieces, gives every element",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const char* path = GENERATE("staged", "direct", "ipc");
  INFO(path);
  CudaPath cudaPath(path);
  const int n = 3;
  const size_t count = (size_t{3} << 20) / 4 + 1234;  // per block: 9 MiB over three blocks, three pieces
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* all = static_cast<float*>(rt.deviceAlloc(n * count * 4));
    float* one = static_cast<float*>(rt.deviceAlloc(count * 4));
    auto value = [](int rank, size_t b, size_t i) { return static_cast<float>((rank + 1) * (b * 5 + i % 4099)); };
    for (bool inPlace : {false, true}) {
      const std::string how = inPlace ? " in place" : "";
      float* block = inPlace ? all + r * count : one;
      {
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (size_t i = 0; i < count; ++i) block[i] = value(r, 0, i);
        });
        if (braidAllGather(block, all, count, braidFloat32, comm, stream.handle()) != braidSuccess)
          fail(r, "allgather" + how + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        for (size_t k = 0; k < n * count && fail.of[r].empty(); ++k)
          if (all[k] != value(static_cast<int>(k / count), 0, k % count))
            fail(r, "allgather" + how + ": element " + std::to_string(k) + " is " + std::to_string(all[k]));
      }
      // A sum, and a pre-multiplied sum (its scaled copy of the input spans every block).
      float half = 0.5f;
      braidRedOp_t preMul{};
      if (braidRedOpCreatePreMulSum(&preMul, &half, braidFloat32, comm) != braidSuccess)
        fail(r, std::string("premul: ") + braidGetLastError(comm));
      for (braidRedOp_t op : {braidSum, preMul}) {
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (size_t k = 0; k < n * count; ++k) all[k] = value(r, k / count, k % count);
        });
        const std::string what = std::string(op == braidSum ? "reduce-scatter" : "premul reduce-scatter") + how;
        if (braidReduceScatter(all, block, count, braidFloat32, op, comm, stream.handle()) != braidSuccess)
          fail(r, what + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        const float scale = op == braidSum ? 6.0f : 3.0f;  // 1+2+3 times rank 0's value, or half that
        for (size_t i = 0; i < count && fail.of[r].empty(); ++i)
          if (block[i] != scale * value(0, r, i))
            fail(r, what + ": element " + std::to_string(i) + " is " + std::to_string(block[i]));
      }
      braidRedOpDestroy(preMul, comm);
      {
        // Alltoall: block b of this rank's output is block r of rank b's input.
        float* dst = inPlace ? all : static_cast<float*>(rt.deviceAlloc(n * count * 4));
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (size_t k = 0; k < n * count; ++k) all[k] = value(r, k / count, k % count);
        });
        if (braidAllToAll(all, dst, count, braidFloat32, comm, stream.handle()) != braidSuccess)
          fail(r, "alltoall" + how + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        for (size_t k = 0; k < n * count && fail.of[r].empty(); ++k)
          if (dst[k] != value(static_cast<int>(k / count), r, k % count))
            fail(r, "alltoall" + how + ": element " + std::to_string(k) + " is " + std::to_string(dst[k]));
        if (!inPlace) rt.deviceFree(dst);
      }
      {
        const int root = 2;
        const size_t big = n * count;  // as large as an allreduce's pieces
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (size_t k = 0; k < big; ++k) all[k] = value(r, 0, k);
        });
        float* out = r == root && !inPlace ? static_cast<float*>(rt.deviceAlloc(big * 4)) : nullptr;
        float* dst = r == root ? (inPlace ? all : out) : nullptr;
        if (braidReduce(all, dst, big, braidFloat32, braidSum, root, comm, stream.handle()) != braidSuccess)
          fail(r, "reduce" + how + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        for (size_t k = 0; dst && k < big && fail.of[r].empty(); ++k)
          if (dst[k] != 6.0f * value(0, 0, k))
            fail(r, "reduce" + how + ": element " + std::to_string(k) + " is " + std::to_string(dst[k]));
        if (out) rt.deviceFree(out);
      }
    }
    fail(r, asyncFailure(comm));
    rt.deviceFree(all);
    rt.deviceFree(one);
  });
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
  // Staged, each of the six allgathers and reduce-scatters of a rank copies one piece of
  // every block at once, three times, and each of its two alltoalls does so both ways; the
  // direct paths copy nothing and run kernels.
  CHECK(rt.rowCopiesDone.load() == (std::string(path) == "staged" ? (6 + 2 * 2) * 3 * n : 0));
  CHECK((rt.kernels.load() > 0) == (std::string(path) != "staged"));
}

// Allgatherv and reduce_scatterv of blocks of their own sizes (one large, one empty, one of
// five elements), 8 MiB or more in all, are staged in pieces too, each piece's range clipped
// to every block's end: every element right in place and out of place, and the gaps that
// allgatherv's displacements leave in the output untouched.
TEST_CASE("C API: a large device allgatherv or reduce_scatterv, staged in pieces, gives every element",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const char* path = GENERATE("staged", "direct", "ipc");
  INFO(path);
  CudaPath cudaPath(path);
  const int n = 4;
  const std::vector<size_t> counts = {(size_t{3} << 19) + 1234, 0, 5, 700001};  // 8.7 MiB of floats
  std::vector<size_t> displs(n), prefix(n);
  size_t total = 0, extent = 3;  // a gap before the first block, and between every two
  for (int b = 0; b < n; ++b) {
    prefix[b] = total;
    total += counts[b];
    displs[b] = extent;
    extent += counts[b] + 16;
  }
  const float gap = -7.0f;
  const int copiesBefore = rt.copiesDone.load();
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* out = static_cast<float*>(rt.deviceAlloc(std::max(extent, total) * 4));
    float* one = static_cast<float*>(rt.deviceAlloc(counts[0] * 4));
    auto value = [](int rank, size_t b, size_t i) { return static_cast<float>((rank + 1) * (b * 5 + i % 4099)); };
    for (bool inPlace : {false, true}) {
      const std::string how = inPlace ? " in place" : "";
      {
        float* mine = inPlace ? out + displs[r] : one;
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          std::fill(out, out + extent, gap);
          for (size_t i = 0; i < counts[r]; ++i) mine[i] = value(r, 0, i);
        });
        if (braidAllGatherV(mine, counts[r], out, counts.data(), displs.data(), braidFloat32, comm,
                            stream.handle()) != braidSuccess)
          fail(r, "allgatherv" + how + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        size_t k = 0;
        for (int b = 0; b < n && fail.of[r].empty(); ++b) {
          for (; k < displs[b] && fail.of[r].empty(); ++k)
            if (out[k] != gap) fail(r, "allgatherv" + how + ": gap element " + std::to_string(k) + " is " + std::to_string(out[k]));
          for (size_t i = 0; i < counts[b] && fail.of[r].empty(); ++i, ++k)
            if (out[k] != value(b, 0, i))
              fail(r, "allgatherv" + how + ": block " + std::to_string(b) + " element " + std::to_string(i) + " is " +
                          std::to_string(out[k]));
        }
        for (; k < extent && fail.of[r].empty(); ++k)
          if (out[k] != gap) fail(r, "allgatherv" + how + ": gap element " + std::to_string(k) + " is " + std::to_string(out[k]));
      }
      {
        float* mine = inPlace ? out + prefix[r] : one;
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (int b = 0; b < n; ++b)
            for (size_t i = 0; i < counts[b]; ++i) out[prefix[b] + i] = value(r, b, i);
        });
        if (braidReduceScatterV(out, mine, counts.data(), braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
          fail(r, "reduce_scatterv" + how + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        for (size_t i = 0; i < counts[r] && fail.of[r].empty(); ++i)
          if (mine[i] != 10.0f * value(0, r, i))  // 1+2+3+4 times rank 0's value
            fail(r, "reduce_scatterv" + how + ": element " + std::to_string(i) + " is " + std::to_string(mine[i]));
      }
    }
    fail(r, asyncFailure(comm));
    rt.deviceFree(out);
    rt.deviceFree(one);
  });
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
  // Staged, each of a rank's four calls copies its large block back (or in) in seven
  // pieces, where a whole call makes three copies; the direct paths copy nothing.
  const int copies = rt.copiesDone.load() - copiesBefore;
  if (std::string(path) == "staged") CHECK(copies >= 4 * n * 7);
  else CHECK(copies == 0);
  CHECK((rt.kernels.load() > 0) == (std::string(path) != "staged"));
}

// Alltoallv: each rank knows only its own counts, so each block is cut by its own size and
// the ranks agree how many pieces the call runs. Rank 0 sends rank 1 a block of seven
// pieces, rank 1 sends itself one of two, every other block is small or empty: ranks 0 and 1
// stage in pieces, ranks 2 and 3 stage whole and run the same seven pieces on that copy.
// Blocks lie apart and out of rank order on both sides; every element arrives, the gaps
// between the received blocks stay as they were, and a small call (one piece everywhere)
// runs whole. Then rank 0 captures the call into a graph and replays it while its peers
// issue it uncaptured: the replay agrees on the pieces as they do.
TEST_CASE("C API: a large device alltoallv, cut block by block into the pieces the ranks agree on, gives every element",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const char* path = GENERATE("staged", "direct", "ipc");
  INFO(path);
  CudaPath cudaPath(path);
  setenv("BRAID_TIMEOUT", "20", 1);  // a mismatch would fail, or wait this long
  const int n = 4;
  // counts[i][j]: elements rank i sends rank j.
  std::vector<std::vector<size_t>> counts(n, std::vector<size_t>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) counts[i][j] = (i * 7 + j * 3) % 11 * 97;  // some empty
  counts[0][1] = (size_t{3} << 19) + 1234;  // 6.3 MB: seven pieces of 1 MiB
  counts[1][1] = 300001;                    // 1.2 MB: two
  counts[3][2] = 4097;
  const float gap = -7.0f;
  auto value = [](int from, int to, size_t i) { return static_cast<float>((from + 1) * (to * 5 + i % 4099)); };
  const int copiesBefore = rt.copiesDone.load();
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    // Send blocks in rank order with a gap of 2 before each; receive blocks in reverse rank
    // order with a gap of 16 before each.
    std::vector<size_t> sendCounts(n), sendDispls(n), recvCounts(n), recvDispls(n);
    size_t inExtent = 0, outExtent = 0;
    for (int j = 0; j < n; ++j) {
      sendCounts[j] = counts[r][j];
      sendDispls[j] = inExtent + 2;
      inExtent = sendDispls[j] + sendCounts[j];
    }
    for (int j = n - 1; j >= 0; --j) {
      recvCounts[j] = counts[j][r];
      recvDispls[j] = outExtent + 16;
      outExtent = recvDispls[j] + recvCounts[j];
    }
    outExtent += 5;
    float* in = static_cast<float*>(rt.deviceAlloc(inExtent * 4));
    float* out = static_cast<float*>(rt.deviceAlloc(outExtent * 4));
    auto fill = [&](int scale) {
      stream.enqueue([=, &sendDispls] {
        std::fill(out, out + outExtent, gap);
        for (int j = 0; j < n; ++j)
          for (size_t i = 0; i < counts[r][j]; ++i) in[sendDispls[j] + i] = scale * value(r, j, i);
      });
    };
    auto check = [&](const std::string& what, int scale, const std::vector<size_t>& got) {
      std::vector<bool> inBlock(outExtent, false);
      for (int j = 0; j < n && fail.of[r].empty(); ++j) {
        for (size_t i = 0; i < got[j] && fail.of[r].empty(); ++i) {
          inBlock[recvDispls[j] + i] = true;
          if (out[recvDispls[j] + i] != scale * value(j, r, i))
            fail(r, what + ": element " + std::to_string(i) + " from rank " + std::to_string(j) + " is " +
                        std::to_string(out[recvDispls[j] + i]));
        }
      }
      for (size_t k = 0; k < outExtent && fail.of[r].empty(); ++k)
        if (!inBlock[k] && out[k] != gap)
          fail(r, what + ": gap element " + std::to_string(k) + " is " + std::to_string(out[k]));
    };
    auto alltoallv = [&](const std::vector<size_t>& sc, const std::vector<size_t>& rc, const std::string& what) {
      if (braidAllToAllV(in, sc.data(), sendDispls.data(), out, rc.data(), recvDispls.data(), braidFloat32, comm,
                         stream.handle()) != braidSuccess)
        fail(r, what + ": " + braidGetLastError(comm));
    };
    {
      Gate gate;
      gate.closeOn(stream);
      fill(1);
      alltoallv(sendCounts, recvCounts, "alltoallv");
      gate.open();
      stream.synchronize();
      check("alltoallv", 1, recvCounts);
    }
    // Small: every block at most 1 KiB, one piece on every rank.
    std::vector<size_t> smallSend(n), smallRecv(n);
    for (int j = 0; j < n; ++j) {
      smallSend[j] = std::min<size_t>(sendCounts[j], 256);
      smallRecv[j] = std::min<size_t>(recvCounts[j], 256);
    }
    const int copiesBeforeSmall = rt.copiesDone.load();
    fill(2);
    alltoallv(smallSend, smallRecv, "small alltoallv");
    stream.synchronize();
    check("small alltoallv", 2, smallRecv);
    // Staged whole: the output in (for its gaps), the input, the output back.
    if (std::string(path) == "staged" && rt.copiesDone.load() - copiesBeforeSmall < 3)
      fail(r, "small alltoallv: " + std::to_string(rt.copiesDone.load() - copiesBeforeSmall) + " copies");
    // Rank 0 replays a graph of the large call; the others issue it as before (with ipc,
    // where a replay's host buffers would meet its peers' device slots, every rank replays).
    std::shared_ptr<FakeRuntime::Graph> graph;
    if (r == 0 || std::string(path) == "ipc") {
      rt.beginCapture(stream.handle());
      alltoallv(sendCounts, recvCounts, "captured alltoallv");
      graph = rt.endCapture(stream.handle());
    }
    for (int round = 3; round <= 4 && fail.of[r].empty(); ++round) {
      fill(round);
      if (graph) rt.launch(graph, stream.handle());
      else alltoallv(sendCounts, recvCounts, "alltoallv " + std::to_string(round));
      stream.synchronize();
      check("alltoallv " + std::to_string(round), round, recvCounts);
    }
    fail(r, asyncFailure(comm));
    graph.reset();
    rt.deviceFree(in);
    rt.deviceFree(out);
  });
  unsetenv("BRAID_TIMEOUT");
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
  // Staged, rank 0 copies the large block in seven pieces in its one uncaptured large call,
  // rank 1 out in its three, where a whole call makes three copies.
  const int copies = rt.copiesDone.load() - copiesBefore;
  if (std::string(path) == "staged") CHECK(copies >= 7 * 4);
  else CHECK(copies <= 2 * 3 * n);  // the graphs' copies (staged) alone
}

// Gather and scatter of 8 MiB or more are staged in pieces too: the root holds every block
// (one strided copy per piece), the other ranks their own block alone, and every rank cuts
// the same count the same way. Every element right, at the root in place and out of place.
TEST_CASE("C API: a large device gather or scatter, staged in pieces, gives every element", "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const char* path = GENERATE("staged", "direct", "ipc");
  INFO(path);
  CudaPath cudaPath(path);
  const int n = 3, root = 1;
  const size_t count = (size_t{3} << 20) / 4 + 1234;  // per block: 9 MiB over three blocks, three pieces
  const int rowsBefore = rt.rowCopiesDone.load();
  Failures fail(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* all = r == root ? static_cast<float*>(rt.deviceAlloc(n * count * 4)) : nullptr;
    float* one = static_cast<float*>(rt.deviceAlloc(count * 4));
    auto value = [](int rank, size_t b, size_t i) { return static_cast<float>((rank + 1) * (b * 5 + i % 4099)); };
    for (bool inPlace : {false, true}) {
      const std::string how = inPlace ? " in place" : "";
      float* mine = r == root && inPlace ? all + root * count : one;
      {
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (size_t i = 0; i < count; ++i) mine[i] = value(r, 0, i);
        });
        if (braidGather(mine, all, count, braidFloat32, root, comm, stream.handle()) != braidSuccess)
          fail(r, "gather" + how + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        for (size_t k = 0; all && k < n * count && fail.of[r].empty(); ++k)
          if (all[k] != value(static_cast<int>(k / count), 0, k % count))
            fail(r, "gather" + how + ": element " + std::to_string(k) + " is " + std::to_string(all[k]));
      }
      {
        Gate gate;
        gate.closeOn(stream);
        stream.enqueue([&] {
          for (size_t k = 0; all && k < n * count; ++k) all[k] = value(root, k / count, k % count);
        });
        if (braidScatter(all, mine, count, braidFloat32, root, comm, stream.handle()) != braidSuccess)
          fail(r, "scatter" + how + ": " + braidGetLastError(comm));
        gate.open();
        stream.synchronize();
        for (size_t i = 0; i < count && fail.of[r].empty(); ++i)
          if (mine[i] != value(root, static_cast<size_t>(r), i))
            fail(r, "scatter" + how + ": element " + std::to_string(i) + " is " + std::to_string(mine[i]));
      }
    }
    fail(r, asyncFailure(comm));
    if (all) rt.deviceFree(all);
    rt.deviceFree(one);
  });
  for (int r = 0; r < n; ++r) CHECK(fail.of[r] == "");
  // Staged, the root copies every block's range of a piece at once: three pieces for each
  // of its four calls. The direct paths copy nothing and run kernels.
  CHECK(rt.rowCopiesDone.load() - rowsBefore == (std::string(path) == "staged" ? 4 * 3 : 0));
  CHECK((rt.kernels.load() > 0) == (std::string(path) != "staged"));
}

using braid::device::test::everyCollectiveOnDevice;

TEST_CASE("C API: BRAID_CUDA_PATH=direct runs every collective on the device buffers through the kernels",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  // direct: the kernels read and write the registered slots (shared memory, or tcp's
  // staging slots, which carry a job across hosts); ipc: device slots beside the
  // shared-memory ones, which the peers' kernels write (CUDA IPC on a GPU); over tcp, which
  // has no device slots, every rank keeps the registered slots of direct.
  const char* pathName = GENERATE("direct", "ipc");
  CudaPath path(pathName);
  const int n = 3;
  std::vector<std::string> errors(n);
  std::vector<int> registered(n), areas(n);
  const char* transport = GENERATE("loopback", "shm", "tcp");
  INFO(pathName << " over " << transport);
  onRanks(
      n,
      [&](braidComm_t comm, int r) {
        everyCollectiveOnDevice(rt, comm, r, n, errors[r]);
        registered[r] = rt.registered.load();
        areas[r] = rt.slotAreas.load();
      },
      transport);
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
  // The kernels did the work, on slots registered for them, and nothing was staged.
  CHECK(rt.kernels.load() > 0);
  CHECK(rt.copiesDone.load() == 0);
  CHECK(registered[0] > 0);
  const bool ipc = std::string(pathName) == "ipc" && std::string(transport) != "tcp";
  CHECK((areas[0] > 0) == ipc);
  CHECK((rt.slotKernels.load() > 0) == ipc);
  // Everything undone at destroy.
  CHECK(rt.registered.load() == 0);
  CHECK(rt.slotAreas.load() == 0);
  CHECK(rt.imports.load() == 0);
  CHECK(rt.hostLive.load() == 0);
}

TEST_CASE("C API: BRAID_CUDA_PATH=ipc where a rank cannot make device slots keeps the shared-memory slots on every rank",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  CudaPath path("ipc");
  rt.noDeviceSlots = true;
  const int n = 3;
  std::vector<std::string> errors(n);
  onRanks(n, [&](braidComm_t comm, int r) { everyCollectiveOnDevice(rt, comm, r, n, errors[r]); });
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
  CHECK(rt.kernels.load() > 0);
  CHECK(rt.slotKernels.load() == 0);
  CHECK(rt.copiesDone.load() == 0);
  CHECK(rt.slotAreas.load() == 0);
}

TEST_CASE("C API: BRAID_CUDA_PATH=ipc with its areas shared as file descriptors (BRAID_CUDA_MEM_HANDLE=fd)",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  CudaPath path("ipc");
  MemHandle handles("fd");
  // Ranks as threads: each fetches its peers' descriptors from the process's own socket, as
  // ranks in processes of their own do from each other's (device_multiproc.sh).
  const bool withdrawn = GENERATE(false, true);
  rt.withdrawAtOnce = withdrawn;
  INFO((withdrawn ? "each descriptor withdrawn as soon as it is named" : "offered until every peer has it"));
  const int n = 3;
  std::vector<std::string> errors(n);
  std::vector<size_t> offered(n);
  onRanks(
      n,
      [&](braidComm_t comm, int r) {
        everyCollectiveOnDevice(rt, comm, r, n, errors[r]);
        offered[r] = braid::publishedFds();
      },
      "shm");
  for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
  for (int r = 0; r < n; ++r) CHECK(offered[r] == 0);
  CHECK(rt.kernels.load() > 0);
  CHECK(rt.copiesDone.load() == 0);
  if (withdrawn) {
    // No peer could fetch one: every rank keeps the shared-memory slots.
    CHECK(rt.fdImports.load() == 0);
    CHECK(rt.slotKernels.load() == 0);
  } else {
    // Every rank opened each peer's area it sends to: 3 ranks in a ring of shm FIFOs.
    CHECK(rt.fdImports.load() >= n);
    CHECK(rt.slotKernels.load() > 0);
  }
  CHECK(rt.slotAreas.load() == 0);
  CHECK(rt.imports.load() == 0);
  CHECK(braid::publishedFds() == 0);
}

TEST_CASE("C API: with device slots, a rank that passes host buffers where its peer passes device buffers fails",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  CudaPath path("ipc");
  const int n = 2;
  const size_t count = 1000;
  std::vector<std::string> errors(n);
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* dev = static_cast<float*>(rt.deviceAlloc(count * 4));
    std::vector<float> host(count, 1.0f);
    // A first device call on both sets the device slots up.
    if (braidAllReduce(dev, dev, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess)
      errors[r] = std::string("first call: ") + braidGetLastError(comm);
    stream.synchronize();
    // Then rank 0 passes device buffers and rank 1 host buffers to the same allreduce.
    braidResult_t res = r == 0 ? braidAllReduce(dev, dev, count, braidFloat32, braidSum, comm, stream.handle())
                               : braidAllReduce(host.data(), host.data(), count, braidFloat32, braidSum, comm, nullptr);
    stream.synchronize();
    if (r == 1) errors[r] = res == braidSuccess ? "the host call succeeded" : braidGetLastError(comm);
    if (r == 0) {
      // Its call may complete (its peer's host slots held right data); the next one fails.
      braidResult_t next = braidAllReduce(dev, dev, count, braidFloat32, braidSum, comm, stream.handle());
      stream.synchronize();
      braidResult_t async = braidSuccess;
      braidCommGetAsyncError(comm, &async);
      errors[r] = async == braidSuccess && res == braidSuccess && next == braidSuccess ? "no call failed" : "failed";
    }
    rt.deviceFree(dev);
  });
  CHECK(errors[0] == "failed");
  CHECK(errors[1].find("from device buffers where rank 1 runs it on host buffers") != std::string::npos);
}

// An alltoallv on device buffers starts with the ranks' agreement on its pieces, which a
// rank that passes host buffers to the same call does not take part in: both fail at that
// call, naming the two calls, rather than one of them waiting out the timeout.
TEST_CASE("C API: an alltoallv on host buffers where a peer passes device buffers fails on both, naming the calls",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  setenv("BRAID_TIMEOUT", "20", 1);
  const int n = 2;
  const size_t count = 1000;
  std::vector<std::string> errors(n);
  const auto t0 = std::chrono::steady_clock::now();
  onRanks(n, [&](braidComm_t comm, int r) {
    FakeStream stream;
    float* dev = static_cast<float*>(rt.deviceAlloc(4 * count * 4));
    std::vector<float> host(4 * count, 1.0f);
    const size_t counts[2] = {count, count}, displs[2] = {0, count};
    braidResult_t res = r == 0 ? braidAllToAllV(dev, counts, displs, dev + 2 * count, counts, displs, braidFloat32,
                                                comm, stream.handle())
                               : braidAllToAllV(host.data(), counts, displs, host.data() + 2 * count, counts, displs,
                                                braidFloat32, comm, nullptr);
    stream.synchronize();
    if (res == braidSuccess && r == 0) braidCommGetAsyncError(comm, &res);
    errors[r] = res == braidSuccess ? "no failure" : braidGetLastError(comm);
    rt.deviceFree(dev);
  });
  unsetenv("BRAID_TIMEOUT");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].find("mismatch") != std::string::npos);
    CHECK(errors[r].find("alltoallv") != std::string::npos);
  }
  CHECK(errors[0].find("how many pieces an alltoallv on device buffers runs") != std::string::npos);
  CHECK(seconds < 10);
}

TEST_CASE("C API: BRAID_CUDA_PATH=direct where the GPU cannot take it stages instead, an unknown path is refused",
          "[device][cuda]") {
  FakeRuntime rt;
  InstallRuntime installed(&rt);
  const int n = 2;
  // A GPU that cannot reach registered host memory. (A peer through a transport plugin,
  // whose connections offer no memory a kernel could write, is device_multiproc's case: the
  // plugin must be named before a process first looks at its transports.)
  for (const char* transport : {"loopback", "shm"}) {
    INFO(transport);
    rt.noDirect = true;
    CudaPath path("direct");
    std::vector<std::string> errors(n);
    onRanks(
        n, [&](braidComm_t comm, int r) { everyCollectiveOnDevice(rt, comm, r, n, errors[r]); }, transport);
    for (int r = 0; r < n; ++r) CHECK(errors[r] == "");
    CHECK(rt.kernels.load() == 0);
    CHECK(rt.copiesDone.load() > 0);
    CHECK(rt.registered.load() == 0);
  }
  rt.noDirect = false;
  {
    CudaPath path("fast");
    std::vector<std::string> errors(n);
    onRanks(1, [&](braidComm_t comm, int r) {
      float* buf = static_cast<float*>(rt.deviceAlloc(64));
      FakeStream stream;
      if (braidAllReduce(buf, buf, 16, braidFloat32, braidSum, comm, stream.handle()) != braidInvalidArgument)
        errors[r] = "accepted";
      else
        errors[r] = braidGetLastError(comm);
      stream.synchronize();
      rt.deviceFree(buf);
    });
    CHECK(errors[0].find("BRAID_CUDA_PATH=fast on rank 0: expected staged, direct or ipc") != std::string::npos);
  }
}

// The GPU path's host-side orchestration (device/device_queue.h) over real communicators
// (threads of this process on the loopback transport), with a runtime whose "device" is
// host memory and whose streams are host threads (fake_runtime.h). What is checked is what
// CUDA users rely on: the call returns before the stream reaches it, the collective sees the
// work queued before it and later work sees its result, in place stays in place, untouched
// output bytes stay untouched, and a failure never leaves a stream waiting.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "device/device_queue.h"
#include "fake_runtime.h"
#include "support/catch.h"
#include "world/world.h"

using namespace braid;
using braid::device::DeviceCall;
using braid::device::DeviceQueue;
using braid::device::test::FakeRuntime;
using braid::device::test::FakeStream;
using braid::device::test::Gate;
using algorithms::Collective;

namespace {

// A call on `stream` from `input` to `output`, no extra buffers.
DeviceCall deviceCall(device::Stream stream, const void* input, size_t inputBytes, void* output, size_t outputBytes,
                      bool writesWholeOutput, size_t elementBytes = 0) {
  DeviceCall c;
  c.stream = stream;
  c.input = input;
  c.inputBytes = inputBytes;
  c.output = output;
  c.outputBytes = outputBytes;
  c.writesWholeOutput = writesWholeOutput;
  c.elementBytes = elementBytes;
  return c;
}

struct Errors {
  std::mutex mu;
  std::vector<std::string> list;
  void add(const std::string& e) {
    std::lock_guard<std::mutex> l(mu);
    list.push_back(e);
  }
  std::string first() {
    std::lock_guard<std::mutex> l(mu);
    return list.empty() ? "" : list.front() + " (" + std::to_string(list.size()) + " errors)";
  }
};

// One rank's device buffers, filled and read back by "kernels" on its stream.
struct Device {
  FakeRuntime& rt;
  void* p;
  size_t bytes;
  Device(FakeRuntime& r, size_t b) : rt(r), p(r.deviceAlloc(b)), bytes(b) {}
  ~Device() { rt.deviceFree(p); }
  float* f() { return static_cast<float*>(p); }
};

algorithms::Request floatSum(size_t count, bool inPlace, Collective coll = Collective::kAllReduce) {
  algorithms::Request req;
  req.coll = coll;
  req.count = count;
  req.dtype = DataType::kFloat32;
  req.op = ReduceOp::kSum;
  req.inPlace = inPlace;
  return req;
}

DeviceQueue::HostRun hostRun(core::Communicator& comm, algorithms::Request req) {
  return [&comm, req](const void* in, void* out, const std::vector<void*>&) { return comm.run(req, in, out); };
}

}  // namespace

TEST_CASE("device queue: allreduce on device buffers runs in stream order and returns before the stream reaches it",
          "[device][cuda]") {
  FakeRuntime rt;
  Errors errors;
  braid::testing::WorldOptions o;
  o.nranks = 3;
  for (size_t count : {size_t{7}, size_t{(1u << 20) + 3}}) {
    for (bool inPlace : {false, true}) {
      Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
        const int r = comm.rank();
        const std::string where = "rank " + std::to_string(r) + " count " + std::to_string(count) +
                                  (inPlace ? " in place" : "");
        FakeStream stream;
        DeviceQueue q(rt, 30);
        Device in(rt, count * 4), out(rt, count * 4);
        float* dst = inPlace ? in.f() : out.f();
        std::vector<float> result;
        Gate gate;
        gate.closeOn(stream);
        // A "kernel" before the collective writes its input; one after reads its output.
        stream.enqueue([&] {
          for (size_t i = 0; i < count; ++i) in.f()[i] = static_cast<float>(r + 1) * static_cast<float>(i % 97);
        });
        const algorithms::Request req = floatSum(count, inPlace);
        DeviceCall call = deviceCall(stream.handle(), in.p, count * 4, dst, count * 4, true);
        Status st = q.enqueue(call, hostRun(comm, req));
        if (!st.isOk()) return errors.add(where + ": enqueue: " + st.toString());
        stream.enqueue([&] { result.assign(dst, dst + count); });
        // Nothing ran yet: the stream is held at the gate, and enqueue did not wait for it.
        if (!result.empty()) errors.add(where + ": the stream ran past the gate");
        gate.open();
        stream.synchronize();
        q.drain();
        if (!q.asyncError().isOk()) errors.add(where + ": " + q.asyncError().toString());
        if (result.size() != count) return errors.add(where + ": the kernel after the collective did not run");
        for (size_t i = 0; i < count; ++i) {
          const float want = 6.0f * static_cast<float>(i % 97);
          if (result[i] != want)
            return errors.add(where + ": element " + std::to_string(i) + " is " + std::to_string(result[i]) +
                              ", expected " + std::to_string(want));
        }
      });
      REQUIRE(init.isOk());
    }
  }
  CHECK(errors.first() == "");
  CHECK(rt.markersLive.load() == 0);
}

TEST_CASE("device queue: in-place allgather and reduce-scatter, broadcast, and an allgatherv whose gaps stay untouched",
          "[device][cuda]") {
  FakeRuntime rt;
  Errors errors;
  braid::testing::WorldOptions o;
  o.nranks = 4;
  const size_t n = 4, count = 100003;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank();
    const size_t ur = static_cast<size_t>(r);
    FakeStream stream;
    DeviceQueue q(rt, 30);
    auto fail = [&](const std::string& what) { errors.add("rank " + std::to_string(r) + ": " + what); };

    // Allgather in place: the input is this rank's block of the output.
    {
      Device buf(rt, n * count * 4);
      float* mine = buf.f() + ur * count;
      stream.enqueue([&] {
        for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(r * 1000000 + static_cast<int>(i));
      });
      algorithms::Request req;
      req.coll = Collective::kAllGather;
      req.count = count;
      req.dtype = DataType::kFloat32;
      req.inPlace = true;
      Status st = q.enqueue(deviceCall(stream.handle(), mine, count * 4, buf.p, n * count * 4, true), hostRun(comm, req));
      if (!st.isOk()) fail("allgather: " + st.toString());
      std::vector<float> got;
      stream.enqueue([&] { got.assign(buf.f(), buf.f() + n * count); });
      stream.synchronize();
      for (size_t b = 0; b < n && got.size() == n * count; ++b)
        for (size_t i = 0; i < count; ++i)
          if (got[b * count + i] != static_cast<float>(static_cast<int>(b) * 1000000 + static_cast<int>(i))) {
            fail("allgather: block " + std::to_string(b) + " element " + std::to_string(i));
            b = n;
            break;
          }
    }
    // Reduce-scatter in place: the output is this rank's block of the input.
    {
      Device buf(rt, n * count * 4);
      stream.enqueue([&] {
        for (size_t i = 0; i < n * count; ++i) buf.f()[i] = static_cast<float>(i % 1000);
      });
      const algorithms::Request req = floatSum(count, true, Collective::kReduceScatter);
      float* mine = buf.f() + ur * count;
      Status st = q.enqueue(deviceCall(stream.handle(), buf.p, n * count * 4, mine, count * 4, true), hostRun(comm, req));
      if (!st.isOk()) fail("reduce-scatter: " + st.toString());
      std::vector<float> got;
      stream.enqueue([&] { got.assign(mine, mine + count); });
      stream.synchronize();
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != 4.0f * static_cast<float>((ur * count + i) % 1000)) {
          fail("reduce-scatter: element " + std::to_string(i));
          break;
        }
    }
    // Broadcast from rank 2, in place everywhere (non-roots stage their buffer as input).
    {
      Device buf(rt, count * 4);
      stream.enqueue([&] {
        for (size_t i = 0; i < count; ++i) buf.f()[i] = r == 2 ? static_cast<float>(i) : -1.0f;
      });
      algorithms::Request req;
      req.coll = Collective::kBroadcast;
      req.count = count;
      req.dtype = DataType::kFloat32;
      req.root = 2;
      req.inPlace = true;
      Status st = q.enqueue(deviceCall(stream.handle(), buf.p, count * 4, buf.p, count * 4, true), hostRun(comm, req));
      if (!st.isOk()) fail("broadcast: " + st.toString());
      std::vector<float> got;
      stream.enqueue([&] { got.assign(buf.f(), buf.f() + count); });
      stream.synchronize();
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != static_cast<float>(i)) {
          fail("broadcast: element " + std::to_string(i));
          break;
        }
    }
    // Allgatherv with a gap after every block: the gaps keep what the device had.
    {
      std::vector<size_t> counts(n), displs(n);
      size_t at = 0;
      for (size_t b = 0; b < n; ++b) {
        counts[b] = 1000 + b * 7;
        displs[b] = at;
        at += counts[b] + 5;
      }
      Device in(rt, counts[ur] * 4), out(rt, at * 4);
      stream.enqueue([&] {
        for (size_t i = 0; i < counts[ur]; ++i) in.f()[i] = static_cast<float>(r * 10000 + static_cast<int>(i));
        for (size_t i = 0; i < at; ++i) out.f()[i] = -7.0f;
      });
      algorithms::Request req;
      req.coll = Collective::kAllGatherV;
      req.dtype = DataType::kFloat32;
      req.counts = counts;
      req.displs = displs;
      Status st = q.enqueue(deviceCall(stream.handle(), in.p, counts[ur] * 4, out.p, at * 4, false), hostRun(comm, req));
      if (!st.isOk()) fail("allgatherv: " + st.toString());
      std::vector<float> got;
      stream.enqueue([&] { got.assign(out.f(), out.f() + at); });
      stream.synchronize();
      for (size_t b = 0; b < n && got.size() == at; ++b) {
        for (size_t i = 0; i < counts[b]; ++i)
          if (got[displs[b] + i] != static_cast<float>(static_cast<int>(b) * 10000 + static_cast<int>(i))) {
            fail("allgatherv: block " + std::to_string(b));
            break;
          }
        for (size_t i = 0; i < 5; ++i)
          if (got[displs[b] + counts[b] + i] != -7.0f) {
            fail("allgatherv: gap after block " + std::to_string(b) + " was written");
            break;
          }
      }
    }
    q.drain();
    if (!q.asyncError().isOk()) fail(q.asyncError().toString());
  });
  REQUIRE(init.isOk());
  CHECK(errors.first() == "");
}

TEST_CASE("device queue: a failed collective releases the stream and fails the next enqueue", "[device][cuda]") {
  FakeRuntime rt;
  FakeStream stream;
  DeviceQueue q(rt, 30);
  Device a(rt, 64), b(rt, 64);
  int ran = 0;
  auto done = std::make_shared<device::DeviceDone>(30);
  Status bad = q.enqueue(
      deviceCall(stream.handle(), a.p, 64, b.p, 64, true),
      [&](const void*, void*, const std::vector<void*>&) {
        ++ran;
        return Status(Code::kRemoteError, "rank 1 died", 1);
      },
      nullptr, done);
  REQUIRE(bad.isOk());  // enqueued; the failure comes later
  bool after = false;
  stream.enqueue([&] { after = true; });
  // A Work waiting on the call gets its failure.
  Status waited = done->wait();
  CHECK(waited.code() == Code::kRemoteError);
  CHECK(waited.rank() == 1);
  stream.synchronize();  // returns: the flag was stored although the collective failed
  q.drain();
  CHECK(after);
  CHECK(ran == 1);
  Status async = q.asyncError();
  CHECK(async.code() == Code::kRemoteError);
  CHECK(async.rank() == 1);
  Status next = q.enqueue(deviceCall(stream.handle(), a.p, 64, b.p, 64, true), [&](const void*, void*, const std::vector<void*>&) {
    ++ran;
    return Status::ok();
  });
  CHECK(next.code() == Code::kRemoteError);
  stream.synchronize();
  q.drain();
  CHECK(ran == 1);
}

TEST_CASE("device queue: a runtime call that fails fails enqueue, and nothing waits", "[device][cuda]") {
  FakeRuntime rt;
  FakeStream stream;
  DeviceQueue q(rt, 30);
  Device a(rt, 64), b(rt, 64);
  rt.failCopies = true;
  Status st = q.enqueue(deviceCall(stream.handle(), a.p, 64, b.p, 64, true), [](const void*, void*, const std::vector<void*>&) { return Status::ok(); });
  CHECK(st.code() == Code::kSystemError);
  CHECK(st.message().find("refused on purpose") != std::string::npos);
  stream.synchronize();
  rt.failCopies = false;
  bool ran = false;
  st = q.enqueue(deviceCall(stream.handle(), a.p, 64, b.p, 64, true), [&](const void*, void*, const std::vector<void*>&) {
    ran = true;
    return Status::ok();
  });
  CHECK(st.isOk());
  stream.synchronize();
  q.drain();
  CHECK(ran);
}

TEST_CASE("device queue: a stream held beyond the timeout fails the call, then runs on", "[device][cuda]") {
  FakeRuntime rt;
  FakeStream stream;
  DeviceQueue q(rt, 0.3);
  Device a(rt, 64), b(rt, 64);
  Gate gate;
  gate.closeOn(stream);
  bool ran = false;
  REQUIRE(q.enqueue(deviceCall(stream.handle(), a.p, 64, b.p, 64, true), [&](const void*, void*, const std::vector<void*>&) {
            ran = true;
            return Status::ok();
          }).isOk());
  q.drain();
  CHECK_FALSE(ran);
  CHECK(q.asyncError().code() == Code::kTimeout);
  CHECK(q.asyncError().message().find("did not reach the collective") != std::string::npos);
  gate.open();
  stream.synchronize();  // the flag was stored: the stream is not left waiting
}

TEST_CASE("device queue: staging blocks are reused, and everything is returned at the end", "[device][cuda]") {
  FakeRuntime rt;
  {
    FakeStream stream;
    DeviceQueue q(rt, 30);
    Device a(rt, 1 << 20), b(rt, 1 << 20);
    for (int i = 0; i < 50; ++i) {
      REQUIRE(q.enqueue(deviceCall(stream.handle(), a.p, 1 << 20, b.p, 1 << 20, true),
                        [](const void* in, void* out, const std::vector<void*>&) {
                          std::memcpy(out, in, 1 << 20);
                          return Status::ok();
                        }).isOk());
      if (i % 10 == 9) {
        stream.synchronize();
        q.drain();
      }
    }
    stream.synchronize();
    q.drain();
    CHECK(rt.hostAllocs.load() <= 12);
  }
  CHECK(rt.hostLive.load() == 0);
  CHECK(rt.markersLive.load() == 0);
}

TEST_CASE("device runtime: without a GPU the CUDA runtime says why, and every pointer is host memory", "[device][cuda]") {
  device::Runtime& rt = device::cudaRuntime();
  Status st = rt.available();
  if (st.isOk()) {
    WARN("a GPU is visible here: the no-driver path is not what runs");
    return;
  }
  INFO(st.message());
  CHECK(st.code() == Code::kSystemError);
  CHECK((st.message().find("CUDA") != std::string::npos || st.message().find("without the CUDA toolkit") != std::string::npos));
  int x = 0;
  CHECK(rt.pointerInfo(&x).kind == device::MemoryKind::kHost);
  CHECK(rt.pointerInfo(nullptr).kind == device::MemoryKind::kHost);
  CHECK(device::runtime().name() == std::string(rt.name()));
}

// Calls on one stream share one staging block however many are in flight (the stream
// orders every use of it); a larger call grows it; another stream gets its own. Every
// result must still be its own call's: each "collective" doubles its input.
TEST_CASE("device queue: calls in flight on one stream share its staging block, and each result is its own",
          "[device][cuda]") {
  FakeRuntime rt;
  {
    FakeStream s1, s2;
    DeviceQueue q(rt, 30);
    Gate gate1, gate2;
    gate1.closeOn(s1);
    gate2.closeOn(s2);
    const auto doubled = [](size_t n) {
      return [n](const void* in, void* out, const std::vector<void*>&) {
        for (size_t i = 0; i < n; ++i) static_cast<float*>(out)[i] = 2 * static_cast<const float*>(in)[i];
        return Status::ok();
      };
    };
    struct Call {
      std::unique_ptr<Device> in, out;
      size_t n;
      bool inPlace;
      float base;
    };
    std::vector<Call> calls;
    for (int i = 0; i < 24; ++i) {
      // Sizes grow at call 8 and shrink again after; in place every third call; every
      // fourth on the second stream.
      const size_t n = i >= 8 && i < 12 ? (300u << 10) : (40u << 10) + 7 * static_cast<size_t>(i);
      Call c{std::make_unique<Device>(rt, n * 4), nullptr, n, i % 3 == 0, 1000.0f * static_cast<float>(i)};
      for (size_t k = 0; k < n; ++k) c.in->f()[k] = c.base + static_cast<float>(k % 251);
      if (!c.inPlace) c.out = std::make_unique<Device>(rt, n * 4);
      void* dst = c.inPlace ? c.in->p : c.out->p;
      FakeStream& st = i % 4 == 3 ? s2 : s1;
      REQUIRE(q.enqueue(deviceCall(st.handle(), c.in->p, n * 4, dst, n * 4, true), doubled(n)).isOk());
      calls.push_back(std::move(c));
    }
    gate1.open();
    gate2.open();
    s1.synchronize();
    s2.synchronize();
    q.drain();
    for (size_t i = 0; i < calls.size(); ++i) {
      const Call& c = calls[i];
      const float* got = c.inPlace ? c.in->f() : c.out->f();
      size_t bad = 0;
      for (size_t k = 0; k < c.n; ++k) bad += got[k] != 2 * (c.base + static_cast<float>(k % 251));
      INFO("call " << i);
      CHECK(bad == 0);
    }
    // Each stream grows its block twice: an in-place call first (one buffer), then an
    // out-of-place one (two), then calls 8-11's larger size, which fits all that follow.
    // A block per call in flight would have been 24.
    CHECK(rt.hostAllocs.load() == 6);
  }
  CHECK(rt.hostLive.load() == 0);
  CHECK(rt.markersLive.load() == 0);
}

// A large allreduce is staged in pieces: the proxy runs the collective on the first piece
// while the stream is still copying the later ones in (copies here take 40 ms each), every
// element comes out right, in place and out of place, with a last piece that is shorter.
TEST_CASE("device queue: a large allreduce is staged in pieces that overlap the copies", "[device][cuda]") {
  FakeRuntime rt;
  rt.copyDelayUs = 40000;
  Errors errors;
  braid::testing::WorldOptions o;
  o.nranks = 2;
  const size_t count = (DeviceQueue::kPieceMin + DeviceQueue::kPieceBytes) / 4 + 1001;  // 3 pieces, the last short
  const size_t pieces = (count * 4 + DeviceQueue::kPieceBytes - 1) / DeviceQueue::kPieceBytes;
  for (bool inPlace : {false, true}) {
    std::atomic<int> firstPieceSawCopies{-1};
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const int r = comm.rank();
      const std::string where = "rank " + std::to_string(r) + (inPlace ? " in place" : "");
      FakeStream stream;
      DeviceQueue q(rt, 30);
      Device in(rt, count * 4), out(rt, count * 4);
      for (size_t i = 0; i < count; ++i) in.f()[i] = static_cast<float>((r + 1) * (i % 1000));
      float* dst = inPlace ? in.f() : out.f();
      const algorithms::Request req = floatSum(count, inPlace);
      std::atomic<int> piecesRun{0};
      DeviceQueue::PieceRun pieceRun = [&](const void* pin, void* pout, size_t first, size_t elements) {
        if (piecesRun.fetch_add(1) == 0 && r == 0) firstPieceSawCopies = rt.copiesDone.load();
        algorithms::Request piece = req;
        piece.count = elements;
        return comm.run(piece, static_cast<const float*>(pin) + first, static_cast<float*>(pout) + first);
      };
      DeviceCall call = deviceCall(stream.handle(), in.p, count * 4, dst, count * 4, true, 4);
      Status st = q.enqueue(call, hostRun(comm, req), pieceRun);
      if (!st.isOk()) errors.add(where + ": enqueue: " + st.toString());
      stream.synchronize();
      q.drain();
      if (piecesRun.load() != static_cast<int>(pieces))
        errors.add(where + ": " + std::to_string(piecesRun.load()) + " pieces run, expected " + std::to_string(pieces));
      for (size_t i = 0; i < count; ++i) {
        if (dst[i] != static_cast<float>(3 * (i % 1000))) {
          errors.add(where + ": element " + std::to_string(i) + " is " + std::to_string(dst[i]));
          break;
        }
      }
    });
    REQUIRE(init.isOk());
    CHECK(errors.first() == "");
    // Both ranks' copies count: piece 0 ran before the last piece of either rank was in.
    INFO("copies done when piece 0 ran: " << firstPieceSawCopies.load());
    CHECK(firstPieceSawCopies.load() >= 1);
    CHECK(firstPieceSawCopies.load() < static_cast<int>(2 * pieces));
    rt.copiesDone = 0;
  }
  CHECK(rt.markersLive.load() == 0);
}

// A CUDA stream holds a bounded amount of queued work: a call that queues more blocks until
// the stream drains, and the stream drains only as the proxy releases its flag waits. A loop
// of calls in pieces fills such a stream many times over (on an H200, 128 MiB allreduces of
// 32 pieces hung when enqueue held the lock the proxy takes between jobs), and one call's
// copies back can fill it alone (a copy per block per piece, or a group's many buffers).
// Here a stream holds 2 operations (a call in 3 pieces queues 13) or 1 (a whole call
// queues 5): every call completes with its own result. A watchdog ends the process on a hang.
TEST_CASE("device queue: calls that overfill a stream's bounded queue of work complete", "[device][cuda]") {
  const bool pieces = GENERATE(true, false);
  const size_t capacity = pieces ? 2 : 1;
  INFO((pieces ? "in pieces" : "whole") << ", stream capacity " << capacity);
  FakeRuntime rt;
  Errors errors;
  braid::testing::WorldOptions o;
  o.nranks = 2;
  const size_t count = pieces ? (DeviceQueue::kPieceMin + DeviceQueue::kPieceBytes) / 4 + 1001 : 50000;
  constexpr int kCalls = 6;
  std::mutex doneMu;
  std::condition_variable doneCv;
  bool finished = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(doneMu);
    if (!doneCv.wait_for(l, std::chrono::seconds(60), [&] { return finished; })) {
      std::fprintf(stderr, "device queue: calls on a bounded stream hung for 60 s\n");
      std::_Exit(1);
    }
  });
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank();
    FakeStream stream(capacity);
    DeviceQueue q(rt, 30);
    std::vector<std::unique_ptr<Device>> outs;
    Device in(rt, count * 4);
    for (size_t i = 0; i < count; ++i) in.f()[i] = static_cast<float>((r + 1) * (i % 1000));
    const algorithms::Request req = floatSum(count, false);
    DeviceQueue::PieceRun pieceRun = [&](const void* pin, void* pout, size_t first, size_t elements) {
      algorithms::Request piece = req;
      piece.count = elements;
      return comm.run(piece, static_cast<const float*>(pin) + first, static_cast<float*>(pout) + first);
    };
    for (int c = 0; c < kCalls; ++c) {
      outs.push_back(std::make_unique<Device>(rt, count * 4));
      DeviceCall call = deviceCall(stream.handle(), in.p, count * 4, outs.back()->p, count * 4, true, 4);
      Status st = q.enqueue(call, hostRun(comm, req), pieceRun);
      if (!st.isOk()) errors.add("rank " + std::to_string(r) + " call " + std::to_string(c) + ": " + st.toString());
    }
    stream.synchronize();
    q.drain();
    for (int c = 0; c < kCalls; ++c) {
      const float* dst = outs[static_cast<size_t>(c)]->f();
      for (size_t i = 0; i < count; ++i) {
        if (dst[i] != static_cast<float>(3 * (i % 1000))) {
          errors.add("rank " + std::to_string(r) + " call " + std::to_string(c) + ": element " + std::to_string(i) +
                     " is " + std::to_string(dst[i]));
          break;
        }
      }
    }
  });
  {
    std::lock_guard<std::mutex> l(doneMu);
    finished = true;
  }
  doneCv.notify_all();
  watchdog.join();
  REQUIRE(init.isOk());
  CHECK(errors.first() == "");
  CHECK(rt.markersLive.load() == 0);
}

// Allgather, reduce-scatter and alltoall are blockwise: a piece is the same range of every
// rank's block, copied at once (strided) on a side that holds the blocks, and run as a
// v-variant over those ranges. Three ranks, three pieces (the last short), in place and out
// of place.
TEST_CASE("device queue: a large allgather, reduce-scatter or alltoall is staged in pieces of every block",
          "[device][cuda]") {
  FakeRuntime rt;
  rt.copyDelayUs = 5000;
  Errors errors;
  braid::testing::WorldOptions o;
  o.nranks = 3;
  const size_t n = 3;
  const size_t perBlock = (DeviceQueue::kPieceBytes / n + 4095) / 4096 * 4096;  // one piece's range of a block
  const size_t count = (2 * perBlock + perBlock / 2) / 4 + 3;                  // per block: 3 pieces, the last short
  const size_t pieces = (count * 4 + perBlock - 1) / perBlock;
  REQUIRE(pieces == 3);
  // Element i of block b of rank r's input, and what the output must hold.
  auto input = [](size_t r, size_t b, size_t i) { return static_cast<float>((r + 1) * (b * 7 + i % 1000)); };
  for (Collective coll : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll}) {
    for (bool inPlace : {false, true}) {
      const bool inBlocks = coll != Collective::kAllGather, outBlocks = coll != Collective::kReduceScatter;
      std::atomic<int> firstPieceSawCopies{-1};
      Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        const std::string where = std::string(algorithms::collectiveName(coll)) + " rank " + std::to_string(r) +
                                  (inPlace ? " in place" : "");
        FakeStream stream;
        DeviceQueue q(rt, 30);
        Device all(rt, n * count * 4), other(rt, n * count * 4);
        // `all` is the side holding the blocks; in place, a side of one block is this rank's
        // block of it (alltoall's two sides are the one buffer).
        float* blocks = all.f();
        float* elsewhere = inPlace ? (inBlocks && outBlocks ? blocks : blocks + r * count) : other.f();
        float* in = inBlocks ? blocks : elsewhere;
        float* out = inBlocks ? elsewhere : blocks;
        for (size_t b = 0; b < (inBlocks ? n : 1); ++b)
          for (size_t i = 0; i < count; ++i) in[b * count + i] = input(r, b, i);
        const algorithms::Request req = floatSum(count, inPlace, coll);
        std::atomic<int> piecesRun{0};
        DeviceQueue::PieceRun pieceRun = [&](const void* pin, void* pout, size_t first, size_t elements) {
          if (piecesRun.fetch_add(1) == 0 && r == 0) firstPieceSawCopies = rt.copiesDone.load();
          algorithms::Request piece = req;
          piece.coll = coll == Collective::kAllGather       ? Collective::kAllGatherV
                       : coll == Collective::kReduceScatter ? Collective::kReduceScatterV
                                                            : Collective::kAllToAllV;
          piece.count = elements;
          piece.counts.assign(n, elements);
          for (size_t b = 0; b < n; ++b) piece.displs.push_back(b * count + first);
          piece.sendCounts = piece.counts;
          piece.sendDispls = piece.displs;
          return comm.run(piece, static_cast<const float*>(pin) + (inBlocks ? 0 : first),
                          static_cast<float*>(pout) + (outBlocks ? 0 : first));
        };
        DeviceCall call = deviceCall(stream.handle(), in, (inBlocks ? n : 1) * count * 4, out,
                                     (outBlocks ? n : 1) * count * 4, true, 4);
        call.blocks = n;
        Status st = q.enqueue(call, hostRun(comm, req), pieceRun);
        if (!st.isOk()) errors.add(where + ": enqueue: " + st.toString());
        stream.synchronize();
        q.drain();
        if (piecesRun.load() != static_cast<int>(pieces))
          errors.add(where + ": " + std::to_string(piecesRun.load()) + " pieces run, expected " +
                     std::to_string(pieces));
        for (size_t b = 0; b < (outBlocks ? n : 1); ++b) {
          for (size_t i = 0; i < count; ++i) {
            const float want = coll == Collective::kAllGather       ? input(b, 0, i)
                               : coll == Collective::kReduceScatter ? 6 * input(0, r, i)
                                                                    : input(b, r, i);
            if (out[b * count + i] != want) {
              errors.add(where + ": block " + std::to_string(b) + " element " + std::to_string(i) + " is " +
                         std::to_string(out[b * count + i]) + ", expected " + std::to_string(want));
              b = n;
              break;
            }
          }
        }
      });
      REQUIRE(init.isOk());
      CHECK(errors.first() == "");
      // Piece 0 ran before every copy of the call was in (one per piece and rank, of one
      // block or of every block at once), and each piece of the blocks was one copy per side.
      INFO("copies done when piece 0 ran: " << firstPieceSawCopies.load());
      CHECK(firstPieceSawCopies.load() >= 1);
      CHECK(firstPieceSawCopies.load() < static_cast<int>(n * pieces));
      CHECK(rt.rowCopiesDone.load() == static_cast<int>(n * pieces * (inBlocks && outBlocks ? 2 : 1)));
      rt.copiesDone = 0;
      rt.rowCopiesDone = 0;
    }
  }
  CHECK(rt.markersLive.load() == 0);
}

// A piece that fails (a peer died during piece 1 of 3) releases the whole call's waits on
// the stream, leaves the later pieces unrun, and fails the next enqueue with its error.
TEST_CASE("device queue: a failed piece releases the stream and runs no later piece", "[device][cuda]") {
  FakeRuntime rt;
  {
    FakeStream stream;
    DeviceQueue q(rt, 30);
    const size_t bytes = DeviceQueue::kPieceMin + DeviceQueue::kPieceBytes;  // 3 pieces
    Device a(rt, bytes), b(rt, bytes);
    int pieces = 0;
    DeviceQueue::PieceRun pieceRun = [&](const void*, void*, size_t, size_t) {
      return ++pieces == 2 ? Status(Code::kRemoteError, "rank 1 died", 1) : Status::ok();
    };
    const auto whole = [](const void*, void*, const std::vector<void*>&) { return Status::ok(); };
    REQUIRE(q.enqueue(deviceCall(stream.handle(), a.p, bytes, b.p, bytes, true, 4), whole, pieceRun).isOk());
    bool after = false;
    stream.enqueue([&] { after = true; });
    stream.synchronize();  // returns: every wait of the call was released
    q.drain();
    CHECK(after);
    CHECK(pieces == 2);
    CHECK(q.asyncError().code() == Code::kRemoteError);
    CHECK(q.asyncError().rank() == 1);
    CHECK(q.enqueue(deviceCall(stream.handle(), a.p, bytes, b.p, bytes, true, 4), whole, pieceRun).code() ==
          Code::kRemoteError);
    stream.synchronize();
    CHECK(pieces == 2);
  }
  CHECK(rt.markersLive.load() == 0);
  CHECK(rt.hostLive.load() == 0);
}

#pragma once
// Every collective on device buffers through the C API, checked element by element: shared
// by the device path's tests with ranks as threads (test_device_api.cc) and as processes
// (device_rank.cc). Needs a FakeRuntime installed; no test framework.

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "fake_runtime.h"

namespace braid::device::test {

// Every collective on device buffers, checked element by element; `errors[r]` gets the
// first difference. Used by the direct path's tests, which also look at how it ran.
inline void everyCollectiveOnDevice(FakeRuntime& rt, braidComm_t comm, int r, int n, std::string& error) {
  FakeStream stream;
  const size_t count = 40009;  // odd: every rank's block has a ragged tail
  float* in = static_cast<float*>(rt.deviceAlloc(count * n * 4));
  float* out = static_cast<float*>(rt.deviceAlloc(count * n * 4));
  int32_t* iin = static_cast<int32_t*>(rt.deviceAlloc(count * 4));
  const auto fill = [&] {
    for (size_t i = 0; i < count * n; ++i) in[i] = static_cast<float>((r + 1) * (i % 1000));
    for (size_t i = 0; i < count * n; ++i) out[i] = -1.0f;
    for (size_t i = 0; i < count; ++i) iin[i] = static_cast<int32_t>((i * 7 + r * 13) % 1001) - 500;
  };
  const float sumRanks = static_cast<float>(n * (n + 1) / 2);
  const auto check = [&](const char* what, const float* got, size_t len, const auto& want) {
    for (size_t i = 0; i < len && error.empty(); ++i)
      if (got[i] != want(i))
        error = std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                ", expected " + std::to_string(want(i));
  };
  const auto step = [&](const char* what, const auto& call) {
    if (!error.empty()) return false;
    fill();
    if (call() != braidSuccess) error = std::string(what) + ": " + braidGetLastError(comm);
    stream.synchronize();
    return error.empty();
  };
  const auto v = [](size_t i) { return static_cast<float>(i % 1000); };

  if (step("allreduce sum", [&] { return braidAllReduce(in, out, count, braidFloat32, braidSum, comm, stream.handle()); }))
    check("allreduce sum", out, count, [&](size_t i) { return sumRanks * v(i); });
  if (step("allreduce avg in place",
           [&] { return braidAllReduce(in, in, count, braidFloat32, braidAvg, comm, stream.handle()); }))
    check("allreduce avg in place", in, count, [&](size_t i) { return sumRanks / static_cast<float>(n) * v(i); });
  float half = 0.5f;
  braidRedOp_t preMul;
  if (error.empty() && braidRedOpCreatePreMulSum(&preMul, &half, braidFloat32, comm) != braidSuccess)
    error = std::string("premulsum: ") + braidGetLastError(comm);
  if (step("allreduce premulsum",
           [&] { return braidAllReduce(in, out, count, braidFloat32, preMul, comm, stream.handle()); }))
    check("allreduce premulsum", out, count, [&](size_t i) { return 0.5f * sumRanks * v(i); });
  if (error.empty()) braidRedOpDestroy(preMul, comm);
  if (step("allreduce int32 max", [&] {
        return braidAllReduce(iin, iin, count, braidInt32, braidMax, comm, stream.handle());
      })) {
    for (size_t i = 0; i < count && error.empty(); ++i) {
      int32_t want = INT32_MIN;
      for (int q = 0; q < n; ++q) want = std::max(want, static_cast<int32_t>((i * 7 + q * 13) % 1001) - 500);
      if (iin[i] != want) error = "allreduce int32 max: element " + std::to_string(i);
    }
  }
  if (step("allgather", [&] { return braidAllGather(in, out, count, braidFloat32, comm, stream.handle()); }))
    check("allgather", out, count * n, [&](size_t i) { return static_cast<float>(i / count + 1) * v(i % count); });
  if (step("reduce_scatter",
           [&] { return braidReduceScatter(in, out, count, braidFloat32, braidSum, comm, stream.handle()); }))
    check("reduce_scatter", out, count, [&](size_t i) { return sumRanks * v(r * count + i); });
  // In place: this rank's block of the allgather's output is its input, and the
  // reduce-scatter's result lands in this rank's block of its input.
  if (step("allgather in place", [&] {
        return braidAllGather(in + r * count, in, count, braidFloat32, comm, stream.handle());
      }))
    check("allgather in place", in, count * n,
          [&](size_t i) { return static_cast<float>(i / count + 1) * v(i); });
  if (step("reduce_scatter in place", [&] {
        return braidReduceScatter(in, in + r * count, count, braidFloat32, braidSum, comm, stream.handle());
      }))
    check("reduce_scatter in place", in + r * count, count, [&](size_t i) { return sumRanks * v(r * count + i); });
  if (step("broadcast", [&] { return braidBroadcast(in, out, count, braidFloat32, 1, comm, stream.handle()); }))
    check("broadcast", out, count, [&](size_t i) { return 2.0f * v(i); });
  if (step("reduce", [&] { return braidReduce(in, out, count, braidFloat32, braidSum, 2 % n, comm, stream.handle()); }) &&
      r == 2 % n)
    check("reduce", out, count, [&](size_t i) { return sumRanks * v(i); });
  if (step("alltoall", [&] { return braidAllToAll(in, out, count, braidFloat32, comm, stream.handle()); }))
    check("alltoall", out, count * n,
          [&](size_t i) { return static_cast<float>(i / count + 1) * v(r * count + i % count); });
  // Alltoallv: rank r sends rank j count - 1000 * ((r + j) % 3) elements, its blocks back to
  // back in rank order, and receives them the same way.
  {
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    const auto pair = [&](int from, int to) { return count - 1000 * static_cast<size_t>((from + to) % 3); };
    for (int j = 0, s = 0, t = 0; j < n; ++j) {
      sc[j] = pair(r, j);
      rc[j] = pair(j, r);
      sd[j] = s;
      rd[j] = t;
      s += static_cast<int>(sc[j]);
      t += static_cast<int>(rc[j]);
    }
    if (step("alltoallv", [&] {
          return braidAllToAllV(in, sc.data(), sd.data(), out, rc.data(), rd.data(), braidFloat32, comm, stream.handle());
        })) {
      // Block j holds what rank j sent here: its input from its displacement for this rank.
      for (int j = 0; j < n && error.empty(); ++j) {
        size_t at = 0;
        for (int q = 0; q < r; ++q) at += pair(j, q);
        check("alltoallv", out + rd[j], rc[j], [&](size_t i) { return static_cast<float>(j + 1) * v(at + i); });
      }
    }
  }
  // A ring of sends and receives, grouped.
  if (step("send/recv", [&] {
        braidGroupStart();
        braidSend(in, count, braidFloat32, (r + 1) % n, comm, stream.handle());
        braidRecv(out, count, braidFloat32, (r + n - 1) % n, comm, stream.handle());
        return braidGroupEnd();
      }))
    check("send/recv", out, count, [&](size_t i) { return static_cast<float>((r + n - 1) % n + 1) * v(i); });
  braidResult_t async = braidInternalError;
  braidCommGetAsyncError(comm, &async);
  if (async != braidSuccess) error += std::string("; async error: ") + braidGetLastError(comm);
  rt.deviceFree(in);
  rt.deviceFree(out);
  rt.deviceFree(iin);
}


}  // namespace braid::device::test

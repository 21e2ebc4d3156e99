// One rank of a job whose device path runs on the host-memory runtime, for the direct paths
// across processes (device_multiproc.sh under braidrun): every collective on "device"
// buffers, then one line with what it found and how the path ran, and one more after
// destroy with what is left.
//   DEVICE rank=R error=<first difference or none> kernels=K slotKernels=S areas=A registered=G copies=C rdmaFlushes=F
//     fdImports=I offered=O
//   AFTER rank=R areas=A imports=I registered=G hostLive=H pid=P
// (P names the process's device slot segments, /dev/shm/braid-fake-slots-P-*.)
// Exits 1 on any error. DEVICE_NO_RDMA=R makes rank R's runtime refuse GPUDirect RDMA.
//
// With DEVICE_DIE_RANK=V instead: every rank runs one device allreduce, then rank V kills
// itself (SIGKILL) and the others keep calling until a call or the async error query fails:
//   SURVIVOR rank=R result=<braidResult_t> calls=C ms=<from the kill's moment to the failure> error=<message>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "braid/braid.h"
#include "device_checks.h"
#include "fake_runtime.h"

namespace {

// One rank dies after a first device allreduce; each survivor reports how its device calls
// failed. A survivor that never fails is stopped by braidrun's grace, reporting nothing.
int dieOrSurvive(braid::device::test::FakeRuntime& rt, braidComm_t comm, int rank, int victim) {
  braid::device::test::FakeStream stream;
  const size_t count = 1 << 18;
  float* buf = static_cast<float*>(rt.deviceAlloc(count * 4));
  if (braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle()) != braidSuccess) {
    std::printf("SURVIVOR rank=%d result=first-call error=%s\n", rank, braidGetLastError(comm));
    return 1;
  }
  stream.synchronize();
  // Every rank past its first call, so that the victim dies while the others are in theirs.
  if (braidBarrier(comm) != braidSuccess) return 1;
  if (rank == victim) {
    // Its device slots die with it on a GPU; the fake's are shared-memory segments, which
    // the test removes after the run by this pid.
    std::printf("VICTIM rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
    std::fflush(stdout);
    raise(SIGKILL);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int calls = 1;; ++calls) {
    braidResult_t res = braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, stream.handle());
    stream.synchronize();
    if (res == braidSuccess) braidCommGetAsyncError(comm, &res);
    if (res == braidSuccess || res == braidInProgress) continue;
    const long long ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    std::printf("SURVIVOR rank=%d result=%d calls=%d ms=%lld error=%s\n", rank, static_cast<int>(res), calls, ms,
                braidGetLastError(comm));
    std::fflush(stdout);
    braidCommAbort(comm);
    return 0;
  }
}

}  // namespace

int main() {
  static braid::device::test::FakeRuntime rt;  // outlives the communicator
  braid::device::setRuntimeForTesting(&rt);
  // DEVICE_NO_RDMA=R: rank R's "GPU" cannot take part in GPUDirect RDMA (Runtime::rdmaSupport).
  if (const char* r = std::getenv("DEVICE_NO_RDMA")) {
    const char* me = std::getenv("BRAID_RANK");
    rt.noRdma = me && std::atoi(r) == std::atoi(me);
  }
  braidComm_t comm = nullptr;
  if (braidCommInitFromEnv(&comm) != braidSuccess) {
    std::printf("DEVICE rank=? error=init: %s\n", braidGetLastError(nullptr));
    return 1;
  }
  int rank = 0, n = 1;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  if (const char* die = std::getenv("DEVICE_DIE_RANK")) return dieOrSurvive(rt, comm, rank, std::atoi(die));
  std::string error;
  braid::device::test::everyCollectiveOnDevice(rt, comm, rank, n, error);
  std::printf("DEVICE rank=%d error=%s kernels=%d slotKernels=%d areas=%d registered=%d copies=%d rdmaFlushes=%d "
              "fdImports=%d offered=%zu\n",
              rank, error.empty() ? "none" : error.c_str(), rt.kernels.load(), rt.slotKernels.load(),
              rt.slotAreas.load(), rt.registered.load(), rt.copiesDone.load(), rt.rdmaFlushes.load(),
              rt.fdImports.load(), braid::publishedFds());
  braidCommDestroy(comm);
  std::printf("AFTER rank=%d areas=%d imports=%d registered=%d hostLive=%d pid=%d\n", rank, rt.slotAreas.load(),
              rt.imports.load(), rt.registered.load(), rt.hostLive.load(), static_cast<int>(getpid()));
  std::fflush(stdout);
  return error.empty() ? 0 : 1;
}

// One rank of a job whose device path runs on the host-memory runtime, for the direct paths
// across processes (device_multiproc.sh under braidrun): every collective on "device"
// buffers, then one line with what it found and how the path ran, and one more after
// destroy with what is left.
//   DEVICE rank=R error=<first difference or none> kernels=K slotKernels=S areas=A registered=G copies=C
//   AFTER rank=R areas=A imports=I registered=G hostLive=H pid=P
// (P names the process's device slot segments, /dev/shm/braid-fake-slots-P-*.)
// Exits 1 on any error.

#include <unistd.h>

#include <cstdio>
#include <string>

#include "braid/braid.h"
#include "device_checks.h"
#include "fake_runtime.h"

int main() {
  static braid::device::test::FakeRuntime rt;  // outlives the communicator
  braid::device::setRuntimeForTesting(&rt);
  braidComm_t comm = nullptr;
  if (braidCommInitFromEnv(&comm) != braidSuccess) {
    std::printf("DEVICE rank=? error=init: %s\n", braidGetLastError(nullptr));
    return 1;
  }
  int rank = 0, n = 1;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  std::string error;
  braid::device::test::everyCollectiveOnDevice(rt, comm, rank, n, error);
  std::printf("DEVICE rank=%d error=%s kernels=%d slotKernels=%d areas=%d registered=%d copies=%d\n", rank,
              error.empty() ? "none" : error.c_str(), rt.kernels.load(), rt.slotKernels.load(), rt.slotAreas.load(),
              rt.registered.load(), rt.copiesDone.load());
  braidCommDestroy(comm);
  std::printf("AFTER rank=%d areas=%d imports=%d registered=%d hostLive=%d pid=%d\n", rank, rt.slotAreas.load(),
              rt.imports.load(), rt.registered.load(), rt.hostLive.load(), static_cast<int>(getpid()));
  std::fflush(stdout);
  return error.empty() ? 0 : 1;
}

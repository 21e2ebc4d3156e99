// What braid reads around UCX: whether UCX_TLS may put messages through shared memory.

#include "common/ucx_env.h"

#include "support/catch.h"

using braid::ucxTlsMayUseSharedMemory;

TEST_CASE("UCX_TLS may use shared memory unless it lists only other transports", "[unit]") {
  // Unset, empty, exclusions and "all" leave UCX its choice, shared memory included.
  CHECK(ucxTlsMayUseSharedMemory(nullptr));
  CHECK(ucxTlsMayUseSharedMemory(""));
  CHECK(ucxTlsMayUseSharedMemory("^tcp"));
  CHECK(ucxTlsMayUseSharedMemory("^sm"));
  CHECK(ucxTlsMayUseSharedMemory("all"));
  for (const char* tls : {"sm", "sm,self", "tcp,sm,self", "shm", "posix,self", "sysv", "tcp,cma", "knem", "xpmem", "mm"})
    CHECK(ucxTlsMayUseSharedMemory(tls));
  // Lists of stream and network transports only; names are matched whole.
  for (const char* tls : {"tcp", "tcp,self", "self,tcp", "rc,ud,self", "rc_verbs", "smx,tcp", "tcpsm"})
    CHECK_FALSE(ucxTlsMayUseSharedMemory(tls));
}

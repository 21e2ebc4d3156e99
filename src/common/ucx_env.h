#pragma once
// What braid decides around UCX without loading it, from UCX's own settings: the UCX
// plugin's rendezvous threshold and the core's slot geometry for UCX on one host (with
// common/tcp_pacing.h).

namespace braid {

// Whether a UCX_TLS value (nullptr when unset) may let UCX move messages through shared
// memory: unset, empty, an exclusion list ("^tcp"), "all", or a list naming sm, shm, posix,
// sysv, cma, knem, xpmem or mm. False only for a list of stream and network transports
// ("tcp,self", "rc,ud,self").
bool ucxTlsMayUseSharedMemory(const char* tls);

}  // namespace braid

#pragma once
// What braid decides around UCX without loading it, from UCX's own settings and the kernel:
// the UCX plugin's rendezvous threshold and the core's slot geometry for UCX on one host.

#include <string>

namespace braid {

// Whether a UCX_TLS value (nullptr when unset) may let UCX move messages through shared
// memory: unset, empty, an exclusion list ("^tcp"), "all", or a list naming sm, shm, posix,
// sysv, cma, knem, xpmem or mm. False only for a list of stream and network transports
// ("tcp,self", "rc,ud,self").
bool ucxTlsMayUseSharedMemory(const char* tls);

// The kernel's default tcp congestion control for new connections of this process's network
// namespace (/proc/sys/net/ipv4/tcp_congestion_control), or "" when it cannot be read.
// UCX's tcp sockets use it: UCX sets no congestion control of its own.
std::string tcpCongestionControl();

// Whether connections under `name` are paced by the kernel on their own, without a pacing
// queue discipline: the BBR family ("bbr", "bbr2", ...).
bool congestionControlPaces(const std::string& name);

}  // namespace braid

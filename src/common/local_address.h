#pragma once
// Whether an IPv4 address belongs to this host (this network namespace): shared by braidrun,
// which decides whether a host name is its own, and the tcp transport, which leaves a pacing
// congestion control on connections that never leave the kernel.

#include <netinet/in.h>

namespace braid {

// Loopback (127.0.0.0/8), or the address of one of this namespace's interfaces.
bool isLocalIpv4Address(in_addr a);

}  // namespace braid

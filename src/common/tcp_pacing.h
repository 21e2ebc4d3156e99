#pragma once
// Whether the kernel paces tcp connections by itself, which decides how braid cuts
// messages for UCX's tcp on one host and which congestion control braid's own tcp
// connections within one host take.

#include <string>

namespace braid {

// The kernel's default tcp congestion control for new connections of this process's network
// namespace (/proc/sys/net/ipv4/tcp_congestion_control), or "" when it cannot be read.
// UCX's tcp sockets use it: UCX sets no congestion control of its own.
std::string tcpCongestionControl();

// Whether connections under `name` are paced by the kernel on their own, without a pacing
// queue discipline: the BBR family ("bbr", "bbr2", ...).
bool congestionControlPaces(const std::string& name);

}  // namespace braid

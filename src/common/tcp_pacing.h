#pragma once
// Whether the kernel paces tcp connections by itself, which decides how braid cuts
// messages for UCX's tcp on one host and which congestion control braid's own tcp
// connections within one host take; and taking sockets within one host off it.

#include <cstdint>
#include <set>
#include <string>

namespace braid {

// The kernel's default tcp congestion control for new connections of this process's network
// namespace (/proc/sys/net/ipv4/tcp_congestion_control), or "" when it cannot be read.
// UCX's tcp sockets start with it: UCX sets no congestion control of its own.
std::string tcpCongestionControl();

// Whether connections under `name` are paced by the kernel on their own, without a pacing
// queue discipline: the BBR family ("bbr", "bbr2", ...).
bool congestionControlPaces(const std::string& name);

// A tcp socket's congestion control (TCP_CONGESTION), or "" when it cannot be read.
std::string congestionControlOf(int fd);

// Switches a tcp socket whose congestion control paces to cubic (reno where cubic is not
// allowed). Returns the one it had and sets *now to the one it has when it switched it;
// returns "" when it did not (it does not pace, or neither could be set).
std::string unpaceSocket(int fd, std::string* now = nullptr);

// Whether this process may take a socket off the kernel's pacing congestion control: a
// socket of its own takes cubic or reno (false when the kernel does not pace).
bool canUnpaceSockets();

// The sockets this process has open (/proc/self/fd), by inode.
std::set<uint64_t> openSocketInodes();

// For a library that opens tcp sockets of its own and hands out none of them (UCX's tcp):
// among the sockets opened since `before` (openSocketInodes), takes those connected to an
// address of this host (common/local_address.h) off a pacing congestion control
// (unpaceSocket), and the listening ones when `listeners` (a connection it accepts starts
// with its listener's). Returns how many it switched; sets *had and *now from the last.
int unpaceNewLocalSockets(const std::set<uint64_t>& before, bool listeners, std::string* had = nullptr,
                          std::string* now = nullptr);

}  // namespace braid
